"""A Kubernetes job's state, read from the API's documents: the Job, its pods and the events
about them become the runner's status (`jobdir.RunnerStatus`) and the lines the log should say;
a pod's timestamped log becomes the lines not read before.

Pure functions over plain JSON documents (as the API sends them, whatever the client version),
so they can be tested without a cluster.
"""

from __future__ import annotations

import calendar
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from jupyter_costguard.offload.backends.kubernetes import manifest
from jupyter_costguard.offload.jobdir import RunnerStatus
from jupyter_costguard.offload.spec import Job

#: container waiting reasons that are just the normal way up
_STARTING = frozenset({"ContainerCreating", "PodInitializing"})


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


def finished(obj: Mapping[str, Any]) -> bool:
    conds = _conditions(obj)
    return "Complete" in conds or "Failed" in conds


def pod_phase(pod: Mapping[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def container(pod: Mapping[str, Any]) -> dict[str, Any] | None:
    for c in (pod.get("status") or {}).get("containerStatuses") or []:
        if c.get("name") == manifest.CONTAINER:
            return dict(c)
    return None


def running(pod: Mapping[str, Any]) -> bool:
    c = container(pod)
    return c is not None and "running" in (c.get("state") or {})


def _terminated(pod: Mapping[str, Any]) -> dict[str, Any] | None:
    c = container(pod)
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
    except (ValueError, RecursionError):  # what a job's code wrote: never trusted
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
    c = container(pod)
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


def pod_summary(pod: Mapping[str, Any]) -> dict[str, Any]:
    term = _terminated(pod)
    return {"name": pod["metadata"]["name"], "phase": pod_phase(pod),
            "node": (pod.get("spec") or {}).get("nodeName"),
            "waiting": _waiting_reason(pod),
            "disrupted": (_disrupted(pod) or {}).get("reason"),
            "exit_code": term.get("exitCode") if term else None,
            "reason": term.get("reason") if term else (pod.get("status") or {}).get("reason")}


@dataclass
class _Reading:
    """What `derive` has read so far from the pods and the Job, and what the log should say."""

    said: dict[str, Any]  # the backend's notes: what the log already said, by pod and "waiting"
    base: int  # attempts made by Jobs before this one (a retry after disruption)
    max_attempts: int
    now: float
    attempts: list[dict[str, Any]]
    times: dict[str, float] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)
    counted: int = 0  # this Job's pods that count as attempts (not disrupted)


def derive(job: Job, obj: Mapping[str, Any], pods: list[dict[str, Any]],
           events: list[dict[str, Any]], state: dict[str, Any],
           now: float) -> tuple[dict[str, Any], list[str]]:
    """The job's status as the runner would write it (`RunnerStatus.to_json`) from the Job
    and its pods, and the lines to add to the log about what changed (updates `state`, the
    backend's notes: what was already said)."""
    r = _Reading(said=state.setdefault("said", {}), base=int(state.get("attempt_base", 0)),
                 max_attempts=job.spec.retries + 1, now=now,
                 attempts=list(state.get("attempts_before", [])))
    for pod in pods:
        _read_pod(r, pod)
    st, phase, exit_reason, waiting = _job_state(job, obj, pods, events, r)
    if st in ("succeeded", "failed"):
        r.times.setdefault("finishing", r.times["done"])
    status = RunnerStatus(
        state=st, phase=phase, attempt=r.base + r.counted, attempts=r.attempts,
        phase_times=r.times, exit_reason=exit_reason, kernel_pid=None, runner_pid=None,
        updated=now,
        kubernetes={"job": obj.get("metadata", {}).get("name"), "waiting": waiting,
                    "pods": [p["metadata"]["name"] for p in pods]})
    return status.to_json(), r.lines


def _read_pod(r: _Reading, pod: dict[str, Any]) -> None:
    """One pod as an attempt: when it was scheduled, started and ended, how, and the log
    lines for what is new (scheduled, ended) since the last reading."""
    pod_name = pod["metadata"]["name"]
    scheduled = _scheduled(pod)
    c = container(pod) or {}
    run_state = (c.get("state") or {}).get("running") or {}
    term = _terminated(pod)
    disrupted = _disrupted(pod)
    if disrupted is None:
        r.counted += 1
    attempt = r.base + max(r.counted, 1)
    if scheduled is not None:
        r.times.setdefault("starting", parse_time(scheduled.get("lastTransitionTime")) or r.now)
        if r.said.get(pod_name) is None:
            r.said[pod_name] = "scheduled"
            node = (pod.get("spec") or {}).get("nodeName")
            r.lines.append(f"attempt {attempt} of {r.max_attempts}: pod "
                           f"{pod_name}" + (f" on node {node}" if node else ""))
    started = run_state.get("startedAt") or (term or {}).get("startedAt")
    if started:
        r.times.setdefault("running", parse_time(started) or r.now)
    outcome, reason = _pod_outcome(pod, term, disrupted)
    if outcome != "running" and r.said.get(pod_name) != "ended":
        r.said[pod_name] = "ended"
        if outcome == "disrupted":
            r.lines.append(f"pod {pod_name} was disrupted ({reason}); "
                           "this does not count against the job's retries")
        elif outcome == "failed":
            r.lines.append(f"pod {pod_name} failed: {reason}")
    message = _termination_message(pod)
    if isinstance(message, dict):
        for phase, when in (message.get("phase_times") or {}).items():
            if phase == "finishing" and isinstance(when, (int, float)):
                r.times.setdefault(phase, float(when))
    r.attempts.append({
        "attempt": attempt, "pod": pod_name,
        "node": (pod.get("spec") or {}).get("nodeName"),
        "start": parse_time(started) if started else None,
        "end": parse_time((term or {}).get("finishedAt")) if term else None,
        "outcome": outcome, "reason": reason})


def _pod_outcome(pod: Mapping[str, Any], term: Mapping[str, Any] | None,
                 disrupted: Mapping[str, Any] | None) -> tuple[str, str | None]:
    """(outcome, reason): running until the pod ends; then succeeded, disrupted (not the
    job's fault: it does not count against retries) or failed, with why."""
    if term is None and pod_phase(pod) not in ("Succeeded", "Failed"):
        return "running", None
    if pod_phase(pod) == "Succeeded" or (term or {}).get("exitCode") == 0:
        return "succeeded", None
    if disrupted is not None:
        return "disrupted", f"{disrupted.get('reason')}: {disrupted.get('message') or ''}" \
            .rstrip(": ")
    return "failed", _runner_reason(pod) or _pod_failure(pod)


def _job_state(job: Job, obj: Mapping[str, Any], pods: list[dict[str, Any]],
               events: list[dict[str, Any]], r: _Reading
               ) -> tuple[str, str, str | None, str | None]:
    """(state, phase, exit reason, why it waits) from the Job's conditions, else from its
    newest active pod; a new reason to wait is said in the log once."""
    conds = _conditions(obj)
    if "Complete" in conds:
        r.times["done"] = parse_time(conds["Complete"].get("lastTransitionTime")) \
            or parse_time((obj.get("status") or {}).get("completionTime")) or r.now
        return "succeeded", "done", None, None
    if "Failed" in conds:
        r.times["done"] = parse_time(conds["Failed"].get("lastTransitionTime")) or r.now
        return "failed", "done", _job_failure(job, conds["Failed"], pods), None
    st, phase, waiting = _not_ended_state(pods, events, r.times)
    if waiting and r.said.get("waiting") != waiting:
        r.lines.append(f"waiting: {waiting}")
    r.said["waiting"] = waiting
    return st, phase, None, waiting


def _not_ended_state(pods: list[dict[str, Any]], events: list[dict[str, Any]],
                     times: Mapping[str, float]) -> tuple[str, str, str | None]:
    """(state, phase, why it waits) of a Job that has not ended: running, starting (a pod
    was scheduled) or queued."""
    active = [p for p in pods if pod_phase(p) in ("Pending", "Running")]
    current = active[-1] if active else None
    if current is not None and running(current):
        return "running", "running", None
    if current is not None:
        waiting = _waiting_reason(current) or _event_reason(events)
        if times.get("starting") or _scheduled(current):
            return "running", "starting", waiting
        return "queued", "queued", waiting
    waiting = _event_reason(events)
    if pods:
        return "running", "starting", waiting or "waiting for Kubernetes to start another pod"
    return "queued", "queued", waiting


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

