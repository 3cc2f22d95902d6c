"""One GPU-activity rule (issue 36): busy, idle or unknown, one threshold default, and what
the views, the status document and the hub's node figures say of a GPU that reports no
utilisation (a MIG instance): "unknown", never busy, never idle."""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from jupyter_costguard.common.gpuactivity import (
    GPU_BUSY_PERCENT,
    combined_activity,
    gpu_activity,
)
from jupyter_costguard.cost.catalog import Catalog
from jupyter_costguard.cost.config import CostTraits
from jupyter_costguard.cost.ledger import Ledger
from jupyter_costguard.cost.pricing import PricingConfig, resolve_pricing
from jupyter_costguard.cost.published import Published
from jupyter_costguard.cost.service import CostService
from jupyter_costguard.cost.spend import split_interval
from jupyter_costguard.cost.views import build_views
from jupyter_costguard.guard.autostop import AutoStopRule
from jupyter_costguard.guard.idle import IdleKernelRule
from jupyter_costguard.guard.rules import default_rules
from jupyter_costguard.hub.cull import KEEP, STOP, CullPolicy, decide
from jupyter_costguard.hub.nodegpu import NodeGpu
from jupyter_costguard.hub.settings import HubSettings
from jupyter_costguard.hub.store import HubStore
from jupyter_costguard.hub.storerows import with_node_activity
from jupyter_costguard.metrics.collector import build_metrics
from jupyter_costguard.sampling.records import GpuReading
from jupyter_costguard.sampling.telemetry import Telemetry
from tests.support.guard_harness import gpu, kernel, sample
from tests.support.openapi_check import validate
from tests.support.units import GiB

NOW = 1_700_000_000.0


def test_the_rule() -> None:
    assert gpu_activity(90.0, 5.0) == "busy"
    assert gpu_activity(5.0, 5.0) == "busy"  # at the threshold: busy
    assert gpu_activity(4.99, 5.0) == "idle"
    assert gpu_activity(0.0) == "idle"
    assert gpu_activity(None) == "unknown"  # MIG: NVML reports none
    assert gpu_activity(math.nan) == "unknown"
    assert gpu_activity(GPU_BUSY_PERCENT) == "busy" and GPU_BUSY_PERCENT == 5.0
    # several GPUs held together: busy wins, then unknown (it may be working), then idle
    assert combined_activity(["idle", "busy", "unknown"]) == "busy"
    assert combined_activity(["idle", "unknown"]) == "unknown"
    assert combined_activity(["idle", "idle"]) == "idle"
    assert combined_activity([]) is None


def test_every_threshold_default_is_the_one_constant() -> None:
    """The server's traitlet, the hub's setting, the node reader, the guard's rules, the
    spend model and the service take their default from `GPU_BUSY_PERCENT`."""
    assert CostTraits.idle_gpu_threshold_percent.default_value == GPU_BUSY_PERCENT
    assert HubSettings.gpu_busy_percent.default_value == GPU_BUSY_PERCENT
    assert NodeGpu("http://x").busy_percent == GPU_BUSY_PERCENT
    defaults = [
        inspect.signature(split_interval).parameters["idle_threshold_percent"].default,
        inspect.signature(CostService).parameters["idle_threshold_percent"].default,
        inspect.signature(AutoStopRule).parameters["gpu_busy_percent"].default,
        inspect.signature(IdleKernelRule).parameters["gpu_busy_percent"].default,
        inspect.signature(default_rules).parameters["gpu_busy_percent"].default,
    ]
    assert defaults == [GPU_BUSY_PERCENT] * len(defaults)


def mig_sample(mig_util: float | None = None):
    """An idle kernel on a MIG instance (no utilisation) and one on an idle plain GPU."""
    gpus = [gpu(0, mig_util, 4 * GiB, 40 * GiB, uuid="MIG-a", pids=[101]),
            gpu(1, 0.0, 4 * GiB, 80 * GiB, uuid="GPU-b", pids=[202])]
    kernels = [kernel("mig", "mig.ipynb", {"MIG-a": 4 * GiB}, last_activity=NOW - 3600,
                      pid=101),
               kernel("plain", "plain.ipynb", {"GPU-b": 4 * GiB}, last_activity=NOW - 3600,
                      pid=202)]
    return sample(NOW, 2.0, gpus, kernels)


def test_views_say_unknown_for_a_gpu_without_utilisation(tmp_path: Path) -> None:
    s = mig_sample()
    pricing = resolve_pricing(Catalog.load(), instance_type=None, environ={}, gpu=None,
                              host=None, hourly_rate=36.0)
    ledger = Ledger(tmp_path / "l.sqlite", now=NOW)
    cost = split_interval(s, 36.0, 0.9)
    ledger.record(NOW, 2.0, cost, paths={"mig": "mig.ipynb", "plain": "plain.ipynb"},
                  names={"mig": "python3", "plain": "python3"})
    views = build_views(s, cost, pricing, ledger, 2.0, GPU_BUSY_PERCENT,
                        gpu_busy_time=NOW - 600)
    data = views.data
    for name in ("status", "gpus", "kernels", "notebooks"):
        validate(f"/{name}", 200, data[name])
    assert {g["uuid"]: g["activity"] for g in data["gpus"]["gpus"]} == {
        "MIG-a": "unknown", "GPU-b": "idle"}
    kernels = {k["kernel_id"]: k for k in data["kernels"]["kernels"]}
    assert kernels["mig"]["gpu_activity"] == "unknown"
    assert kernels["mig"]["gpu_utilization_percent"] is None
    assert kernels["mig"]["spend"] > 0 and kernels["mig"]["waste"] == 0
    assert kernels["plain"]["gpu_activity"] == "idle" and kernels["plain"]["waste"] > 0
    notebooks = {n["path"]: n for n in data["notebooks"]["notebooks"]}
    assert notebooks["mig.ipynb"]["gpu_activity"] == "unknown"
    assert notebooks["plain.ipynb"]["gpu_activity"] == "idle"
    # held MIG: not busy, but no idle clock either (it may be working)
    assert data["status"]["gpu_activity"] == {"gpus_held": 2, "gpus_busy": 0,
                                              "gpus_unknown": 1, "idle_since": None}
    # /metrics says the same: a MIG instance has no utilisation series, but its activity
    published = Published(sample=s, cost=cost, pricing=pricing, views=views)
    (family,) = [f for f in build_metrics(published) if f.name == "costguard_gpu_activity"]
    assert {x.labels["uuid"]: (x.labels["activity"], x.value) for x in family.samples} == {
        "MIG-a": ("unknown", 1.0), "GPU-b": ("idle", 1.0)}


class Source:
    """One MIG instance, held; its utilisation as the test sets it (None: not reported)."""

    simulated = False

    def __init__(self) -> None:
        self.util: float | None = None

    def read(self, kernel_pids: Sequence[int],
             notebooks: Mapping[int, str] | None = None) -> GpuReading:
        return GpuReading("ok", gpus=(gpu(0, self.util, GiB, 40 * GiB, uuid="MIG-a",
                                          pids=[101]),))

    def close(self) -> None:
        pass


def test_the_service_runs_no_idle_clock_while_a_gpu_of_unknown_activity_is_held(
        tmp_path: Path) -> None:
    """The status document's `idle_since` (what a hub's culler reads) stays null while a
    MIG instance is held, and starts once only idle GPUs are left."""
    source = Source()
    service = CostService(Telemetry(source), Ledger(tmp_path / "l.sqlite"),
                          PricingConfig(hourly_rate=1.0), environ={})
    try:
        first = service.tick([]).views.data["status"]["gpu_activity"]
        assert first["gpus_unknown"] == 1 and first["idle_since"] is None
        later = service.tick([]).views.data["status"]["gpu_activity"]
        assert later["idle_since"] is None and later["gpus_busy"] == 0
        source.util = 0.0  # now it reports, and it is idle
        idle = service.tick([]).views.data["status"]["gpu_activity"]
        assert idle["gpus_unknown"] == 0 and idle["idle_since"] is not None
    finally:
        service._close()


def test_the_servers_idle_clock_runs_only_while_it_is_idle_by_every_measure(
        tmp_path: Path) -> None:
    """Issue 44: the status document's `idle_since` (what a hub's culler reads on a server's
    report) follows the one stop decision (`server_idleness`): no idle clock while a kernel
    executes, though every GPU is idle (a long cell must not be stopped mid-run), nor while
    a GPU works though no kernel executes (a training thread); it starts once both stop."""
    import os

    from jupyter_costguard.sampling.records import KernelInfo

    source = Source()
    source.util = 0.0  # the one GPU: held by pid 101, idle
    service = CostService(Telemetry(source), Ledger(tmp_path / "l.sqlite"),
                          PricingConfig(hourly_rate=1.0), environ={})

    def kernel_in(state: str) -> list[KernelInfo]:
        return [KernelInfo(kernel_id="k", name="python3", pid=os.getpid(),
                           execution_state=state, last_activity=NOW, connections=1,
                           path="train.ipynb")]

    try:
        service.tick(kernel_in("idle"))
        running = service.tick(kernel_in("busy")).views.data["status"]["gpu_activity"]
        assert running["gpus_busy"] == 0 and running["idle_since"] is None, running
        source.util = 90.0  # the kernel back at its prompt, its GPU at work
        training = service.tick(kernel_in("idle")).views.data["status"]["gpu_activity"]
        assert training["gpus_busy"] == 1 and training["idle_since"] is None, training
        source.util = 0.0
        last_work = service.published.sample
        assert last_work is not None
        idle = service.tick(kernel_in("idle")).views.data["status"]["gpu_activity"]
        assert idle["idle_since"] == last_work.time, idle
    finally:
        service._close()


def test_hub_node_gpu_of_unknown_activity_is_never_idle(tmp_path: Path) -> None:
    """The node reader's unknown GPUs (a series without a number) keep the pod off the idle
    clock and out of idle GPU hours; the culler keeps the server and says why."""
    store = HubStore(tmp_path / "hub.sqlite")
    key = ("alice", "")
    store.record_cycle({key: ("/user/alice/", "gpu")}, {"alice": []}, NOW, 120.0)
    policy = [CullPolicy("gpu", idle_minutes=10, warn_minutes=1)]
    store.record_node({key: (2, 0, 1)}, NOW, 600.0)  # one idle, one of unknown activity
    store.record_node({key: (2, 0, 1)}, NOW + 3600, 7200.0)
    (row,) = store.servers()
    assert row.node_unknown == 1 and row.node_idle_since is None
    d = decide(with_node_activity(row, NOW + 3600, 120.0), [], policy, NOW + 3600)
    assert d.action == KEEP and "unknown" in d.reason
    # only the idle GPU's hour counted as idle
    assert store.totals()[key][2] == pytest.approx(3600.0)
    # once both report idle, the idle clock starts and the culler stops it in time
    store.record_node({key: (2, 0, 0)}, NOW + 3700, 7200.0)
    store.record_node({key: (2, 0, 0)}, NOW + 4400, 7200.0)
    (row,) = store.servers()
    assert row.node_idle_since == NOW + 3700
    d = decide(with_node_activity(row, NOW + 4400, 120.0), [], policy, NOW + 4400)
    assert d.action == STOP
