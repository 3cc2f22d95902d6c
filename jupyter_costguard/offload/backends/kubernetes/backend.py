"""Runs offloaded jobs as Kubernetes Jobs (``batch/v1``), through the official client.

One job is a ConfigMap (its ``spec.json`` and small ``inputs.pkl``) and a Job whose pod runs
this module's pod entry point
(``python -m jupyter_costguard.offload.backends.kubernetes.backend pod``), which
copies the input into a writable directory and runs the same job runner the local backend
runs, streaming the runner's log to the container's stdout and leaving the runner's final
status as the container's termination message.

The server sees the pod only through the Kubernetes API, so `sync` (called by the job
service's follower) turns what the API says into the files the follower reads: it appends new
pod log bytes to ``log.txt`` and writes ``status.json`` in the runner's format from the Job's
and pods' status. A pod that waits says why (no node with a free GPU, quota, image pull) in
the log and in `describe`. No waiting limit: a job waits as long as the cluster needs.

All API calls run on the job service's worker thread, with request timeouts. An API that does
not answer never makes a job `lost`: only a Job that is gone does.
"""

from __future__ import annotations

import calendar
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from jupyter_costguard.offload.backends.kubernetes import manifest
from jupyter_costguard.offload.backends.kubernetes.manifest import KubernetesSettings, ManifestError
from jupyter_costguard.offload.backends.local import RUNNER_MODULE
from jupyter_costguard.offload.runner import read_json, write_json
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
STATE_FILE = "k8s.json"
OUTPUT_FILES = ("outputs.json", "results.json", "results.pkl", "env.json")
TERMINATION_LOG = "/dev/termination-log"
#: container waiting reasons that are just the normal way up
_STARTING = frozenset({"ContainerCreating", "PodInitializing"})


class KubernetesBackend:
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
        previous = read_json(job_dir / "status.json") or {}
        state = {"job": name, "namespace": self.settings.namespace, "pods": {},
                 "attempt_base": int(previous.get("attempt", 0)),
                 "attempts_before": list(previous.get("attempts", [])), "final": False}
        _write_state(job_dir, state)
        try:
            self._create(job, job_dir, name, environment)
        except Exception as e:  # refused: say why, in the job's own words
            reason = _refusal(e)
            log.warning("costguard: job %d: Kubernetes refused it: %s", job.id, reason)
            _say(job_dir, f"Kubernetes refused the job: {reason}")
            now = self.clock()
            times = dict(previous.get("phase_times") or {})
            times.setdefault("done", now)
            write_json(job_dir / "status.json", {
                **previous, "state": "failed", "phase": "done", "exit_reason": reason,
                "phase_times": times, "attempt": int(previous.get("attempt", 0)),
                "kernel_pid": None, "runner_pid": None, "updated": now})
            state["final"] = True
            _write_state(job_dir, state)
            return None
        _say(job_dir, f"submitted as Kubernetes Job {self.settings.namespace}/{name}")
        return name

    def _create(self, job: Job, job_dir: Path, name: str,
                environment: Mapping[str, str]) -> None:
        spec_doc = json.loads((job_dir / "spec.json").read_text())
        pod_doc = manifest.pod_spec_doc(spec_doc, job, self.settings, name)
        inputs_path = job_dir / "inputs.pkl"
        inputs = inputs_path.read_bytes() if inputs_path.exists() else None
        prefix = manifest.storage_prefix(self.settings, job)
        if inputs is not None and prefix is not None and \
                len(inputs) + len(json.dumps(pod_doc)) > self.settings.max_configmap_bytes:
            url = f"{prefix}/{name}/inputs.pkl"
            _put(url, inputs)
            pod_doc["kubernetes"]["inputs_url"] = url
            inputs = None
        cm = manifest.configmap(job, self.settings, name, pod_doc, inputs)
        body = manifest.job_manifest(job, self.settings, name, environment)
        for doc, kind in ((cm, "V1ConfigMap"), (body, "V1Job")):
            dropped = unknown_fields(doc, kind)
            if dropped:
                raise ManifestError(f"the {kind[2:]} has field(s) Kubernetes does not know: "
                                    f"{', '.join(dropped)} (check the k8s_* settings)")
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

    def alive(self, job: Job, job_dir: Path) -> bool:
        """Whether the Job still exists. An API that cannot be reached says nothing about the
        job, so it counts as alive."""
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

        from jupyter_costguard.offload.service import JobError

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
        """Bring ``log.txt`` and ``status.json`` up to date with the API (at most every
        `sync_interval`); the follower calls it before it reads ``status.json``."""
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
        if not _finished(obj) and not any(_running(p) for p in pods):
            events = self._events(name)
            waiting = [p for p in pods if _pod_phase(p) == "Pending"]
            if waiting:
                events += self._events(waiting[-1]["metadata"]["name"])
        status, lines = derive(job, obj, pods, events, state, self.clock())
        for line in lines:
            _say(job_dir, line)
        if status["state"] in ("succeeded", "failed"):
            prefix = manifest.storage_prefix(self.settings, job)
            if prefix is not None:
                self._fetch_outputs(job_dir, f"{prefix}/{name}/out")
            state["final"] = True
        write_json(job_dir / "status.json", status)
        _write_state(job_dir, state)

    def _fetch_outputs(self, job_dir: Path, url: str) -> None:
        for file in OUTPUT_FILES:
            try:
                data = _get(f"{url}/{file}")
            except FileNotFoundError:
                continue
            except Exception as e:
                _say(job_dir, f"could not fetch {file} from {url}: {e}")
                continue
            tmp = job_dir / f"{file}.tmp"
            tmp.write_bytes(data)
            os.replace(tmp, job_dir / file)

    def _read_log(self, job_dir: Path, pod: dict[str, Any], state: dict[str, Any]) -> None:
        """Append the pod's new log lines to ``log.txt``; a pod whose container has ended is
        read once more, then never again."""
        pod_name = pod["metadata"]["name"]
        cursor = state["pods"].setdefault(pod_name, {"key": None, "n": 0, "done": False})
        container = _container(pod)
        if cursor["done"] or container is None:
            return
        current = container.get("state") or {}
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
            with open(job_dir / "log.txt", "ab") as f:
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
            "pods": [_pod_summary(p) for p in pods],
            "events": [{"object": (e.get("involvedObject") or {}).get("name"),
                        "type": e.get("type"), "reason": e.get("reason"),
                        "message": e.get("message"), "count": e.get("count"),
                        "last": e.get("lastTimestamp") or e.get("eventTime")}
                       for e in events],
        }


# --- the API's documents, read -----------------------------------------------------------------


def parse_time(text: Any) -> float | None:
    """RFC 3339 (``2024-05-01T10:00:00Z``, any fraction) as epoch seconds."""
    key = _time_key(text)
    return None if key is None else key[0] + key[1] / 1e9


def _time_key(text: Any) -> tuple[int, int] | None:
    """(seconds, nanoseconds): exact, unlike a float, so equal log timestamps compare equal."""
    if not isinstance(text, str):
        return None
    m = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$", text)
    if m is None:
        return None
    seconds = calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S"))
    if m.group(3) != "Z":
        sign = 1 if m.group(3)[0] == "+" else -1
        seconds -= sign * (int(m.group(3)[1:3]) * 3600 + int(m.group(3)[4:6]) * 60)
    return seconds, int((m.group(2) or "0")[:9].ljust(9, "0"))


def new_log_lines(data: bytes, cursor: dict[str, Any], truncated: bool = False) -> bytes:
    """The lines of a ``timestamps=true`` pod log not read before, without their timestamps.
    `cursor` holds the newest timestamp read and how many lines carried it (a repeated
    request overlaps the last one). A cut last line (`truncated`) is left for next time."""
    lines = data.split(b"\n")
    tail = lines.pop()  # after the last newline: empty, or a line without one
    if tail and not truncated:
        lines.append(tail + b"\x00")  # marked: it ends without a newline
    last = tuple(cursor["key"]) if cursor.get("key") is not None else None
    count = int(cursor.get("n", 0))
    seen_at_last = 0
    out = bytearray()
    for raw in lines:
        no_newline = raw.endswith(b"\x00")
        raw = raw[:-1] if no_newline else raw
        stamp, _, text = raw.partition(b" ")
        key = _time_key(stamp.decode("ascii", "replace"))
        if key is None:  # not a timestamped line: part of the previous one
            out += raw + (b"" if no_newline else b"\n")
            continue
        if last is not None and key < last:
            continue
        if last is not None and key == last:
            seen_at_last += 1
            if seen_at_last <= count:
                continue
            count += 1
        else:
            last, count, seen_at_last = key, 1, 1
        out += text + (b"" if no_newline else b"\n")
    cursor["key"] = list(last) if last is not None else None
    cursor["n"] = count
    return bytes(out)


def _conditions(obj: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {c.get("type"): c for c in (obj.get("status") or {}).get("conditions") or []
            if c.get("status") == "True" or c.get("type") == "PodScheduled"}


def _finished(obj: Mapping[str, Any]) -> bool:
    conds = _conditions(obj)
    return "Complete" in conds or "Failed" in conds


def _pod_phase(pod: Mapping[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def _container(pod: Mapping[str, Any]) -> dict[str, Any] | None:
    for c in (pod.get("status") or {}).get("containerStatuses") or []:
        if c.get("name") == manifest.CONTAINER:
            return dict(c)
    return None


def _running(pod: Mapping[str, Any]) -> bool:
    c = _container(pod)
    return c is not None and "running" in (c.get("state") or {})


def _terminated(pod: Mapping[str, Any]) -> dict[str, Any] | None:
    c = _container(pod)
    if c is None:
        return None
    return (c.get("state") or {}).get("terminated")


def _disrupted(pod: Mapping[str, Any]) -> dict[str, Any] | None:
    cond = _conditions(pod).get("DisruptionTarget")
    return cond if cond is not None and cond.get("status") == "True" else None


def _scheduled(pod: Mapping[str, Any]) -> dict[str, Any] | None:
    cond = _conditions(pod).get("PodScheduled")
    return cond if cond is not None and cond.get("status") == "True" else None


def _pod_failure(pod: Mapping[str, Any]) -> str:
    """Why a pod ended without success, in a line."""
    term = _terminated(pod) or {}
    parts = []
    if term.get("reason") and term.get("reason") != "Error":
        parts.append(str(term["reason"]))
    if term.get("exitCode") is not None:
        parts.append(f"exit code {term['exitCode']}")
    status = pod.get("status") or {}
    if status.get("reason"):
        parts.append(f"{status['reason']}: {status.get('message') or ''}".rstrip(": "))
    message = _termination_message(pod)
    if isinstance(message, str) and message.strip():
        parts.append(message.strip().splitlines()[-1][:300])
    return ", ".join(parts) or "the pod failed"


def _termination_message(pod: Mapping[str, Any]) -> dict[str, Any] | str | None:
    """The runner's final status (JSON) that the pod entry leaves, or the last log lines
    Kubernetes put there instead when the container failed before that."""
    text = (_terminated(pod) or {}).get("message")
    if not text:
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return str(text)
    return doc if isinstance(doc, dict) else str(text)


def _runner_reason(pod: Mapping[str, Any]) -> str | None:
    """Why the runner in `pod` says its attempt failed. A runner that ended "cancelled" got
    SIGTERM from Kubernetes: the user's cancel deletes the Job, and then nobody asks."""
    message = _termination_message(pod)
    if not isinstance(message, dict):
        return None
    if message.get("state") == "cancelled":
        return ("the pod was stopped by Kubernetes (SIGTERM: the pod was deleted or evicted, "
                "or its node shut down)")
    reason = message.get("exit_reason")
    return str(reason) if reason else None


def _waiting_reason(pod: Mapping[str, Any]) -> str | None:
    scheduled = _conditions(pod).get("PodScheduled")
    if scheduled is not None and scheduled.get("status") != "True":
        reason = scheduled.get("reason") or "not scheduled"
        return f"{reason}: {scheduled.get('message')}" if scheduled.get("message") else reason
    c = _container(pod)
    waiting = ((c or {}).get("state") or {}).get("waiting") or {}
    if waiting.get("reason") and waiting["reason"] not in _STARTING:
        msg = waiting.get("message")
        return f"{waiting['reason']}: {msg}" if msg else str(waiting["reason"])
    return None


def _event_reason(events: list[dict[str, Any]]) -> str | None:
    """The newest warning: the Job controller's "exceeded quota" when it cannot create the
    pod, or the scheduler's and kubelet's complaints."""
    for e in reversed(events):
        if e.get("type") != "Warning":
            continue
        message = str(e.get("message") or "")
        if "exceeded quota" in message:
            return f"quota exceeded: {message}"
        return f"{e.get('reason')}: {message}" if message else str(e.get("reason"))
    return None


def _pod_summary(pod: Mapping[str, Any]) -> dict[str, Any]:
    term = _terminated(pod)
    return {"name": pod["metadata"]["name"], "phase": _pod_phase(pod),
            "node": (pod.get("spec") or {}).get("nodeName"),
            "waiting": _waiting_reason(pod),
            "disrupted": (_disrupted(pod) or {}).get("reason"),
            "exit_code": term.get("exitCode") if term else None,
            "reason": term.get("reason") if term else (pod.get("status") or {}).get("reason")}


def derive(job: Job, obj: Mapping[str, Any], pods: list[dict[str, Any]],
           events: list[dict[str, Any]], state: dict[str, Any],
           now: float) -> tuple[dict[str, Any], list[str]]:
    """``status.json`` (the runner's format) from the Job and its pods, and the lines to
    add to the log about what changed (updates `state`: what was already said)."""
    lines: list[str] = []
    said = state.setdefault("said", {})
    max_attempts = job.spec.retries + 1
    base = int(state.get("attempt_base", 0))
    attempts = list(state.get("attempts_before", []))
    times: dict[str, float] = {}
    counted = 0
    for pod in pods:
        pod_name = pod["metadata"]["name"]
        scheduled = _scheduled(pod)
        c = _container(pod) or {}
        running = (c.get("state") or {}).get("running") or {}
        term = _terminated(pod)
        disrupted = _disrupted(pod)
        if disrupted is None:
            counted += 1
        if scheduled is not None:
            times.setdefault("starting", parse_time(scheduled.get("lastTransitionTime")) or now)
            if said.get(pod_name) is None:
                said[pod_name] = "scheduled"
                node = (pod.get("spec") or {}).get("nodeName")
                lines.append(f"attempt {base + max(counted, 1)} of {max_attempts}: pod "
                             f"{pod_name}" + (f" on node {node}" if node else ""))
        started = running.get("startedAt") or (term or {}).get("startedAt")
        if started:
            times.setdefault("running", parse_time(started) or now)
        outcome = "running"
        reason = None
        if term is not None or _pod_phase(pod) in ("Succeeded", "Failed"):
            if _pod_phase(pod) == "Succeeded" or (term or {}).get("exitCode") == 0:
                outcome = "succeeded"
            elif disrupted is not None:
                outcome = "disrupted"
                reason = f"{disrupted.get('reason')}: {disrupted.get('message') or ''}" \
                    .rstrip(": ")
            else:
                outcome = "failed"
                reason = _runner_reason(pod) or _pod_failure(pod)
            if said.get(pod_name) != "ended":
                said[pod_name] = "ended"
                if outcome == "disrupted":
                    lines.append(f"pod {pod_name} was disrupted ({reason}); "
                                 "this does not count against the job's retries")
                elif outcome == "failed":
                    lines.append(f"pod {pod_name} failed: {reason}")
        message = _termination_message(pod)
        if isinstance(message, dict):
            for phase, when in (message.get("phase_times") or {}).items():
                if phase == "finishing" and isinstance(when, (int, float)):
                    times.setdefault(phase, float(when))
        attempts.append({
            "attempt": base + max(counted, 1), "pod": pod_name,
            "node": (pod.get("spec") or {}).get("nodeName"),
            "start": parse_time(started) if started else None,
            "end": parse_time((term or {}).get("finishedAt")) if term else None,
            "outcome": outcome, "reason": reason})

    conds = _conditions(obj)
    exit_reason: str | None = None
    waiting: str | None = None
    if "Complete" in conds:
        st, phase = "succeeded", "done"
        times["done"] = parse_time(conds["Complete"].get("lastTransitionTime")) \
            or parse_time((obj.get("status") or {}).get("completionTime")) or now
    elif "Failed" in conds:
        st, phase = "failed", "done"
        times["done"] = parse_time(conds["Failed"].get("lastTransitionTime")) or now
        exit_reason = _job_failure(job, conds["Failed"], pods)
    else:
        active = [p for p in pods if _pod_phase(p) in ("Pending", "Running")]
        current = active[-1] if active else None
        if current is not None and _running(current):
            st, phase = "running", "running"
        elif current is not None:
            waiting = _waiting_reason(current) or _event_reason(events)
            st, phase = ("running", "starting") if times.get("starting") or \
                _scheduled(current) else ("queued", "queued")
        else:
            waiting = _event_reason(events)
            if pods:
                st, phase = "running", "starting"
                waiting = waiting or "waiting for Kubernetes to start another pod"
            else:
                st, phase = "queued", "queued"
        if waiting and said.get("waiting") != waiting:
            lines.append(f"waiting: {waiting}")
        said["waiting"] = waiting
    if st in ("succeeded", "failed"):
        times.setdefault("finishing", times["done"])
    status = {
        "state": st, "phase": phase, "attempt": base + counted,
        "attempts": attempts, "phase_times": times, "exit_reason": exit_reason,
        "kernel_pid": None, "runner_pid": None, "updated": now,
        "kubernetes": {"job": obj.get("metadata", {}).get("name"), "waiting": waiting,
                       "pods": [p["metadata"]["name"] for p in pods]},
    }
    return status, lines


def _job_failure(job: Job, cond: Mapping[str, Any], pods: list[dict[str, Any]]) -> str:
    """The runner's own reason when the last pod got to say it; else what Kubernetes says."""
    failed = [p for p in pods if _disrupted(p) is None and _terminated(p) is not None
              and (_terminated(p) or {}).get("exitCode") != 0]
    reason = cond.get("reason")
    if reason == "DeadlineExceeded":
        limit = job.spec.resources.time_limit_seconds or 0.0
        return f"time limit of {limit:g} s exceeded"
    if failed:
        return _runner_reason(failed[-1]) or _pod_failure(failed[-1])
    text = cond.get("message") or ""
    return f"{reason}: {text}" if text else str(reason or "the Job failed")


# --- the job directory's own notes ---------------------------------------------------------------


def _read_state(job_dir: Path) -> dict[str, Any]:
    doc = read_json(job_dir / STATE_FILE)
    return doc if isinstance(doc, dict) else {}


def _write_state(job_dir: Path, state: Mapping[str, Any]) -> None:
    write_json(job_dir / STATE_FILE, state)


def _say(job_dir: Path, text: str) -> None:
    """A line of costguard's own in the job's log, as the runner writes them."""
    with open(job_dir / "log.txt", "a", encoding="utf-8") as f:
        f.write(f"[costguard {time.strftime('%H:%M:%S')}] {text}\n")


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


# --- object storage ----------------------------------------------------------------------------


def _put(url: str, data: bytes) -> None:
    import fsspec

    with fsspec.open(url, "wb", auto_mkdir=True) as f:
        f.write(data)


def _get(url: str) -> bytes:
    import fsspec

    with fsspec.open(url, "rb") as f:
        data: bytes = f.read()
    return data


# --- in the pod ----------------------------------------------------------------------------------


def pod_main(job_mount: Path, work: Path) -> int:
    """The container's command: copy the ConfigMap's files into the writable `work`, fetch
    inputs kept in object storage, run the job runner there, copy its log to stdout as it
    grows (``kubectl logs`` and the server read it), put outputs into object storage, and
    leave the runner's final status in the termination message. Exits with the runner's
    code (2: the input cannot be read, which the Job's podFailurePolicy does not retry)."""
    work.mkdir(parents=True, exist_ok=True)
    try:
        for entry in job_mount.iterdir():
            # a ConfigMap volume holds its files as links into a hidden ..data directory
            if not entry.name.startswith("..") and entry.is_file():
                shutil.copyfile(entry, work / entry.name)
        doc = json.loads((work / "spec.json").read_text())
        extra = doc.get("kubernetes") or {}
    except (OSError, ValueError) as e:
        print(f"costguard: cannot read the job's input in {job_mount}: {e}", file=sys.stderr)
        _terminate({"state": "failed", "exit_reason": f"cannot read the job's input: {e}"})
        return manifest.EXIT_USAGE
    log_path = work / "log.txt"
    log_path.touch()
    if extra.get("inputs_url"):
        try:
            (work / "inputs.pkl").write_bytes(_get(extra["inputs_url"]))
        except Exception as e:
            reason = f"cannot fetch the job's inputs from {extra['inputs_url']}: {e}"
            print(f"costguard: {reason}", file=sys.stderr)
            _terminate({"state": "failed", "exit_reason": reason})
            return 1
    proc = subprocess.Popen([sys.executable, "-m", RUNNER_MODULE, str(work)], cwd=str(work))

    def forward(sig: int, frame: Any) -> None:
        proc.send_signal(sig)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    done = threading.Event()
    tail = threading.Thread(target=_tail, args=(log_path, done), daemon=True)
    tail.start()
    rc = proc.wait()
    done.set()
    tail.join(10)
    status = read_json(work / "status.json") or {}
    if extra.get("outputs_url"):
        for file in OUTPUT_FILES:
            if (work / file).exists():
                try:
                    _put(f"{extra['outputs_url']}/{file}", (work / file).read_bytes())
                except Exception as e:
                    print(f"costguard: could not store {file}: {e}", file=sys.stderr)
    _terminate({k: status.get(k) for k in ("state", "exit_reason", "attempt", "phase_times")})
    return rc


def _tail(path: Path, done: threading.Event) -> None:
    out = sys.stdout.buffer
    with open(path, "rb") as f:
        while True:
            finished = done.is_set()
            chunk = f.read(1 << 16)
            if chunk:
                out.write(chunk)
                out.flush()
                continue
            if finished:
                return
            done.wait(0.2)


def _terminate(doc: dict[str, Any]) -> None:
    """The termination message holds at most 4096 bytes."""
    reason = doc.get("exit_reason")
    if isinstance(reason, str) and len(reason) > 2000:
        doc["exit_reason"] = reason[:2000] + "…"
    text = json.dumps(doc)
    if len(text.encode()) > 4000:
        text = json.dumps({"state": doc.get("state"), "exit_reason": doc.get("exit_reason")})
    try:
        Path(os.environ.get("COSTGUARD_TERMINATION_LOG", TERMINATION_LOG)).write_text(text)
    except OSError:
        pass


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3 or args[0] != "pod":
        print("usage: python -m jupyter_costguard.offload.backends.kubernetes.backend pod "
              "JOB_MOUNT WORK_DIR",
              file=sys.stderr)
        return manifest.EXIT_USAGE
    return pod_main(Path(args[1]), Path(args[2]))


__all__ = ["KubernetesBackend", "KubernetesSettings", "ManifestError", "derive",
           "new_log_lines", "unknown_fields"]

if __name__ == "__main__":
    sys.exit(main())
