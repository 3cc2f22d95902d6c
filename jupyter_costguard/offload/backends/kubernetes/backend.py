"""Runs offloaded jobs as Kubernetes Jobs (``batch/v1``), through the official client.

One job is a ConfigMap (its spec and small sent variables) and a Job whose pod runs the pod
entry point (`pod`, which runs the same job runner the local backend runs).

The server sees the pod only through the Kubernetes API, so `sync` (called by the job
service's follower) turns what the API says into the files the follower reads: it appends new
pod log bytes to the job's log and writes its status in the runner's format from the Job's
and pods' status (`status.derive`). A pod that waits says why (no node with a free GPU,
quota, image pull) in the log and in `describe`. No waiting limit: a job waits as long as the
cluster needs.

All API calls run on the job service's worker thread, with request timeouts. An API that does
not answer never makes a job `lost`: only a Job that is gone does.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from jupyter_costguard.offload import jobdir
from jupyter_costguard.offload.backends.base import Backend
from jupyter_costguard.offload.backends.kubernetes import manifest, storage
from jupyter_costguard.offload.backends.kubernetes.manifest import KubernetesSettings, ManifestError
from jupyter_costguard.offload.backends.kubernetes.status import (
    container,
    derive,
    finished,
    new_log_lines,
    pod_phase,
    pod_summary,
    running,
)
from jupyter_costguard.offload.errors import JobError
from jupyter_costguard.offload.jobdir import RunnerStatus
from jupyter_costguard.offload.spec import Job

log = logging.getLogger("jupyter_costguard")

#: (connect, read) seconds for every API request
REQUEST_TIMEOUT = (5.0, 30.0)
#: pod logs are asked for "since N seconds ago", from the newest line already read, with this
#: margin for the server's clock running behind the node's; lines already read are skipped by
#: their timestamps
LOG_SINCE_MARGIN_SECONDS = 60
LOG_LIMIT_BYTES = 8 << 20
#: at most this long between two warnings about an API that fails, per job
WARN_EVERY_SECONDS = 60.0


class KubernetesExecutor(Backend):
    """A `Backend` whose jobs run as Kubernetes Jobs. `configuration` (a
    ``kubernetes.client.Configuration``) is used as given; without it the client is
    configured in-cluster when the server runs in a pod (``KUBERNETES_SERVICE_HOST``), else
    from kubeconfig (`kubeconfig`, `context`), on first use so a server without a cluster
    starts fine. `sync_interval` bounds how often one job's state is read from the API."""

    name = "kubernetes"

    def __init__(self, settings: KubernetesSettings | None = None, *,
                 configuration: Any = None, kubeconfig: str | None = None,
                 context: str | None = None, in_cluster: bool | None = None,
                 sync_interval: float = 2.0, name: str = "kubernetes",
                 clock: Callable[[], float] = time.time) -> None:
        self.settings = settings or KubernetesSettings()
        self.name = name
        self._configuration = configuration
        self.kubeconfig = kubeconfig
        self.context = context
        self.in_cluster = in_cluster
        self.sync_interval = sync_interval
        self.clock = clock
        self._api: Any = None
        self._synced: dict[str, float] = {}
        self._seen: dict[str, tuple[float, bool]] = {}
        self._warned: dict[str, float] = {}

    # --- the client ------------------------------------------------------------------------

    def _client(self) -> Any:
        if self._api is None:
            from kubernetes import client, config

            cfg = self._configuration
            if cfg is None:
                cfg = client.Configuration()
                if self.in_cluster or (self.in_cluster is None
                                       and os.environ.get("KUBERNETES_SERVICE_HOST")):
                    config.load_incluster_config(client_configuration=cfg)
                else:
                    config.load_kube_config(config_file=self.kubeconfig, context=self.context,
                                            client_configuration=cfg)
            self._api = client.ApiClient(cfg)
        return self._api

    def _call(self, api: str, method: str, *args: Any, **kw: Any) -> Any:
        """One API call, answered as the JSON document the server sent (the same for every
        client version). Credentials that expired (401) are loaded again, once."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        for again in (True, False):
            target = getattr(client, api)(self._client())
            try:
                resp = getattr(target, method)(*args, _preload_content=False,
                                               _request_timeout=REQUEST_TIMEOUT, **kw)
            except ApiException as e:
                if e.status == 401 and again and self._configuration is None:
                    self._api = None
                    continue
                raise
            data = resp.data
            if method == "read_namespaced_pod_log":
                return data
            return json.loads(data) if data else {}
        raise AssertionError("unreachable")

    # --- launching -------------------------------------------------------------------------

    def launch(self, job: Job, job_dir: Path, environment: Mapping[str, str] = {}) -> str | None:
        """Create the ConfigMap and the Job; returns the Job's name. A job Kubernetes refuses
        (no image configured, quota exceeded, input too big) ends `failed` with the reason
        rather than raising: the follower picks that up like any runner's verdict."""
        name = manifest.job_name(job)
        previous = jobdir.read_status(job_dir) or RunnerStatus(state="queued", phase="queued")
        state = {"job": name, "namespace": self.settings.namespace, "pods": {},
                 "attempt_base": previous.attempt,
                 "attempts_before": list(previous.attempts), "final": False}
        _write_state(job_dir, state)
        try:
            self._create(job, job_dir, name, environment)
        except Exception as e:  # refused: say why, in the job's own words
            reason = _refusal(e)
            log.warning("costguard: job %d: Kubernetes refused it: %s", job.id, reason)
            jobdir.say(job_dir, f"Kubernetes refused the job: {reason}")
            now = self.clock()
            times = dict(previous.phase_times)
            times.setdefault("done", now)
            jobdir.write_status(job_dir, dataclasses.replace(
                previous, state="failed", phase="done", exit_reason=reason, phase_times=times,
                kernel_pid=None, runner_pid=None, updated=now))
            state["final"] = True
            _write_state(job_dir, state)
            return None
        jobdir.say(job_dir, f"submitted as Kubernetes Job {self.settings.namespace}/{name}")
        return name

    def _create(self, job: Job, job_dir: Path, name: str,
                environment: Mapping[str, str]) -> None:
        spec_doc = json.loads((job_dir / jobdir.SPEC).read_text())
        pod_doc = manifest.pod_spec_doc(spec_doc, job, self.settings, name)
        inputs_path = job_dir / jobdir.INPUTS
        inputs = inputs_path.read_bytes() if inputs_path.exists() else None
        prefix = manifest.storage_prefix(self.settings, job)
        if inputs is not None and prefix is not None and \
                len(inputs) + len(json.dumps(pod_doc)) > self.settings.max_configmap_bytes:
            url = f"{prefix}/{name}/{jobdir.INPUTS}"
            storage.put(url, inputs)
            pod_doc["kubernetes"]["inputs_url"] = url
            inputs = None
        cm = manifest.configmap(job, self.settings, name, pod_doc, inputs)
        body = manifest.job_manifest(job, self.settings, name, environment)
        for doc, kind in ((cm, "V1ConfigMap"), (body, "V1Job")):
            dropped = unknown_fields(doc, kind)
            if dropped:
                raise ManifestError(f"the {kind[2:]} has field(s) Kubernetes does not know: "
                                    f"{', '.join(dropped)} (check the c.KubernetesBackend "
                                    "settings)")
        ns = self.settings.namespace
        self._call("CoreV1Api", "create_namespaced_config_map", ns, cm,
                   field_validation="Strict")
        try:
            created = self._call("BatchV1Api", "create_namespaced_job", ns, body,
                                 field_validation="Strict")
        except Exception as e:
            if not _is_api_error(e):  # no answer: the Job may exist; it must not run alone
                self._quietly("BatchV1Api", "delete_namespaced_job", name, ns,
                              body=_background())
            self._quietly("CoreV1Api", "delete_namespaced_config_map", name, ns)
            raise
        # the ConfigMap goes when the Job goes (cancel, ttlSecondsAfterFinished)
        owner = {"apiVersion": "batch/v1", "kind": "Job", "name": name,
                 "uid": created.get("metadata", {}).get("uid"), "blockOwnerDeletion": False}
        try:
            self._call("CoreV1Api", "patch_namespaced_config_map", name, ns,
                       {"metadata": {"ownerReferences": [owner]}},
                       _content_type="application/merge-patch+json")
        except Exception as e:  # harmless: cancel deletes it anyway
            log.warning("costguard: job %d: could not tie ConfigMap %s to its Job: %s",
                        job.id, name, e)

    def _quietly(self, api: str, method: str, *args: Any, **kw: Any) -> None:
        """A clean-up call whose failure changes nothing for the job."""
        try:
            self._call(api, method, *args, **kw)
        except Exception as e:
            if getattr(e, "status", None) != 404:
                log.warning("costguard: %s %s failed: %s", method, args[0], e)

    # --- following -------------------------------------------------------------------------

    def _job_name(self, job: Job, job_dir: Path) -> str | None:
        return job.backend_ref or _read_state(job_dir).get("job")

    def _read_job(self, name: str) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            doc = self._call("BatchV1Api", "read_namespaced_job", name, self.settings.namespace)
        except ApiException as e:
            if e.status == 404:
                self._seen[name] = (self.clock(), False)
                return None
            raise
        self._seen[name] = (self.clock(), True)
        return doc

    def _pods(self, name: str) -> list[dict[str, Any]]:
        doc = self._call("CoreV1Api", "list_namespaced_pod", self.settings.namespace,
                         label_selector=f"job-name={name}")
        pods = list(doc.get("items") or [])
        pods.sort(key=lambda p: (p["metadata"].get("creationTimestamp") or "",
                                 p["metadata"].get("name", "")))
        return pods

    def _events(self, name: str) -> list[dict[str, Any]]:
        doc = self._call("CoreV1Api", "list_namespaced_event", self.settings.namespace,
                         field_selector=f"involvedObject.name={name}")
        events = list(doc.get("items") or [])
        events.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
        return events

    def reconcile(self, job: Job, job_dir: Path) -> bool:
        """Whether the Job still exists; what its pods say is written by `sync`, and a Job
        that is gone is for the follower to settle. An API that cannot be reached says nothing
        about the job, so it counts as still there."""
        name = self._job_name(job, job_dir)
        if name is None:
            return False
        seen = self._seen.get(name)
        if seen is not None and self.clock() - seen[0] < self.sync_interval:
            return seen[1]
        try:
            return self._read_job(name) is not None
        except Exception as e:
            self._warn(name, f"cannot read Job {name}: {e}")
            return True

    def cancel(self, job: Job, job_dir: Path, force: bool = False) -> None:
        """Delete the Job and, through it, its pods (which get SIGTERM: the runner shuts its
        kernel down); `force` deletes what pods are left without a grace period. A cancel
        the API does not take is a 503 for the user; a forced one (the follower's) is tried
        and left at that."""
        from kubernetes import client

        name = self._job_name(job, job_dir)
        if name is None:
            return
        ns = self.settings.namespace
        if force:
            self._quietly("BatchV1Api", "delete_namespaced_job", name, ns, body=_background())
            self._quietly("CoreV1Api", "delete_collection_namespaced_pod", ns,
                          label_selector=f"job-name={name}",
                          body=client.V1DeleteOptions(grace_period_seconds=0,
                                                      propagation_policy="Background"))
        else:
            try:
                self._call("BatchV1Api", "delete_namespaced_job", name, ns, body=_background())
            except Exception as e:
                if getattr(e, "status", None) != 404:
                    raise JobError(f"Kubernetes did not take the cancel of Job {ns}/{name}: "
                                   f"{_refusal(e)}", 503) from None
        self._seen[name] = (self.clock(), False)
        self._quietly("CoreV1Api", "delete_namespaced_config_map", name, ns)

    def sync(self, job: Job, job_dir: Path) -> None:
        """Bring the job's log and status up to date with the API (at most every
        `sync_interval`); the follower calls it before it reads the status."""
        state = _read_state(job_dir)
        name = self._job_name(job, job_dir)
        if name is None or state.get("final") or state.get("job") != name:
            return
        now = self.clock()
        if now - self._synced.get(name, 0.0) < self.sync_interval:
            return
        self._synced[name] = now
        try:
            self._sync(job, job_dir, name, state)
        except Exception as e:
            self._warn(name, f"cannot follow Job {name}: {e}")

    def _warn(self, name: str, text: str) -> None:
        now = self.clock()
        if now - self._warned.get(name, 0.0) >= WARN_EVERY_SECONDS:
            self._warned[name] = now
            log.warning("costguard: %s", text)

    def _sync(self, job: Job, job_dir: Path, name: str, state: dict[str, Any]) -> None:
        obj = self._read_job(name)
        if obj is None:  # deleted (cancel, TTL, by hand): the follower decides what that means
            return
        pods = self._pods(name)
        for pod in pods:
            self._read_log(job_dir, pod, state)
        _write_state(job_dir, state)  # the lines appended are not appended again
        events: list[dict[str, Any]] = []
        if not finished(obj) and not any(running(p) for p in pods):
            events = self._events(name)
            waiting = [p for p in pods if pod_phase(p) == "Pending"]
            if waiting:
                events += self._events(waiting[-1]["metadata"]["name"])
        status, lines = derive(job, obj, pods, events, state, self.clock())
        for line in lines:
            jobdir.say(job_dir, line)
        if status["state"] in ("succeeded", "failed"):
            prefix = manifest.storage_prefix(self.settings, job)
            if prefix is not None:
                self._fetch_outputs(job_dir, manifest.outputs_url(prefix, name))
            state["final"] = True
        jobdir.write_json(job_dir / jobdir.STATUS, status)
        _write_state(job_dir, state)

    def _fetch_outputs(self, job_dir: Path, url: str) -> None:
        for file in jobdir.OUTPUT_FILES:
            try:
                data = storage.get(f"{url}/{file}")
            except FileNotFoundError:
                continue
            except Exception as e:
                jobdir.say(job_dir, f"could not fetch {file} from {url}: {e}")
                continue
            jobdir.write_bytes(job_dir / file, data)

    def _read_log(self, job_dir: Path, pod: dict[str, Any], state: dict[str, Any]) -> None:
        """Append the pod's new log lines to the job's log; a pod whose container has ended is
        read once more, then never again."""
        pod_name = pod["metadata"]["name"]
        cursor = state["pods"].setdefault(pod_name, {"key": None, "n": 0, "done": False})
        runner = container(pod)
        if cursor["done"] or runner is None:
            return
        current = runner.get("state") or {}
        if not ("running" in current or "terminated" in current):
            return
        kw: dict[str, Any] = {"container": manifest.CONTAINER, "timestamps": True,
                              "limit_bytes": LOG_LIMIT_BYTES}
        if cursor["key"] is not None:
            kw["since_seconds"] = max(1, int(self.clock() - cursor["key"][0])
                                      + LOG_SINCE_MARGIN_SECONDS)
        data = self._call("CoreV1Api", "read_namespaced_pod_log", pod_name,
                          self.settings.namespace, **kw)
        fresh = new_log_lines(data, cursor, truncated=len(data) >= LOG_LIMIT_BYTES)
        if fresh:
            with open(job_dir / jobdir.LOG, "ab") as f:
                f.write(fresh)
        if "terminated" in current and len(data) < LOG_LIMIT_BYTES:
            cursor["done"] = True

    def describe(self, job: Job, job_dir: Path) -> dict[str, Any] | None:
        """What Kubernetes says about the job now: its phase, why it waits, its pods and the
        events about them (for a UI or an admin; the follower does not need it)."""
        name = self._job_name(job, job_dir)
        if name is None:
            return None
        try:
            obj = self._read_job(name)
            if obj is None:
                return {"job": name, "namespace": self.settings.namespace, "exists": False}
            pods = self._pods(name)
            events = self._events(name)
            for pod in pods:
                events += self._events(pod["metadata"]["name"])
        except Exception as e:
            return {"job": name, "namespace": self.settings.namespace, "exists": None,
                    "error": f"the Kubernetes API did not answer: {e}"}
        state = dict(_read_state(job_dir))
        state["pods"] = {k: dict(v) for k, v in (state.get("pods") or {}).items()}
        status, _ = derive(job, obj, pods, events, state, self.clock())
        return {
            "job": name, "namespace": self.settings.namespace, "exists": True,
            "state": status["state"], "phase": status["phase"],
            "waiting": status["kubernetes"]["waiting"],
            "exit_reason": status.get("exit_reason"),
            "conditions": [{k: c.get(k) for k in ("type", "status", "reason", "message")}
                           for c in (obj.get("status") or {}).get("conditions") or []],
            "pods": [pod_summary(p) for p in pods],
            "events": [{"object": (e.get("involvedObject") or {}).get("name"),
                        "type": e.get("type"), "reason": e.get("reason"),
                        "message": e.get("message"), "count": e.get("count"),
                        "last": e.get("lastTimestamp") or e.get("eventTime")}
                       for e in events],
        }


# --- the job directory's own notes ---------------------------------------------------------------


def _read_state(job_dir: Path) -> dict[str, Any]:
    return jobdir.read_object(job_dir / jobdir.K8S_STATE)


def _write_state(job_dir: Path, state: Mapping[str, Any]) -> None:
    jobdir.write_json(job_dir / jobdir.K8S_STATE, state)


def _is_api_error(e: BaseException) -> bool:
    """The API server answered (with an error), as opposed to no answer at all."""
    return getattr(e, "status", None) is not None


def _background() -> Any:
    from kubernetes import client

    return client.V1DeleteOptions(propagation_policy="Background")


def _refusal(e: BaseException) -> str:
    """An exception as the reason a job was refused: the API server's own message for an
    API error ("exceeded quota: ..." comes as 403 Forbidden)."""
    status = getattr(e, "status", None)
    body = getattr(e, "body", None)
    if status is not None:
        message = None
        try:
            message = json.loads(body).get("message") if body else None
        except (ValueError, AttributeError):
            message = None
        message = message or getattr(e, "reason", None) or str(e)
        if "exceeded quota" in str(message):
            return f"quota exceeded: {message}"
        return f"Kubernetes API error {status}: {message}"
    if isinstance(e, ManifestError):
        return str(e)
    return f"{type(e).__name__}: {e}"


def unknown_fields(doc: Any, kind: str) -> list[str]:
    """Paths of `doc` that the official client's model `kind` (``V1Job``) does not know:
    the API server would drop them (or refuse them, with strict field validation)."""
    from kubernetes import client

    api = client.ApiClient()
    model = api._ApiClient__deserialize(doc, kind)
    again = api.sanitize_for_serialization(model)
    lost: list[str] = []
    _compare(doc, again, "", lost)
    return lost


def _compare(a: Any, b: Any, path: str, lost: list[str]) -> None:
    if isinstance(a, Mapping):
        if not isinstance(b, Mapping):
            lost.append(path or "/")
            return
        for k, v in a.items():
            if k not in b:
                lost.append(f"{path}.{k}" if path else str(k))
            else:
                _compare(v, b[k], f"{path}.{k}" if path else str(k), lost)
    elif isinstance(a, list):
        if not isinstance(b, list) or len(a) != len(b):
            lost.append(path)
            return
        for i, (x, y) in enumerate(zip(a, b)):
            _compare(x, y, f"{path}[{i}]", lost)
    elif a != b:
        lost.append(path)

