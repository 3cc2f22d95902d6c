"""Handing jobs to their backends: the runner's input written into the job directory, the GPUs
a local job gets, and the local queue.

At most `local_capacity()` local jobs run at once; more wait, queued, first come first served,
and start as slots free. A cluster queues its own jobs: they are handed over at once.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from jupyter_costguard.offload import jobdir
from jupyter_costguard.offload.backends.base import Backend
from jupyter_costguard.offload.errors import JobError
from jupyter_costguard.offload.spec import Job
from jupyter_costguard.offload.store import JobStore

log = logging.getLogger("jupyter_costguard")


@dataclass
class Launcher:
    """Starts jobs on their backends, local ones as the machine has room."""

    store: JobStore
    backends: Mapping[str, Backend]
    job_dir: Callable[[int], Path]
    pushgateway_url: str | None
    gpu_picker: Callable[[int], list[str] | None]
    local_capacity: Callable[[], int]
    clock: Callable[[], float]

    def local(self, backend_name: str) -> bool:
        """Jobs of this backend run on this machine (`Backend.local`; a backend no longer
        configured runs nothing here)."""
        backend = self.backends.get(backend_name)
        return backend is not None and backend.local

    def launched(self, job: Job) -> bool:
        """A job is handed to its backend once `launch` wrote its runner's input."""
        return (self.job_dir(job.id) / jobdir.SPEC).exists()

    def _local_running(self, active: Mapping[int, Job]) -> int:
        return sum(1 for j in list(active.values())
                   if self.local(j.spec.backend) and not j.terminal and self.launched(j))

    def _full(self, active: Mapping[int, Job]) -> bool:
        return self._local_running(active) >= max(1, self.local_capacity())

    def launch_or_wait(self, job: Job, active: Mapping[int, Job]) -> Job:
        """Launch a new job, or leave a local one queued behind those already waiting."""
        if not self.local(job.spec.backend):
            return self.launch(job)
        waiting = [j for j in self.store.list_jobs(active_only=True)
                   if j.id != job.id and self.local(j.spec.backend) and not self.launched(j)]
        if waiting or self._full(active):
            log.info("costguard: job %d waits for a local slot (%d running, %d before it)",
                     job.id, self._local_running(active), len(waiting))
            return job  # the follower starts it when a slot frees (`start_waiting`)
        return self.launch(job)

    def start_waiting(self, active: dict[int, Job], cancelled: Collection[int]) -> bool:
        """Start queued local jobs, oldest first, while there is room; whether any started."""
        waiting = sorted((j for j in active.values()
                          if self.local(j.spec.backend) and j.state == "queued"
                          and j.id not in cancelled and not self.launched(j)),
                         key=lambda j: j.id)
        started = False
        for job in waiting:
            if self._full(active):
                break
            active[job.id] = self.launch(job)
            started = True
        return started

    def launch(self, job: Job) -> Job:
        """Write the runner's input and start it; a backend that cannot ends the job
        `failed` with why (it must not sit queued for ever)."""
        d = self.job_dir(job.id)
        environment: dict[str, str] = {}
        if self.pushgateway_url:
            environment[jobdir.ENV_PUSHGATEWAY_URL] = self.pushgateway_url
        gpus = job.spec.resources.gpus
        if gpus is not None and self.local(job.spec.backend):  # a cluster picks its own
            try:
                picked = self.gpu_picker(gpus)
            except JobError:
                picked = None  # fewer GPUs than at submit: let the job see what there is
            if picked is not None:
                environment["CUDA_VISIBLE_DEVICES"] = ",".join(picked)
        checkpoint_dir = job.spec.checkpoint_location or str(d / jobdir.CHECKPOINTS)
        doc = {"id": job.id, "spec": job.spec.to_json(), "checkpoint_dir": checkpoint_dir,
               "environment": environment}
        digest = job.record.get("inputs_sha256")
        if job.spec.send and isinstance(digest, str):  # the runner checks inputs against it
            doc["inputs_sha256"] = digest
        jobdir.private_dir(d)
        jobdir.write_json(d / jobdir.SPEC, doc)
        try:
            ref = self.backends[job.spec.backend].launch(job, d, environment)
        except Exception as e:
            log.exception("costguard: job %d: the %s backend could not start it", job.id,
                          job.spec.backend)
            now = self.clock()
            job = job.ended_as("failed", f"could not start on {job.spec.backend}: "
                               f"{type(e).__name__}: {e}", now)
            job = dataclasses.replace(job, ended=self.clock())
        else:
            job = dataclasses.replace(job, backend_ref=ref)
        self.store.save(job)
        return job
