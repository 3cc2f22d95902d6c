"""Runs offloaded jobs as SkyPilot managed jobs, through SkyPilot's Python SDK.

A job is a SkyPilot task (`task.task_config`) launched with ``sky.jobs.launch`` through the
SkyPilot API server (the local one, which the SDK starts when needed, or a team's remote one:
`api_server_url`). SkyPilot's optimizer picks the cheapest cloud, region and instance that has
the accelerator; with spot capacity SkyPilot recovers a preempted job by launching it again, and
tears the machine down when the job ends.

The server never reaches the remote machine: the remote side (`remote`) keeps the job's status,
log and outputs in object storage (`SkyPilotSettings.storage_url`), and `sync` copies them into
the job's directory, where the follower reads them as it reads any runner's. SkyPilot's own
state (``sky.jobs.queue_v2``: pending, recovering, failed and why) fills in what the runner
cannot say. A launch request is answered by the API server later: its request id is kept in the
job directory (`jobdir`'s ``skypilot.json``) until it says which managed job it became.

Every SDK call runs on the backend's own threads (`calls`), never on the IO loop nor on the job
service's worker, which every job request goes through: the worker starts a call and applies
its answer on a later tick. Queue answers are shared by all jobs for `query_interval` seconds.
An API server that does not answer never makes a job `lost`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from jupyter_costguard.offload import jobdir
from jupyter_costguard.offload.backends.base import Backend
from jupyter_costguard.offload.backends.skypilot import task as sky_task
from jupyter_costguard.offload.backends.skypilot.calls import Calls
from jupyter_costguard.offload.backends.skypilot.estimate import ESTIMATOR, ask_optimizer
from jupyter_costguard.offload.backends.skypilot.remote import MACHINES, read_machines
from jupyter_costguard.offload.backends.skypilot.task import ManagedJob, SkyPilotSettings
from jupyter_costguard.offload.estimate import Estimate, EstimateContext
from jupyter_costguard.offload.spec import TERMINAL, Job, Resources

log = logging.getLogger("jupyter_costguard")

#: the backend's notes in the job directory: launch request, managed job id, log offset
STATE = "skypilot.json"
#: the staged input the task mounts
STAGING = "skypilot-input"
#: the fields of a queue record the backend reads
QUEUE_FIELDS = ["job_id", "task_id", "job_name", "status", "recovery_count", "failure_reason",
                "cloud", "region", "cluster_resources", "start_at", "end_at", "submitted_at"]
WARN_EVERY_SECONDS = 60.0


def _sky() -> Any:
    import sky  # optional dependency: the skypilot extra

    return sky


class SkyPilotExecutor(Backend):
    """A `Backend` whose jobs are SkyPilot managed jobs (see the module docstring)."""

    #: SkyPilot takes tens of seconds to stop a task and tear its machine down (~40 s on
    #: its Slurm infra here); the job ends when it says CANCELLED, or after this
    cancel_grace_seconds = 180.0

    def __init__(self, settings: SkyPilotSettings | None = None, *, name: str = "skypilot",
                 api_server_url: str | None = None, query_interval: float = 5.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.settings = settings or SkyPilotSettings()
        self.name = name
        if api_server_url:  # read by the SDK on every call
            os.environ["SKYPILOT_API_SERVER_ENDPOINT"] = api_server_url
        self.query_interval = query_interval
        self.clock = clock
        self._lock = threading.Lock()
        self._known: dict[int, tuple[float, ManagedJob | None]] = {}
        self._asked: dict[int, float] = {}
        self._warned: dict[str, float] = {}
        #: SDK calls run here, never on the job worker (`calls`)
        self.calls = Calls()
        self._resolved: dict[int, float] = {}
        self._adopting: set[int] = set()

    # --- launching -----------------------------------------------------------------------

    def launch(self, job: Job, job_dir: Path, environment: Mapping[str, str] = {}) -> str | None:
        """Stage the input and start sending the launch request (`calls`: the worker does not
        wait for it); returns the managed job's name. A job that cannot be a task ends `failed`
        with why; what SkyPilot answers is applied on a later `sync`."""
        staging = job_dir / STAGING
        shutil.rmtree(staging, ignore_errors=True)
        jobdir.private_dir(staging)
        (job_dir / jobdir.CANCEL).unlink(missing_ok=True)
        try:
            spec_doc = json.loads((job_dir / jobdir.SPEC).read_text())
            jobdir.write_json(staging / jobdir.SPEC,
                              sky_task.remote_spec_doc(spec_doc, job, self.settings))
            if (job_dir / jobdir.INPUTS).exists():
                shutil.copyfile(job_dir / jobdir.INPUTS, staging / jobdir.INPUTS)
            config = sky_task.task_config(job, self.settings, str(staging))
        except Exception as e:
            self._end(job_dir, "failed", f"SkyPilot could not launch the job: {_reason(e)}")
            return None
        _write_state(job_dir, {"request_id": None, "job_id": None, "log_offset": 0,
                               "recoveries": 0, "launching": self.clock()})
        self.calls.start(f"launch-{job.id}", lambda: self._send_launch(job, config))
        jobdir.say(job_dir, "sending the job to SkyPilot")
        return sky_task.job_name(job)

    def _send_launch(self, job: Job, config: dict[str, Any]) -> str:
        """(SkyPilot's thread) The price cap, then the launch request; returns its id."""
        sky = _sky()
        refusal = self._price_refusal(sky, config)
        if refusal is not None:
            raise sky_task.TaskError(refusal)
        task = sky.Task.from_yaml_config(config)
        return str(sky.jobs.launch(task, name=sky_task.job_name(job)))

    def _price_refusal(self, sky: Any, config: dict[str, Any]) -> str | None:
        """The optimizer's choice against `max_price_per_hour` (asked only when one is set)."""
        cap = self.settings.max_price_per_hour
        if cap is None:
            return None
        found = ask_optimizer(sky, config)
        if found is None:
            return None
        choice, hourly = found
        where = ", ".join(str(v) for v in (choice.cloud, choice.region, choice.instance_type)
                          if v) or "its choice"
        return sky_task.price_refusal(hourly, cap, where)

    def _settle_launch(self, job: Job, job_dir: Path, state: dict[str, Any]) -> None:
        """Apply the launch request's answer, once it has come; a launch this process did not
        start (the server restarted meanwhile) is looked for by its name."""
        if not state.get("launching"):
            return
        name = f"launch-{job.id}"
        if not self.calls.known(name):
            self._adopting.add(job.id)
            self.calls.start(name, lambda: self._adopt(job))
            return
        call = self.calls.take(name)
        if call is None:
            return  # still sending
        if job.id in self._adopting and call.exception() is not None:
            self._warn(f"adopt-{job.id}", f"cannot look for job {job.id} in SkyPilot: "
                       f"{_reason(call.exception())}")  # type: ignore[arg-type]
            return  # the API server did not answer: ask again on a later tick
        self._adopting.discard(job.id)
        state.pop("launching", None)
        try:
            answer = call.result()
        except Exception as e:
            _write_state(job_dir, state)
            self._end(job_dir, "failed", f"SkyPilot could not launch the job: {_reason(e)}")
            return
        if isinstance(answer, int):  # found in SkyPilot's queue by its name
            state["job_id"] = answer
            jobdir.say(job_dir, f"SkyPilot managed job {answer} (found by its name)")
        elif answer is None:
            _write_state(job_dir, state)
            self._end(job_dir, "failed", "the server stopped while it sent the job to SkyPilot, "
                      f"and SkyPilot has no managed job named {sky_task.job_name(job)}")
            return
        else:
            state["request_id"] = answer
            jobdir.say(job_dir, f"sent to SkyPilot as a managed job (request {answer})")
        _write_state(job_dir, state)

    def _adopt(self, job: Job) -> int | None:
        """(SkyPilot's thread) The managed job named for `job` submitted since it was, if
        any: the launch request a stopped server sent."""
        found = []
        for doc in _queue():
            submitted = doc.get("submitted_at") or 0
            if doc.get("job_name") == sky_task.job_name(job) and submitted >= job.created - 60:
                found.append(int(doc["job_id"]))
        return max(found) if found else None

    def estimate(self, resources: Resources, context: EstimateContext) -> Estimate:
        """The optimizer's choice for a job asking `resources`, priced (`estimate`)."""
        return ESTIMATOR.estimate(_sky, self.name, self.settings, resources, context)

    def _managed_id(self, job: Job, job_dir: Path, state: dict[str, Any]) -> int | None:
        """The managed job's id, once the API server has answered the launch request (asked
        on SkyPilot's thread at most every `query_interval` s)."""
        if state.get("job_id") is not None:
            return int(state["job_id"])
        request_id = state.get("request_id")
        if not request_id:
            return None
        name = f"resolve-{job.id}"
        call = self.calls.take(name)
        if call is None:
            if not self.calls.known(name) and \
                    self.clock() - self._resolved.get(job.id, 0.0) >= self.query_interval:
                self._resolved[job.id] = self.clock()
                self.calls.start(name, lambda: _resolve(str(request_id)))
            return None
        try:
            job_id = call.result()
        except Exception as e:
            self._end(job_dir, "failed", f"SkyPilot could not launch the job: {_reason(e)}")
            state["request_id"] = None
            _write_state(job_dir, state)
            return None
        if job_id is None:
            return None  # still launching
        state["job_id"] = int(job_id)
        _write_state(job_dir, state)
        jobdir.say(job_dir, f"SkyPilot managed job {state['job_id']}")
        if (job_dir / jobdir.CANCEL).exists():  # cancelled while it was launched
            self._send_cancel(job, int(job_id))
        return int(state["job_id"])

    # --- following -----------------------------------------------------------------------

    def query(self, job_id: int) -> ManagedJob | None:
        """SkyPilot's last word on managed job `job_id`; None before the first answer or
        when the API server did not answer. The queue is asked on SkyPilot's thread every
        `query_interval` s, one request for every job asked about lately."""
        now = time.monotonic()
        with self._lock:
            self._asked[job_id] = now
            known = self._known.get(job_id)
            fresh = known is not None and now - known[0] < self.query_interval
            ids = sorted(i for i, t in self._asked.items() if now - t < 60.0)
        if not fresh:
            self.calls.start("queue", lambda: self._refresh(ids, now), keep=False)
        return known[1] if known is not None else None

    def _refresh(self, ids: list[int], asked: float) -> None:
        """(SkyPilot's thread) One queue request for `ids`; its answers replace the kept
        ones (a failed request keeps them, and says so at most once a minute)."""
        try:
            found = {}
            for doc in _queue(job_ids=ids):
                info = sky_task.parse_record(doc)
                if info is not None:
                    found[info.job_id] = info
        except Exception as e:
            self._warn("queue", f"SkyPilot's API server did not answer: {_reason(e)}")
            return
        with self._lock:
            for i in ids:
                self._known[i] = (asked, found.get(i))

    def sync(self, job: Job, job_dir: Path) -> None:
        """Copy the runner's status, new log bytes and, once it has ended, its outputs from
        object storage into the job directory; apply what SkyPilot has answered since the
        last tick; note recoveries in the log."""
        state = _read_state(job_dir)
        if state.get("final"):
            return
        try:
            self._settle_launch(job, job_dir, state)
            self._settle_cancel(job, job_dir)
            job_id = self._managed_id(job, job_dir, state)
            info = self.query(job_id) if job_id is not None else None
            if info is not None and info.recovery_count > int(state.get("recoveries", 0)):
                state["recoveries"] = info.recovery_count
                _write_state(job_dir, state)
                jobdir.say(job_dir, f"SkyPilot recovered the job (recovery "
                           f"{info.recovery_count}): it was preempted or its machine "
                           "failed; it resumes from its latest checkpoint")
            prefix = sky_task.storage_prefix(self.settings, job)
            if prefix is not None:
                self._pull(job_dir, prefix, state)
            if info is not None:
                self._waiting(job_dir, info, state)
        except Exception as e:
            self._warn(f"sync-{job.id}", f"cannot follow job {job.id} in SkyPilot: "
                       f"{_reason(e)}")

    def _pull(self, job_dir: Path, prefix: str, state: dict[str, Any]) -> None:
        import fsspec

        fs, root = fsspec.core.url_to_fs(prefix)
        offset = int(state.get("log_offset", 0))
        try:
            with fs.open(f"{root}/{jobdir.LOG}", "rb") as f:
                f.seek(offset)
                fresh = f.read()
        except FileNotFoundError:
            fresh = b""
        if fresh:
            with os.fdopen(jobdir.open_private(job_dir / jobdir.LOG), "ab") as out:
                out.write(fresh)
            state["log_offset"] = offset + len(fresh)
            _write_state(job_dir, state)
        try:  # the machines it ran on, for its spend (small: a record per machine)
            jobdir.write_bytes(job_dir / MACHINES, fs.cat_file(f"{root}/{MACHINES}"))
        except FileNotFoundError:
            pass
        try:
            raw = fs.cat_file(f"{root}/{jobdir.STATUS}")
        except FileNotFoundError:
            return
        digest = hashlib.sha256(raw).hexdigest()
        if digest == state.get("status_sha256"):
            return  # unchanged: what the server wrote since (a recovery's wait) stays
        state["status_sha256"] = digest
        doc = json.loads(raw)
        state["remote_updated"] = doc.get("updated")
        if doc.get("state") in TERMINAL:  # outputs first: the status says they are there
            for name in jobdir.OUTPUT_FILES:
                try:
                    jobdir.write_bytes(job_dir / name, fs.cat_file(f"{root}/{name}"))
                except FileNotFoundError:
                    continue
            state["final"] = True
        jobdir.write_bytes(job_dir / jobdir.STATUS, raw)
        _write_state(job_dir, state)

    def _waiting(self, job_dir: Path, info: ManagedJob, state: dict[str, Any]) -> None:
        """A job SkyPilot is recovering waits: its runner, killed with its machine, could not
        say so. Once the new machine's runner has reported (SkyPilot's queue lags behind it),
        its word stands."""
        waiting = sky_task.waiting_as(info)
        if waiting is None:
            if state.pop("recovering_since", None) is not None:
                _write_state(job_dir, state)
            return
        since = state.setdefault("recovering_since", self.clock())
        _write_state(job_dir, state)
        reported = state.get("remote_updated")
        if isinstance(reported, (int, float)) and reported > since:
            return
        status = jobdir.read_status(job_dir)
        if status is None or status.state in TERMINAL or status.phase == waiting[1]:
            return
        jobdir.say(job_dir, f"waiting for SkyPilot ({info.status})")
        jobdir.write_status(job_dir, dataclasses.replace(
            status, state=waiting[0], phase=waiting[1], kernel_pid=None, updated=self.clock()))

    def reconcile(self, job: Job, job_dir: Path) -> bool:
        """True while SkyPilot may still run the job (launching, pending, running,
        recovering). Once it has ended without the runner saying how, SkyPilot's status and
        failure reason become the job's."""
        state = _read_state(job_dir)
        status = jobdir.read_status(job_dir)
        if status is not None and status.state in TERMINAL:
            return False
        job_id = state.get("job_id")
        if job_id is None:  # being sent, or the API server has not answered yet
            return bool(state.get("launching") or state.get("request_id"))
        info = self.query(int(job_id))
        if info is None or info.active:
            return True  # no answer says nothing; active: it runs or will
        self.sync(job, job_dir)  # its last status may have arrived with the end
        status = jobdir.read_status(job_dir)
        if status is not None and status.state in TERMINAL:
            return False
        new_state, reason = sky_task.ended_as(info, (job_dir / jobdir.CANCEL).exists(),
                                              self.settings.storage_url is not None)
        self._end(job_dir, new_state, reason)
        return False

    def cancel(self, job: Job, job_dir: Path, force: bool = False) -> None:
        """``sky.jobs.cancel``: SkyPilot stops the task and tears its machine down. The
        request is sent from SkyPilot's thread (a job still being launched gets it once its
        managed job is known); `reconcile` ends the job once SkyPilot says CANCELLED."""
        jobdir.write_json(job_dir / jobdir.CANCEL, {"at": time.time(), "force": force})
        job_id = _read_state(job_dir).get("job_id")
        if job_id is not None:
            self._send_cancel(job, int(job_id))

    def _send_cancel(self, job: Job, job_id: int) -> None:
        def send() -> None:
            _sky().jobs.cancel(job_ids=[job_id])

        self.calls.start(f"cancel-{job.id}", send)
        with self._lock:
            self._known.pop(job_id, None)

    def _settle_cancel(self, job: Job, job_dir: Path) -> None:
        """A cancel SkyPilot did not take is said in the job's log (cancel again)."""
        call = self.calls.take(f"cancel-{job.id}")
        if call is not None and call.exception() is not None:
            jobdir.say(job_dir, f"SkyPilot did not take the cancel: "
                       f"{_reason(call.exception())}; cancel again")  # type: ignore[arg-type]

    def describe(self, job: Job, job_dir: Path) -> dict[str, Any] | None:
        """What SkyPilot says about the job: its managed job, status, recoveries, where."""
        state = _read_state(job_dir)
        job_id = state.get("job_id")
        if job_id is None:
            return {"skypilot_job_id": None, "skypilot_status": "LAUNCHING",
                    "request_id": state.get("request_id")}
        info = self.query(int(job_id))
        if info is None:
            return {"skypilot_job_id": job_id, "skypilot_status": "UNKNOWN",
                    "reason": "SkyPilot's API server did not answer"}
        return {"skypilot_job_id": job_id, "skypilot_status": info.status,
                "recoveries": info.recovery_count, "where": info.where,
                "reason": info.failure_reason}

    def machines(self, job: Job, job_dir: Path) -> list[Mapping[str, Any]] | None:
        """The machines the job ran on, as its runner recorded them (`remote.MACHINES`)."""
        machines: list[Mapping[str, Any]] = list(read_machines(job_dir))
        return machines or None

    def close(self) -> None:
        self.calls.close()

    # --- reporting what the runner could not -------------------------------------------

    def _end(self, job_dir: Path, state: str, reason: str | None) -> None:
        """End the job in its status (as the runner would), keeping its attempts. The
        remote side cannot tell a cancel (or a failure SkyPilot saw) from a preemption: an
        attempt it ended "interrupted" takes SkyPilot's end instead."""
        if not jobdir.end_status(job_dir, state, reason, self.clock(),
                                 reopened=frozenset({"interrupted"}), runner_gone=True):
            return
        st = _read_state(job_dir)
        st["final"] = True
        _write_state(job_dir, st)

    def _warn(self, key: str, text: str) -> None:
        now = self.clock()
        if now - self._warned.get(key, 0.0) >= WARN_EVERY_SECONDS:
            self._warned[key] = now
            log.warning("costguard: %s", text)


def _queue(**filters: Any) -> list[dict[str, Any]]:
    """(SkyPilot's thread) The user's managed jobs (``sky.jobs.queue_v2``) as dicts, with
    the fields the backend reads; `filters` narrow it (``job_ids``)."""
    sky = _sky()
    answer = sky.get(sky.jobs.queue_v2(refresh=False, all_users=False, fields=QUEUE_FIELDS,
                                       **filters))
    records = answer[0] if isinstance(answer, tuple) else answer
    return [r.model_dump() if hasattr(r, "model_dump") else dict(r) for r in records]


def _resolve(request_id: str) -> int | None:
    """(SkyPilot's thread) The managed job a launch request became; None while it runs."""
    sky = _sky()
    found = sky.api_status([request_id])
    status = str(getattr(found[0], "status", "")) if found else ""
    if not any(s in status for s in ("SUCCEEDED", "FAILED", "CANCELLED")):
        return None
    job_ids, _handle = sky.get(request_id)
    return int(job_ids[0])


def _reason(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text if len(text) <= 2000 else text[:2000] + "…"


def _read_state(job_dir: Path) -> dict[str, Any]:
    return jobdir.read_object(job_dir / STATE)


def _write_state(job_dir: Path, state: Mapping[str, Any]) -> None:
    jobdir.write_json(job_dir / STATE, state)
