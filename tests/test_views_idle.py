"""One `idle_seconds`: the kernels document, the Prometheus metric and the idle rule agree on
every kernel, whatever its execution state (a "starting" kernel used to be idle in the API
and 0 s in Prometheus)."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_costguard.cost.catalog import Catalog
from jupyter_costguard.cost.ledger import Ledger
from jupyter_costguard.cost.pricing import resolve_pricing
from jupyter_costguard.cost.published import Published
from jupyter_costguard.cost.views import build_views
from jupyter_costguard.guard.base import GuardContext
from jupyter_costguard.guard.config import GuardConfig
from jupyter_costguard.guard.idle import IdleKernelRule
from jupyter_costguard.metrics.collector import build_metrics
from jupyter_costguard.sampling.records import (
    GpuReading,
    GpuSample,
    HostSample,
    KernelInfo,
    KernelSample,
    Sample,
)
from tests.support.units import GiB

NOW = 1_700_000_000.0
STATES = ("idle", "busy", "starting", "restarting", "autorestarting", "dead", "unknown")


def one_kernel_per_state() -> Sample:
    kernels = tuple(
        KernelSample(info=KernelInfo(kernel_id=state, name="python3", pid=i + 10,
                                     execution_state=state, last_activity=NOW - 100.0 - i,
                                     connections=0, path=f"{state}.ipynb"),
                     pids=(i + 10,), cpu_seconds=0.0, rss_bytes=0,
                     gpu_memory_bytes={"GPU-a": GiB})
        for i, state in enumerate(STATES))
    gpu = GpuSample(index=0, uuid="GPU-a", name="A100", memory_total_bytes=80 * GiB,
                    memory_used_bytes=len(STATES) * GiB, utilization_percent=0.0,
                    power_watts=60.0)
    return Sample(time=NOW, interval=2.0, gpu=GpuReading(status="ok", gpus=(gpu,)),
                  host=HostSample(cpu_count=4, cpu_percent=0.0, memory_total_bytes=1 << 34,
                                  memory_used_bytes=1 << 30),
                  kernels=kernels, simulated=False)


def test_api_metric_and_idle_rule_share_one_idle_seconds(tmp_path: Path) -> None:
    sample = one_kernel_per_state()
    pricing = resolve_pricing(Catalog.load(), instance_type=None, environ={}, gpu=None,
                              host=None, hourly_rate=1.0)
    ledger = Ledger(tmp_path / "l.sqlite", now=NOW)
    views = build_views(sample, None, pricing, ledger, 2.0, 5.0)
    published = Published(sample=sample, cost=None, pricing=pricing, views=views)

    api = {k["kernel_id"]: k["idle_seconds"] for k in views.data["kernels"]["kernels"]}
    (idle_family,) = [f for f in build_metrics(published)
                      if f.name == "costguard_kernel_idle_seconds"]
    metric = {s.labels["kernel_id"]: s.value for s in idle_family.samples}
    config = GuardConfig(idle_kernel_seconds=60.0)
    found = IdleKernelRule(config).evaluate(GuardContext(
        now=NOW, published=published, ledger=ledger, catalog=Catalog.load(), config=config))
    rule = {f.key: f.details["idle_seconds"] for f in found.findings}

    expected = {state: 0.0 if state == "busy" else 100.0 + i
                for i, state in enumerate(STATES)}
    assert api == expected
    assert metric == expected
    assert rule == {state: seconds for state, seconds in expected.items() if state != "busy"}
    ledger.close()


@pytest.mark.parametrize("state", ["starting", "restarting"])
def test_a_kernel_that_is_not_running_anything_is_idle_in_prometheus(tmp_path: Path,
                                                                     state: str) -> None:
    """What a user expects: a kernel nobody connected to has been idle since it started."""
    sample = one_kernel_per_state()
    pricing = resolve_pricing(Catalog.load(), instance_type=None, environ={}, gpu=None,
                              host=None, hourly_rate=1.0)
    ledger = Ledger(tmp_path / "l.sqlite", now=NOW)
    published = Published(sample=sample, cost=None, pricing=pricing,
                          views=build_views(sample, None, pricing, ledger, 2.0, 5.0))
    (idle_family,) = [f for f in build_metrics(published)
                      if f.name == "costguard_kernel_idle_seconds"]
    value = {s.labels["kernel_id"]: s.value for s in idle_family.samples}[state]
    assert value >= 100.0
    ledger.close()


def test_a_kernel_whose_gpu_worked_until_a_moment_ago_is_idle_since_then(tmp_path: Path,
                                                                         ) -> None:
    """Issue 44: a kernel at its prompt since NOW - 100 whose training thread kept its GPU at
    90 % until NOW - 30 has been idle 30 s, to the API, the metric and the idle rule alike
    (`WorkClock`, the one stop decision), and 0 s while its GPU worked."""
    from dataclasses import replace

    from jupyter_costguard.cost.activity import WorkClock

    pricing = resolve_pricing(Catalog.load(), instance_type=None, environ={}, gpu=None,
                              host=None, hourly_rate=1.0)
    ledger = Ledger(tmp_path / "l.sqlite", now=NOW)
    config = GuardConfig(idle_kernel_seconds=10.0)
    rule = IdleKernelRule(config)
    clock = WorkClock()
    idle = one_kernel_per_state()
    idle = replace(idle, kernels=idle.kernels[:1])  # "idle", at its prompt since NOW - 100
    (gpu,) = idle.gpu.gpus
    working = replace(idle, time=NOW - 30.0,
                      gpu=replace(idle.gpu, gpus=(replace(gpu, utilization_percent=90.0),)))
    seen: list[tuple[float, float, list[float]]] = []
    for sample in (working, idle):
        clock.observe(sample)
        views = build_views(sample, None, pricing, ledger, 2.0, 5.0, worked=clock.worked)
        published = Published(sample=sample, cost=None, pricing=pricing, views=views)
        (api,) = [k["idle_seconds"] for k in views.data["kernels"]["kernels"]]
        (family,) = [f for f in build_metrics(published)
                     if f.name == "costguard_kernel_idle_seconds"]
        (metric,) = [s.value for s in family.samples]
        found = rule.evaluate(GuardContext(now=sample.time, published=published, ledger=ledger,
                                           catalog=Catalog.load(), config=config))
        seen.append((api, metric, [f.details["idle_seconds"] for f in found.findings]))
    assert seen == [(0.0, 0.0, []), (30.0, 30.0, [30.0])]
    ledger.close()
