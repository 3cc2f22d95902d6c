"""What the job service is given: the admin's settings (and the traits that set them), and what
it asks of the rest of the server as plain callables (so it imports neither the Jupyter server
nor the cost service)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from traitlets import Bool, Dict, Float, Int, Unicode
from traitlets.config import Configurable

from jupyter_costguard.cost.pricing import MachinePrice
from jupyter_costguard.offload.spec import Resources


@dataclass(frozen=True)
class JobSettings:
    """``c.Offload.<name>`` and friends, as the service uses them."""

    #: what a request that says nothing gets
    resources: Resources = field(default_factory=Resources)
    retries: int = 0
    retry_backoff_seconds: float = 2.0
    max_send_bytes: int = 100 << 20
    backend: str = "local"
    #: set in every job's environment (`jobdir.ENV_PUSHGATEWAY_URL`); None: no Pushgateway
    pushgateway_url: str | None = None
    #: backend -> {"gpu_per_hour", "cpu_per_hour", "memory_gib_per_hour"}: what a job's
    #: allocation costs where the server cannot sample it (a cluster)
    cluster_rates: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    #: seconds between two reads of the active jobs' status
    poll_interval: float = 0.5


@dataclass(frozen=True)
class ServerHooks:
    """The server's side of the job service. The defaults make a service that needs no
    server (tests, tools)."""

    #: the Jupyter server's kernel manager (`send` pickles variables from a notebook's kernel)
    kernel_manager: Any = None
    kernel_spec_names: Callable[[], set[str]] = lambda: {"python3"}
    #: the ledger's spend of a (pseudo-)kernel id, ``job-<id>`` for a local job
    job_spend: Callable[[str], float] = lambda kernel_id: 0.0
    currency: Callable[[], str] = lambda: "USD"
    #: why the budget refuses a job of this notebook (path), or None
    budget_refuses: Callable[[str], str | None] = lambda path: None
    #: the UUIDs of `n` GPUs for a local job (`accounting.pick_gpus`), None when it sees none
    gpu_picker: Callable[[int], list[str] | None] = lambda n: None
    #: how many local jobs may run at once (more wait, queued, first come first served)
    local_capacity: Callable[[], int] = lambda: 1
    #: kernel id -> (sample time, interval, mean utilisation % of the GPUs it holds) in the
    #: latest sample, or None when it holds none (`accounting.kernel_gpu_usage`)
    gpu_usage: Callable[[str], tuple[float, float, float] | None] = lambda kernel_id: None
    #: (provider, instance type, region, market) -> that machine's catalog price, or None:
    #: what the machines a SkyPilot job ran on are charged at (`Accounting.priced_machines`)
    machine_price: Callable[[str, str, str | None, str], MachinePrice | None] = \
        lambda provider, instance_type, region, market: None
    clock: Callable[[], float] = time.time
    #: where job submits and ends are logged; None: the server's own log (its kernel
    #: manager's) under a Jupyter server, else the ``jupyter_costguard`` logger
    log: Any = None


_J = JobSettings()


class Offload(Configurable):
    """The job service's options (`c.Offload.<name>`); created by the server extension with
    it as parent."""

    #: the old names (`c.CostGuard.<old>`), which still work for a release
    moved_from_costguard: ClassVar[dict[str, str]] = {
        "offload_enabled": "enabled",
        "jobs_dir": "jobs_dir",
        "offload_time_limit_seconds": "time_limit_seconds",
        "offload_retries": "retries",
        "offload_retry_backoff_seconds": "retry_backoff_seconds",
        "offload_max_send_bytes": "max_send_bytes",
        "offload_poll_interval": "poll_interval",
        "cluster_rates": "cluster_rates",
    }

    enabled = Bool(True, config=True, help="Offer running cells as batch jobs.")
    jobs_dir = Unicode(
        "", config=True, help="Directory of the job store (jobs.sqlite) and each job's files. "
        "Default (empty): 'jobs' next to the ledger.")
    time_limit_seconds = Float(
        None, allow_none=True, config=True,
        help="Time limit of a job that asks for none (seconds; None: no limit).")
    retries = Int(_J.retries, config=True, help="Retries of a failed job that asks for none.")
    retry_backoff_seconds = Float(
        _J.retry_backoff_seconds, config=True,
        help="Wait before the first retry; doubled for each next one.")
    max_send_bytes = Int(
        _J.max_send_bytes, config=True, help="Largest pickle of variables sent into a job.")
    poll_interval = Float(
        _J.poll_interval, config=True, help="Seconds between reads of an active job's status.")
    cluster_rates = Dict(
        config=True,
        help="What a cluster job's allocation costs, per backend, in the configured currency: "
        "{'slurm': {'gpu_per_hour': 2.5, 'cpu_per_hour': 0.04, 'memory_gib_per_hour': 0.005}}. "
        "A job's spend is the time its allocation was held times the rates of what it asked "
        "for. Without it cluster jobs show no spend (the server cannot sample them).")

    def job_settings(self, pushgateway_url: str | None) -> JobSettings:
        return JobSettings(
            resources=Resources(time_limit_seconds=self.time_limit_seconds),
            retries=self.retries, retry_backoff_seconds=self.retry_backoff_seconds,
            max_send_bytes=self.max_send_bytes, pushgateway_url=pushgateway_url,
            cluster_rates=self.cluster_rates, poll_interval=self.poll_interval)


class Pushgateway(Configurable):
    """Where metrics are pushed (`c.Pushgateway.<name>`): each job's own, and each finished
    job's from the server."""

    #: the old names (`c.CostGuard.<old>`), which still work for a release
    moved_from_costguard: ClassVar[dict[str, str]] = {"pushgateway_url": "url"}

    url = Unicode(
        None, allow_none=True, config=True,
        help="Prometheus Pushgateway jobs push their metrics to (it must be reachable from "
        "where jobs run).")
