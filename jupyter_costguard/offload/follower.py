"""Following jobs: what each runner wrote, read into the store.

One pass reads each active job's status (after its backend's `sync`), accounts its spend,
records when each phase began and what it had cost by then, and ends what needs ending: a
cancel the runner did not obey in time, a time limit the runner did not keep, a runner that
vanished (relaunched while attempts remain, else the job is ``lost``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from jupyter_costguard.offload import jobdir
from jupyter_costguard.offload.accounting import Accounting
from jupyter_costguard.offload.backends.base import Backend
from jupyter_costguard.offload.launcher import Launcher
from jupyter_costguard.offload.spec import Job
from jupyter_costguard.offload.store import JobStore

log = logging.getLogger("jupyter_costguard")

#: seconds between the cancel (SIGTERM: the runner shuts its kernel down) and SIGKILL
CANCEL_GRACE_SECONDS = 5.0
#: a job whose runner is gone is given this long to have written its final status
LOST_GRACE_SECONDS = 2.0
#: the states a runner reports; anything else (a cluster's "queued") leaves the job's own
RUNNER_STATES = ("running", "succeeded", "failed", "cancelled")


@dataclass
class Follower:
    """The active jobs, as last read, and one pass over them (worker thread)."""

    store: JobStore
    backends: Mapping[str, Backend]
    job_dir: Callable[[int], Path]
    launcher: Launcher
    accounting: Accounting
    #: called with each job that ends
    listeners: list[Callable[[Job], None]]
    clock: Callable[[], float]
    #: active jobs as last read (for the sampler's pseudo-kernels and auto-stop)
    active: dict[int, Job] = field(default_factory=dict, init=False)
    #: job -> when its cancel was asked for
    cancel_at: dict[int, float] = field(default_factory=dict, init=False)
    _lost_at: dict[int, float] = field(default_factory=dict, init=False)
    _seen_state: dict[int, str] = field(default_factory=dict, init=False)

    def follow(self, ids: list[int]) -> bool:
        """Follow the jobs `ids`; whether any changed state (the metrics are out of date)."""
        changed = False
        for job_id in ids:
            job = self.store.get(job_id)
            if job is None:
                del self.active[job_id]
                continue
            job = self._follow_one(job)
            if job.terminal or job.state != self._seen_state.get(job_id):
                changed = True
                self._seen_state[job_id] = job.state
            if job.terminal:
                self._seen_state.pop(job_id, None)
                self.active.pop(job_id, None)
                self.cancel_at.pop(job_id, None)
                self._lost_at.pop(job_id, None)
                for listener in self.listeners:
                    listener(job)
            else:
                self.active[job_id] = job
        return changed

    def _follow_one(self, job: Job) -> Job:
        d = self.job_dir(job.id)
        now = self.clock()
        if not job.terminal and not self.launcher.launched(job):  # waiting for a local slot
            if job.id not in self.cancel_at:
                return job
            new = job.ended_as("cancelled", "cancelled by the user before it started", now)
            new = dataclasses.replace(new, ended=now)
            self.store.save(new)
            log.info("costguard: job %d cancelled while it waited", job.id)
            return new
        # a backend whose runner cannot write here (Kubernetes) brings its files up to date
        backend = self.backends.get(job.spec.backend)
        if backend is not None:
            backend.sync(job, d)
        status = jobdir.read_status(d)
        said = status.phase_times if status is not None else {}
        local = self.launcher.local(job.spec.backend)
        spend = self.accounting.spend(job, local, said, now)
        phase_times = dict(job.phase_times)
        phase_spend = dict(job.phase_spend)
        for phase, when in said.items():
            if phase not in phase_times:
                phase_times[phase] = when
                phase_spend[phase] = spend
        new = dataclasses.replace(job, kernel_pid=None, runner_pid=None,
                                  spend=max(job.spend, spend), phase_times=phase_times,
                                  phase_spend=phase_spend)
        if status is not None:
            new = dataclasses.replace(
                new, state=status.state if status.state in RUNNER_STATES else job.state,
                phase=status.phase, attempts=status.attempt, exit_reason=status.exit_reason,
                kernel_pid=status.kernel_pid, runner_pid=status.runner_pid)
        if not new.terminal:
            new = self._check_alive(new, d, now)
        if local and new.kernel_pid is not None:
            self.accounting.count_gpu(job.id)
        if new.terminal and new.ended is None:
            env = jobdir.read_json(d / jobdir.ENVIRONMENT)
            record = dict(new.record)
            if env is not None:
                record["environment"] = env
            record["attempts"] = status.attempts if status is not None else []
            gpu = self.accounting.gpu_record(job.id)
            if gpu is not None:
                record["gpu"] = gpu
            new = dataclasses.replace(new, ended=phase_times.get("done", now), record=record,
                                      kernel_pid=None)
            log.info("costguard: job %d %s%s", new.id, new.state,
                     f": {new.exit_reason}" if new.exit_reason else "")
        if new != job:
            self.store.save(new)
        return new

    def _check_alive(self, job: Job, d: Path, now: float) -> Job:
        backend = self.backends[job.spec.backend]
        cancel_at = self.cancel_at.get(job.id)
        if cancel_at is not None and now - cancel_at > CANCEL_GRACE_SECONDS:
            backend.cancel(job, d, force=True)
            return job.ended_as("cancelled", "cancelled by the user (killed after "
                                f"{CANCEL_GRACE_SECONDS:g} s)", now)
        limit = job.spec.resources.time_limit_seconds
        started = job.phase_times.get("starting")
        if limit is not None and started is not None and now > started + limit + 30:
            backend.cancel(job, d, force=True)
            return job.ended_as("failed", f"time limit of {limit:g} s exceeded "
                                "(the runner did not stop by itself)", now)
        if backend.alive(job, d):
            self._lost_at.pop(job.id, None)
            return job
        first = self._lost_at.setdefault(job.id, now)
        if now - first < LOST_GRACE_SECONDS:
            return job  # its last status write may be on its way
        del self._lost_at[job.id]
        if cancel_at is not None:
            return job.ended_as("cancelled", "cancelled by the user", now)
        if job.attempts < job.spec.retries + 1 and job.attempts > 0:
            log.warning("costguard: job %d: its runner vanished during attempt %d; starting "
                        "another", job.id, job.attempts)
            return self.launcher.launch(job)
        return job.ended_as("lost", "the job's runner vanished without a result", now)
