"""A loopback stand-in for the few Kubernetes API routes the Kubernetes backend uses.

No cluster can run where the tests run, so the backend's official client talks to this
instead. It answers like the API server (JSON objects, ``Status`` documents for errors, the
``job-name`` label on a Job's pods, ``timestamps=true`` pod logs), and it is strict where the
real one can be: every request must carry the bearer token, created objects are held to the
client's own schema (strict field validation: an unknown field is a 422), a Job with a
``podFailurePolicy`` must have ``restartPolicy: Never``, and deleting a Job without a
propagation policy orphans its pods, as the real API does. It records every request for the
tests to check. Tests move jobs along by editing the stored objects (helpers below): the
stand-in runs nothing itself.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

TOKEN = "test-token"


def now_rfc3339(t: float | None = None) -> str:
    t = time.time() if t is None else t
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def nano_rfc3339(t: float) -> str:
    """As the kubelet stamps log lines: RFC 3339 with nanoseconds, trailing zeros cut."""
    ns = round((t % 1) * 1e9)
    frac = f"{ns:09d}".rstrip("0")
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(int(t))) + \
        (f".{frac}" if frac else "") + "Z"


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any


@dataclass
class Failure:
    status: int
    reason: str
    message: str


@dataclass
class StandIn:
    namespace: str = "costguard"
    requests: list[Request] = field(default_factory=list)
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    configmaps: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: pod name -> [(time, bytes of one line, with its newline)]
    logs: dict[str, list[tuple[float, bytes]]] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    #: (method, kind) -> the error the next such request gets
    fail_next: dict[tuple[str, str], Failure] = field(default_factory=dict)
    #: every POSTed object is checked with this (path -> problems); set by the tests to the
    #: client's schema check
    validate: Callable[[str, Any], list[str]] | None = None
    lock: threading.RLock = field(default_factory=threading.RLock)
    server: ThreadingHTTPServer | None = None

    # --- the server ----------------------------------------------------------------------

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> StandIn:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                split = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw
                req = Request(self.command, split.path, parse_qs(split.query),
                              {k.lower(): v for k, v in self.headers.items()}, body)
                with standin.lock:
                    standin.requests.append(req)
                    status, doc, ctype = standin.answer(req)
                data = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = do_PATCH = do_PUT = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    # --- answering -------------------------------------------------------------------------

    def answer(self, req: Request) -> tuple[int, Any, str]:
        if req.headers.get("authorization") != f"Bearer {TOKEN}":
            return _status(401, "Unauthorized", "no or a wrong bearer token")
        parts = req.path.strip("/").split("/")
        ns = self.namespace
        batch = ["apis", "batch", "v1", "namespaces", ns]
        core = ["api", "v1", "namespaces", ns]
        if parts[:5] == batch and parts[5:6] == ["jobs"]:
            return self._jobs(req, parts[6:])
        if parts[:4] == core and parts[4:5] == ["configmaps"]:
            return self._configmaps(req, parts[5:])
        if parts[:4] == core and parts[4:5] == ["pods"]:
            return self._pods(req, parts[5:])
        if parts[:4] == core and parts[4:5] == ["events"] and req.method == "GET":
            selector = _one(req, "fieldSelector")
            name = selector.split("=", 1)[1] if selector.startswith("involvedObject.name=") \
                else None
            items = [e for e in self.events if name is None
                     or e["involvedObject"]["name"] == name]
            return 200, {"kind": "EventList", "apiVersion": "v1", "items": items}, \
                "application/json"
        return _status(404, "NotFound", f"the stand-in does not serve {req.method} {req.path}")

    def _failure(self, method: str, kind: str) -> tuple[int, Any, str] | None:
        f = self.fail_next.pop((method, kind), None)
        return _status(f.status, f.reason, f.message) if f is not None else None

    def _create_checks(self, req: Request, kind: str) -> tuple[int, Any, str] | None:
        body = req.body
        if not isinstance(body, dict) or body.get("kind") != kind:
            return _status(400, "BadRequest", f"expected a {kind}")
        if _one(req, "fieldValidation") != "Strict":
            return _status(400, "BadRequest", "the stand-in wants fieldValidation=Strict")
        problems = self.validate(kind, body) if self.validate is not None else []
        if problems:
            return _status(422, "Invalid", f"{kind}: unknown or invalid: {', '.join(problems)}")
        return None

    def _jobs(self, req: Request, rest: list[str]) -> tuple[int, Any, str]:
        if req.method == "POST" and not rest:
            failed = self._failure("POST", "jobs") or self._create_checks(req, "Job")
            if failed:
                return failed
            body = req.body
            name = body["metadata"]["name"]
            if name in self.jobs:
                return _status(409, "AlreadyExists", f'jobs.batch "{name}" already exists')
            pod = body["spec"]["template"]["spec"]
            if "podFailurePolicy" in body["spec"] and pod.get("restartPolicy") != "Never":
                return _status(422, "Invalid", "podFailurePolicy needs restartPolicy Never")
            if not pod.get("containers") or not all(c.get("image") for c in pod["containers"]):
                return _status(422, "Invalid", "spec.template.spec.containers[*].image: Required")
            obj = json.loads(json.dumps(body))
            obj["metadata"].update(uid=str(uuid.uuid4()), creationTimestamp=now_rfc3339(),
                                   namespace=self.namespace)
            obj["status"] = {}
            self.jobs[name] = obj
            return 201, obj, "application/json"
        if len(rest) == 1 and req.method == "GET":
            obj = self.jobs.get(rest[0])
            if obj is None:
                return _status(404, "NotFound", f'jobs.batch "{rest[0]}" not found')
            return 200, obj, "application/json"
        if len(rest) == 1 and req.method == "DELETE":
            failed = self._failure("DELETE", "jobs")
            if failed:
                return failed
            obj = self.jobs.pop(rest[0], None)
            if obj is None:
                return _status(404, "NotFound", f'jobs.batch "{rest[0]}" not found')
            policy = (req.body or {}).get("propagationPolicy") or _one(req, "propagationPolicy")
            if policy in ("Background", "Foreground"):  # else the pods are orphaned
                for name in [n for n, p in self.pods.items()
                             if p["metadata"]["labels"].get("job-name") == rest[0]]:
                    del self.pods[name]
            uid = obj["metadata"]["uid"]
            for name in [n for n, c in self.configmaps.items()
                         if any(o.get("uid") == uid
                                for o in c["metadata"].get("ownerReferences") or [])]:
                del self.configmaps[name]
            return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success"}, \
                "application/json"
        return _status(405, "MethodNotAllowed", f"{req.method} {req.path}")

    def _configmaps(self, req: Request, rest: list[str]) -> tuple[int, Any, str]:
        if req.method == "POST" and not rest:
            failed = self._failure("POST", "configmaps") or self._create_checks(req, "ConfigMap")
            if failed:
                return failed
            name = req.body["metadata"]["name"]
            if name in self.configmaps:
                return _status(409, "AlreadyExists", f'configmaps "{name}" already exists')
            obj = json.loads(json.dumps(req.body))
            obj["metadata"].update(uid=str(uuid.uuid4()), creationTimestamp=now_rfc3339())
            self.configmaps[name] = obj
            return 201, obj, "application/json"
        if len(rest) == 1 and req.method == "PATCH":
            obj = self.configmaps.get(rest[0])
            if obj is None:
                return _status(404, "NotFound", f'configmaps "{rest[0]}" not found')
            if req.headers.get("content-type") != "application/merge-patch+json":
                return _status(415, "UnsupportedMediaType", "the stand-in takes merge patches")
            _merge(obj, req.body)
            return 200, obj, "application/json"
        if len(rest) == 1 and req.method == "DELETE":
            if self.configmaps.pop(rest[0], None) is None:
                return _status(404, "NotFound", f'configmaps "{rest[0]}" not found')
            return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success"}, \
                "application/json"
        return _status(405, "MethodNotAllowed", f"{req.method} {req.path}")

    def _pods(self, req: Request, rest: list[str]) -> tuple[int, Any, str]:
        selector = _one(req, "labelSelector")
        if not rest and req.method in ("GET", "DELETE"):
            key, _, value = selector.partition("=")
            items = [p for p in self.pods.values()
                     if not key or p["metadata"]["labels"].get(key) == value]
            if req.method == "DELETE":
                for p in items:
                    del self.pods[p["metadata"]["name"]]
            return 200, {"kind": "PodList", "apiVersion": "v1", "items": items}, \
                "application/json"
        if len(rest) == 2 and rest[1] == "log" and req.method == "GET":
            pod = self.pods.get(rest[0])
            if pod is None:
                return _status(404, "NotFound", f'pods "{rest[0]}" not found')
            state = (pod["status"].get("containerStatuses") or [{}])[0].get("state") or {}
            if "running" not in state and "terminated" not in state:
                return _status(400, "BadRequest", f'container "runner" in pod "{rest[0]}" '
                               "is waiting to start: ContainerCreating")
            since = _one(req, "sinceSeconds")
            # the API server parses booleans with Go's strconv.ParseBool
            stamps = _one(req, "timestamps") in ("1", "t", "T", "true", "TRUE", "True")
            start = time.time() - int(since) if since else 0.0
            out = bytearray()
            for t, line in self.logs.get(rest[0], []):
                if t >= int(start):  # the kubelet compares at whole seconds
                    out += (nano_rfc3339(t).encode() + b" " if stamps else b"") + line
            limit = _one(req, "limitBytes")
            data = bytes(out[:int(limit)]) if limit else bytes(out)
            return 200, data, "text/plain"
        return _status(405, "MethodNotAllowed", f"{req.method} {req.path}")

    # --- what the tests do to the cluster ------------------------------------------------

    def only_job(self) -> dict[str, Any]:
        with self.lock:
            assert len(self.jobs) == 1, list(self.jobs)
            return next(iter(self.jobs.values()))

    def add_pod(self, job: str, suffix: str | None = None) -> str:
        """A pod the Job controller made for `job`: Pending, not yet scheduled."""
        with self.lock:
            obj = self.jobs[job]
            name = f"{job}-{suffix or uuid.uuid4().hex[:5]}"
            labels = dict(obj["spec"]["template"]["metadata"].get("labels") or {})
            labels.update({"job-name": job, "batch.kubernetes.io/job-name": job,
                           "controller-uid": obj["metadata"]["uid"]})
            self.pods[name] = {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": self.namespace, "labels": labels,
                             "uid": str(uuid.uuid4()),
                             "creationTimestamp": now_rfc3339(),
                             "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                                  "name": job,
                                                  "uid": obj["metadata"]["uid"]}]},
                "spec": json.loads(json.dumps(obj["spec"]["template"]["spec"])),
                "status": {"phase": "Pending", "conditions": []},
            }
            obj["status"]["active"] = 1
            return name

    def _condition(self, pod: str, type_: str, status: str, reason: str | None = None,
                   message: str | None = None) -> None:
        conds = [c for c in self.pods[pod]["status"]["conditions"] if c["type"] != type_]
        cond = {"type": type_, "status": status, "lastTransitionTime": now_rfc3339()}
        if reason:
            cond["reason"] = reason
        if message:
            cond["message"] = message
        self.pods[pod]["status"]["conditions"] = [*conds, cond]

    def unschedulable(self, pod: str, message: str) -> None:
        with self.lock:
            self._condition(pod, "PodScheduled", "False", "Unschedulable", message)
            self.events.append(_event(pod, "Pod", "Warning", "FailedScheduling", message))

    def schedule(self, pod: str, node: str = "gpu-node-1") -> None:
        with self.lock:
            self._condition(pod, "PodScheduled", "True")
            self.pods[pod]["spec"]["nodeName"] = node
            self._container(pod, {"waiting": {"reason": "ContainerCreating"}})

    def image_pull_backoff(self, pod: str, image: str) -> None:
        with self.lock:
            self._container(pod, {"waiting": {
                "reason": "ImagePullBackOff",
                "message": f'Back-off pulling image "{image}"'}})

    def run(self, pod: str) -> None:
        with self.lock:
            self.pods[pod]["status"]["phase"] = "Running"
            self._container(pod, {"running": {"startedAt": now_rfc3339()}})

    def log(self, pod: str, text: str, at: float | None = None) -> None:
        with self.lock:
            lines = self.logs.setdefault(pod, [])
            for line in text.splitlines(keepends=True):
                lines.append((time.time() if at is None else at, line.encode()))

    def end(self, pod: str, exit_code: int, message: str | None = None,
            reason: str | None = None) -> None:
        """The container ends; `message` is its termination message."""
        with self.lock:
            term: dict[str, Any] = {"exitCode": exit_code,
                                    "reason": reason or ("Completed" if exit_code == 0
                                                         else "Error"),
                                    "startedAt": now_rfc3339(), "finishedAt": now_rfc3339()}
            running = (self.pods[pod]["status"].get("containerStatuses") or [{}])[0] \
                .get("state", {}).get("running")
            if running:
                term["startedAt"] = running["startedAt"]
            if message is not None:
                term["message"] = message
            self._container(pod, {"terminated": term})
            self.pods[pod]["status"]["phase"] = "Succeeded" if exit_code == 0 else "Failed"
            self.jobs[self.pods[pod]["metadata"]["labels"]["job-name"]]["status"]["active"] = 0

    def disrupt(self, pod: str, reason: str = "PreemptionByScheduler",
                message: str = "Preempted in order to admit critical pod") -> None:
        with self.lock:
            self._condition(pod, "DisruptionTarget", "True", reason, message)
            self.end(pod, 143)

    def finish_job(self, job: str, ok: bool, reason: str | None = None,
                   message: str | None = None) -> None:
        with self.lock:
            status = self.jobs[job]["status"]
            cond = {"type": "Complete" if ok else "Failed", "status": "True",
                    "lastTransitionTime": now_rfc3339()}
            if reason:
                cond["reason"] = reason
            if message:
                cond["message"] = message
            status["conditions"] = [*(status.get("conditions") or []), cond]
            status["active"] = 0
            if ok:
                status["succeeded"] = 1
                status["completionTime"] = now_rfc3339()
            else:
                status["failed"] = status.get("failed", 0) + 1

    def job_event(self, job: str, reason: str, message: str) -> None:
        with self.lock:
            self.events.append(_event(job, "Job", "Warning", reason, message))

    def _container(self, pod: str, state: dict[str, Any]) -> None:
        p = self.pods[pod]
        c = {"name": "runner", "image": p["spec"]["containers"][0]["image"],
             "ready": "running" in state, "restartCount": 0, "state": state}
        p["status"]["containerStatuses"] = [c]

    def calls(self, method: str | None = None, contains: str = "") -> list[Request]:
        with self.lock:
            return [r for r in self.requests
                    if (method is None or r.method == method) and contains in r.path]


def _one(req: Request, name: str) -> str:
    return (req.query.get(name) or [""])[0]


def _status(code: int, reason: str, message: str) -> tuple[int, Any, str]:
    return code, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                  "message": message, "reason": reason, "code": code}, "application/json"


def _merge(target: dict[str, Any], patch: Any) -> None:
    for k, v in (patch or {}).items():
        if v is None:
            target.pop(k, None)
        elif isinstance(v, dict) and isinstance(target.get(k), dict):
            _merge(target[k], v)
        else:
            target[k] = v


def _event(name: str, kind: str, type_: str, reason: str, message: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{name}.{uuid.uuid4().hex[:8]}"},
            "involvedObject": {"kind": kind, "name": name},
            "type": type_, "reason": reason, "message": message, "count": 1,
            "lastTimestamp": now_rfc3339()}


def run_locally(standin: StandIn, pod: str, termination_log: Path,
                node: str = "gpu-node-1") -> tuple[threading.Thread, subprocess.Popen[bytes]]:
    """Play the kubelet for `pod`: put its ConfigMap where the container mounts it (with the
    ``..data`` links a ConfigMap volume has), run the container's command on this machine
    with the container's environment, stream its output into the pod's log, and end the pod
    with the exit code and the termination message it left. The Job completes when the pod
    succeeds, else fails (one attempt: the Job controller's retries are not played).
    Returns the thread that follows the container, and its process."""
    with standin.lock:
        spec = standin.pods[pod]["spec"]
        container = spec["containers"][0]
        volumes = {v["name"]: v for v in spec["volumes"]}
        for mount in container["volumeMounts"]:
            source = volumes[mount["name"]].get("configMap")
            if "emptyDir" in volumes[mount["name"]]:
                Path(mount["mountPath"]).mkdir(parents=True, exist_ok=True)
            if source is not None:
                _materialize(standin.configmaps[source["name"]], Path(mount["mountPath"]))
        env = dict(os.environ)
        env.update({e["name"]: e["value"] for e in container.get("env", [])})
        env["COSTGUARD_TERMINATION_LOG"] = str(termination_log)
        job = standin.pods[pod]["metadata"]["labels"]["job-name"]
    standin.schedule(pod, node)
    proc = subprocess.Popen(container["command"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, cwd=container.get("workingDir"))
    standin.run(pod)

    def follow() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            standin.log(pod, line.decode())
        rc = proc.wait()
        message = termination_log.read_text() if termination_log.exists() else None
        with standin.lock:
            if pod not in standin.pods:  # deleted meanwhile (cancel)
                return
            standin.end(pod, rc, message)
            if job in standin.jobs:
                standin.finish_job(job, rc == 0, None if rc == 0 else "BackoffLimitExceeded",
                                   None if rc == 0 else "Job has reached the specified "
                                   "backoff limit")

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    return thread, proc


def _materialize(configmap: dict[str, Any], mount: Path) -> None:
    stamp = mount / "..2024_01_01_00_00_00.000000001"
    stamp.mkdir(parents=True, exist_ok=True)
    for key, value in (configmap.get("data") or {}).items():
        (stamp / key).write_text(value)
    for key, value in (configmap.get("binaryData") or {}).items():
        (stamp / key).write_bytes(base64.b64decode(value))
    data = mount / "..data"
    if not data.exists():
        data.symlink_to(stamp.name)
    for key in [*(configmap.get("data") or {}), *(configmap.get("binaryData") or {})]:
        link = mount / key
        if not link.exists():
            link.symlink_to(f"..data/{key}")
