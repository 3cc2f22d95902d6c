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

Every SDK call runs on the job service's worker thread, never on the IO loop; queue answers are
shared by all jobs for `query_interval` seconds. An API server that does not answer never makes
a job `lost`.
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
from jupyter_costguard.offload.backends.skypilot.estimate import ESTIMATOR
from jupyter_costguard.offload.backends.skypilot.remote import MACHINES
from jupyter_costguard.offload.backends.skypilot.task import ManagedJob, SkyPilotSettings
from jupyter_costguard.offload.errors import JobError
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
    import sky  # optional dependency: pip install jupyter-costguard[skypilot]

    return sky


class SkyPilotBackend(Backend):
    """A `Backend` whose jobs are SkyPilot managed jobs (see the module docstring)."""

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

    # --- launching -----------------------------------------------------------------------

    def launch(self, job: Job, job_dir: Path, environment: Mapping[str, str] = {}) -> str | None:
        """Stage the input, check the price cap, send the launch request; returns its id. A job
        that cannot be a task, or that SkyPilot refuses, ends `failed` with why."""
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
            sky = _sky()
            task = sky.Task.from_yaml_config(config)
            refusal = self._price_refusal(sky, task)
            if refusal is not None:
                raise sky_task.TaskError(refusal)
            request_id = str(sky.jobs.launch(task, name=sky_task.job_name(job)))
        except Exception as e:
            self._end(job_dir, "failed", f"SkyPilot could not launch the job: "
                      f"{_reason(e)}")
            return None
        _write_state(job_dir, {"request_id": request_id, "job_id": None, "log_offset": 0,
                               "recoveries": 0})
        jobdir.say(job_dir, f"sent to SkyPilot as a managed job (request {request_id})")
        return request_id

    def _price_refusal(self, sky: Any, task: Any) -> str | None:
        """The optimizer's choice against `max_price_per_hour` (asked only when one is set)."""
        cap = self.settings.max_price_per_hour
        if cap is None:
            return None
        dag = sky.get(sky.optimize(_dag(sky, task)))
        best = dag.tasks[0].best_resources
        hourly = float(best.get_cost(3600)) if best is not None else None
        return sky_task.price_refusal(hourly, cap, str(best))

    def estimate(self, resources: Resources, context: EstimateContext) -> Estimate:
        """The optimizer's choice for a job asking `resources`, priced (`estimate`)."""
        return ESTIMATOR.estimate(_sky, self.name, self.settings, resources, context)

    def _managed_id(self, job_dir: Path) -> int | None:
        """The managed job's id, once the API server has answered the launch request."""
        state = _read_state(job_dir)
        if state.get("job_id") is not None:
            return int(state["job_id"])
        request_id = state.get("request_id")
        if not request_id:
            return None
        sky = _sky()
        found = sky.api_status([request_id])
        status = str(getattr(found[0], "status", "")) if found else ""
        if not any(s in status for s in ("SUCCEEDED", "FAILED", "CANCELLED")):
            return None  # still launching
        try:
            job_ids, _handle = sky.get(request_id)
        except Exception as e:
            self._end(job_dir, "failed", f"SkyPilot could not launch the job: {_reason(e)}")
            state["request_id"] = None
            _write_state(job_dir, state)
            return None
        state["job_id"] = int(job_ids[0])
        _write_state(job_dir, state)
        jobdir.say(job_dir, f"SkyPilot managed job {state['job_id']}")
        return int(state["job_id"])

    # --- following -----------------------------------------------------------------------

    def query(self, job_id: int) -> ManagedJob | None:
        """SkyPilot's view of managed job `job_id` (cached `query_interval` s); None when the
        API server did not answer. One queue request covers every job asked about lately."""
        now = time.monotonic()
        with self._lock:
            self._asked[job_id] = now
            known = self._known.get(job_id)
            if known is not None and now - known[0] < self.query_interval:
                return known[1]
            ids = sorted(i for i, t in self._asked.items() if now - t < 60.0)
        try:
            sky = _sky()
            answer = sky.get(sky.jobs.queue_v2(refresh=False, all_users=False, job_ids=ids,
                                               fields=QUEUE_FIELDS))
            records = answer[0] if isinstance(answer, tuple) else answer
            found = {}
            for record in records:
                doc = record.model_dump() if hasattr(record, "model_dump") else dict(record)
                info = sky_task.parse_record(doc)
                if info is not None:
                    found[info.job_id] = info
        except Exception as e:
            self._warn("queue", f"SkyPilot's API server did not answer: {_reason(e)}")
            found = None
        with self._lock:
            for i in ids:
                self._known[i] = (now, found.get(i) if found is not None else None)
        return found.get(job_id) if found is not None else None

    def sync(self, job: Job, job_dir: Path) -> None:
        """Copy the runner's status, new log bytes and, once it has ended, its outputs from
        object storage into the job directory; note recoveries in the log."""
        state = _read_state(job_dir)
        if state.get("final"):
            return
        try:
            job_id = self._managed_id(job_dir)
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
        if job_id is None:
            return bool(state.get("request_id"))  # the API server has not answered yet
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
        """``sky.jobs.cancel``: SkyPilot stops the task and tears its machine down. Only the
        request is sent (SkyPilot takes tens of seconds to carry it out, which the worker
        thread must not wait for); `reconcile` ends the job once SkyPilot says CANCELLED."""
        jobdir.write_json(job_dir / jobdir.CANCEL, {"at": time.time(), "force": force})
        job_id = _read_state(job_dir).get("job_id")
        if job_id is None:
            return
        try:
            sky = _sky()
            sky.jobs.cancel(job_ids=[int(job_id)])
        except Exception as e:
            if not force:
                raise JobError(f"SkyPilot did not take the cancel of managed job {job_id}: "
                               f"{_reason(e)}", 503) from None
        with self._lock:
            self._known.pop(int(job_id), None)

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
        found = jobdir.read_json(job_dir / MACHINES) if (job_dir / MACHINES).exists() else None
        if not isinstance(found, list):
            return None
        return [m for m in found if isinstance(m, dict)] or None

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


def _dag(sky: Any, task: Any) -> Any:
    with sky.Dag() as dag:
        dag.add(task)
    return dag


def _reason(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text if len(text) <= 2000 else text[:2000] + "…"


def _read_state(job_dir: Path) -> dict[str, Any]:
    return jobdir.read_object(job_dir / STATE)


def _write_state(job_dir: Path, state: Mapping[str, Any]) -> None:
    jobdir.write_json(job_dir / STATE, state)
