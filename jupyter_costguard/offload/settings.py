"""What the job service is given: the admin's settings, and what it asks of the rest of the
server as plain callables (so it imports neither the Jupyter server nor the cost service)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from jupyter_costguard.offload.spec import Resources


@dataclass(frozen=True)
class JobSettings:
    """``c.CostGuard.offload_*`` and friends, as the service uses them."""

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
    clock: Callable[[], float] = time.time
