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

from jupyter_costguard.common.proc import descends_from
from jupyter_costguard.offload import jobdir
from jupyter_costguard.offload.accounting import Accounting
from jupyter_costguard.offload.backends.base import Backend
from jupyter_costguard.offload.launcher import Launcher
from jupyter_costguard.offload.spec import Job
from jupyter_costguard.offload.store import JobStore

log = logging.getLogger("jupyter_costguard")

#: a job whose runner is gone is given this long to have written its final status
LOST_GRACE_SECONDS = 2.0
#: the states a runner reports; anything else (a cluster's "queued") leaves the job's own
RUNNER_STATES = ("running", "succeeded", "failed", "cancelled")
#: passes in a row that may fail on one job before it is failed (the others go on)
MAX_FOLLOW_ERRORS = 3


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
    #: job -> passes in a row that failed on it
    _errors: dict[int, int] = field(default_factory=dict, init=False)
    #: job -> (kernel pid, whether it descends from the job's runner), checked once per pid
    _kernel_checked: dict[int, tuple[int, bool]] = field(default_factory=dict, init=False)

    def follow(self, ids: list[int]) -> bool:
        """Follow the jobs `ids`; whether any changed state (the metrics are out of date).
        Each job is followed on its own: what goes wrong with one (its files, its backend)
        is logged against it and leaves the others followed."""
        changed = False
        for job_id in ids:
            try:
                job = self._follow_guarded(job_id)
            except Exception:  # even the store: the next pass tries again
                log.exception("costguard: following job %d failed", job_id)
                continue
            if job is None:
                self.active.pop(job_id, None)
                continue
            if job.terminal or job.state != self._seen_state.get(job_id):
                changed = True
                self._seen_state[job_id] = job.state
            if job.terminal:
                self._seen_state.pop(job_id, None)
                self.active.pop(job_id, None)
                self.cancel_at.pop(job_id, None)
                self._lost_at.pop(job_id, None)
                self._kernel_checked.pop(job_id, None)
                for listener in self.listeners:
                    try:
                        listener(job)
                    except Exception:
                        log.exception("costguard: job %d: a listener failed", job_id)
            else:
                self.active[job_id] = job
        return changed

    def _follow_guarded(self, job_id: int) -> Job | None:
        job = self.store.get(job_id)
        if job is None:
            return None
        try:
            new = self._follow_one(job)
        except Exception as e:
            errors = self._errors[job_id] = self._errors.get(job_id, 0) + 1
            log.exception("costguard: following job %d failed (%d in a row)", job_id, errors)
            if errors < MAX_FOLLOW_ERRORS or job.terminal:
                return job
            del self._errors[job_id]
            return self._fail(job, self.job_dir(job_id), "costguard could not follow the job: "
                              f"{type(e).__name__}: {e}", self.clock(), save=True)
        self._errors.pop(job_id, None)
        return new

    def _fail(self, job: Job, d: Path, reason: str, now: float, save: bool = False) -> Job:
        """End `job` failed for `reason`, stopping its runner if it still runs."""
        log.warning("costguard: job %d failed: %s", job.id, reason)
        backend = self.backends.get(job.spec.backend)
        if backend is not None and self.launcher.launched(job):
            try:
                backend.cancel(job, d, force=True)
            except Exception:
                log.exception("costguard: job %d: could not stop its runner", job.id)
        new = dataclasses.replace(job.ended_as("failed", reason, now), kernel_pid=None)
        if save:
            new = dataclasses.replace(new, ended=new.phase_times.get("done", now))
            self.store.save(new)
        return new

    def _own_kernel(self, job: Job, pid: int | None) -> int | None:
        """The kernel pid the runner reported, if that process descends from the job's runner
        (the local backend's ref); None, with a log line, if it does not: a job's cell can
        write any pid into its status, and the sampler attributes that pid's whole tree."""
        if pid is None:
            return None
        checked = self._kernel_checked.get(job.id)
        if checked is not None and checked[0] == pid:
            return pid if checked[1] else None
        ref = job.backend_ref
        runner = int(ref) if ref is not None and ref.isdigit() else None
        ok = runner is not None and descends_from(pid, runner)
        self._kernel_checked[job.id] = (pid, ok)
        if not ok:
            log.warning("costguard: job %d reports kernel pid %d, which is not a process of "
                        "its runner (%s); not attributed to the job", job.id, pid, ref)
        return pid if ok else None

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
        status, problem = jobdir.check_status(d)
        said = status.phase_times if status is not None else {}
        local = self.launcher.local(job.spec.backend)
        machines = backend.machines(job, d) if backend is not None else None
        spend = self.accounting.spend(job, local, said, now, machines)
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
            if local:
                new = dataclasses.replace(new, kernel_pid=self._own_kernel(job,
                                                                           status.kernel_pid))
        if problem is not None and not new.terminal:  # stop its kernel too (last one seen)
            new = self._fail(dataclasses.replace(new, kernel_pid=job.kernel_pid), d, problem,
                             now)
        if not new.terminal:
            new = self._check_alive(new, d, now)
        if local and new.kernel_pid is not None:
            self.accounting.count_gpu(job.id)
        if new.terminal and new.ended is None:
            env = jobdir.read_environment(d)
            record = dict(new.record)
            if env is not None:
                record["environment"] = env
            record["attempts"] = status.attempts if status is not None else []
            digest = self._results_digest(job, d)
            if digest is not None:
                record["results_sha256"] = digest
            if machines:  # where a SkyPilot job really ran, and at what price
                record["machines"] = self.accounting.priced_machines(job, machines)
            gpu = self.accounting.gpu_record(job.id)
            if gpu is not None:
                record["gpu"] = gpu
            new = dataclasses.replace(new, ended=phase_times.get("done", now), record=record,
                                      kernel_pid=None)
            # the end (state, elapsed, spend, attempts) is logged by the service's listener
        if new != job:
            self.store.save(new)
        return new

    def _results_digest(self, job: Job, d: Path) -> str | None:
        """The digest of the results the job produced, as its runner recorded it, when the
        file matches it now; what the store keeps is what "Load results" and ``%costguard
        fetch`` check the file against later (a file planted or swapped after fails)."""
        if not job.spec.bring_back:
            return None
        digest = jobdir.read_results_index(d)["sha256"]
        if digest is None:
            return None
        try:
            actual = jobdir.sha256_file(d / jobdir.RESULTS)
        except OSError:
            return None
        if actual != digest:
            log.warning("costguard: job %d: %s does not match the digest its runner recorded; "
                        "not offered for loading", job.id, jobdir.RESULTS)
            return None
        return digest

    def _check_alive(self, job: Job, d: Path, now: float) -> Job:
        backend = self.backends[job.spec.backend]
        cancel_at = self.cancel_at.get(job.id)
        grace = backend.cancel_grace_seconds
        if cancel_at is not None and now - cancel_at > grace:
            backend.cancel(job, d, force=True)
            return job.ended_as("cancelled", f"cancelled by the user (killed after {grace:g} s)",
                                now)
        limit = job.spec.resources.time_limit_seconds
        started = job.phase_times.get("starting")
        if limit is not None and started is not None and now > started + limit + 30:
            backend.cancel(job, d, force=True)
            return job.ended_as("failed", f"time limit of {limit:g} s exceeded "
                                "(the runner did not stop by itself)", now)
        if backend.reconcile(job, d):
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
