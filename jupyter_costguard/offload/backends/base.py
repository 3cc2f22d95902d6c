"""What a backend is to the job service: every hook the service calls, in one class.

A backend starts the job runner for a prepared job directory, reconciles the job with what
the backend knows (is the runner still there; if the job ended without it saying how, why),
and stops it. Everything else (state, log, outputs, results) the runner writes into the
job directory, which the server reads whatever the backend. The other hooks have do-nothing
defaults: a backend overrides the ones it needs, and the service calls them all without asking.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jupyter_costguard.offload.estimate import Estimate, EstimateContext, rates_estimate
from jupyter_costguard.offload.spec import Job, Resources


class Backend(ABC):
    """One place jobs can run. Hooks run on the job service's worker thread."""

    name: str = ""
    #: its jobs run on this machine: the server picks their GPUs, samples their kernels (their
    #: spend comes from the ledger) and queues them against the local capacity. A cluster's
    #: jobs get its own GPUs and are charged by allocation.
    local: bool = False
    #: how long a cancelled job may take to stop before the service ends it itself (and
    #: cancels again with force): a cluster that tears a machine down takes longer
    cancel_grace_seconds: float = 5.0

    @abstractmethod
    def launch(self, job: Job, job_dir: Path, environment: Mapping[str, str] = {}) -> str | None:
        """Start the runner; returns what the backend knows the job by (`Job.backend_ref`).
        `environment` is what the job's kernel needs set before it starts (e.g.
        CUDA_VISIBLE_DEVICES)."""

    @abstractmethod
    def reconcile(self, job: Job, job_dir: Path) -> bool:
        """Whether the job's runner may still write to its directory, after settling what
        the backend knows: a job that ended without its runner saying how gets the backend's
        reason written into the directory (its status and log), and a job the backend cannot
        run is cancelled first. The follower calls it for each job that has not ended."""

    @abstractmethod
    def cancel(self, job: Job, job_dir: Path, force: bool = False) -> None:
        """Ask the runner to stop (SIGTERM-like); `force` kills what is left."""

    def sync(self, job: Job, job_dir: Path) -> None:
        """Bring the job directory up to date before the follower reads it (for a runner that
        cannot write there itself)."""
        return None

    def describe(self, job: Job, job_dir: Path) -> Mapping[str, Any] | None:
        """What the backend says about a job that has not ended (why it waits, where it
        runs), for the API; None: nothing to add."""
        return None

    def machines(self, job: Job, job_dir: Path) -> list[Mapping[str, Any]] | None:
        """The machines the job ran on, each with its cloud identity, start, last sight and
        end (SkyPilot's): its spend is then each machine's time at that instance's price.
        None: the backend cannot say, and the allocation is charged at `cluster_rates`."""
        return None

    def estimate(self, resources: Resources, context: EstimateContext) -> Estimate:
        """What a job asking `resources` would cost here, before it is submitted (the
        offload dialog shows it). Default: the site's `cluster_rates` for this backend, the
        rates its jobs' spend is charged at. It may ask the backend's service (seconds): the
        service calls it off the IO loop and off the job worker."""
        return rates_estimate(self.name, resources, context)

    def start(self) -> None:
        """The service begins following jobs (e.g. start warm kernels)."""
        return None

    def close(self) -> None:
        """The service stops: stop what `start` left running."""
        return None
