"""One number everywhere, over random traces (hypothesis): kernels and batch jobs start and end,
GPUs are held and released, utilisation is known or not (a MIG instance reports none), and the
price changes (a spot price moving, a catalog refresh). After every sample the ledger, the REST
documents (the bytes the handlers serve), `/metrics` (rendered by prometheus_client from the
server's collector) and the estimate of each job against what it is charged agree, and
conservation holds: kernels + jobs + unattributed = rate × time.

The GPU readings cannot exist here: each sample is scripted at the telemetry boundary (what NVML
and psutil would have read, `ScriptedTelemetry`); the price is set per sample where the service
resolves it. Everything after that is the server's own code: `CostService.tick`, the ledger's
SQLite, the views and the metrics collector.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from jupyter_costguard.cost.ledger import Ledger
from jupyter_costguard.cost.pricing import Pricing, PricingConfig
from jupyter_costguard.cost.service import CostService
from jupyter_costguard.metrics.collector import build_metrics
from jupyter_costguard.offload.estimate import EstimateContext, LocalPrice, local_estimate
from jupyter_costguard.offload.spec import Resources
from jupyter_costguard.sampling.records import (
    GpuReading,
    GpuSample,
    HostSample,
    KernelInfo,
    KernelSample,
    Sample,
)

GPUS = 4
HOST_CPUS = 64
GPU_SHARE = 0.8
THRESHOLD = 5.0
T0 = 1_800_000_000.0
#: interactive kernels share GPUs 0 and 1; each job has a GPU of its own
KERNELS = ("k1", "k2", "k3")
JOBS = {"job-1": 2, "job-2": 3}
GIB = 1 << 30


@dataclass(frozen=True)
class Held:
    """One consumer in one sample."""

    kernel_id: str
    busy: bool
    cpu_fraction: float  # of what it may use: one CPU for a kernel, its CPUs for a job
    gpus: tuple[tuple[int, int], ...]  # (GPU index, GiB)
    cpus_held: float = 0.0


@dataclass(frozen=True)
class Step:
    interval: float
    rate: float
    utilizations: tuple[float | None, ...]
    held: tuple[Held, ...]


def kernel_held(kid: str) -> st.SearchStrategy[Held]:
    return st.builds(Held, st.just(kid), st.booleans(), st.floats(0, 1),
                     st.lists(st.tuples(st.integers(0, 1), st.integers(1, 8)), max_size=2,
                              unique_by=lambda t: t[0]).map(tuple))


def job_held(kid: str) -> st.SearchStrategy[Held]:
    # a job holds the GPU it asked for the whole time it runs, and at most its CPUs
    return st.builds(Held, st.just(kid), st.just(True), st.floats(0, 1),
                     st.just(((JOBS[kid], 4),)), st.sampled_from([1.0, 2.0]))


@st.composite
def steps(draw: st.DrawFn) -> list[Step]:
    n = draw(st.integers(1, 14))
    job_cpus = {k: draw(st.sampled_from([1.0, 2.0])) for k in JOBS}
    out = []
    for _ in range(n):
        held: list[Held] = [draw(kernel_held(k)) for k in KERNELS if draw(st.booleans())]
        for k in JOBS:
            if draw(st.booleans()):
                h = draw(job_held(k))
                held.append(dataclasses.replace(h, cpus_held=job_cpus[k]))
        utils = tuple(draw(st.one_of(st.none(), st.floats(0, 100))) for _ in range(GPUS))
        out.append(Step(draw(st.floats(0.5, 30)), draw(st.sampled_from([3.0, 12.5, 32.77])),
                        utils, tuple(held)))
    return out


class ScriptedTelemetry:
    """What NVML and psutil would have read, one scripted sample per tick."""

    simulated = True
    gpu_source = None

    def __init__(self) -> None:
        self.step: Step | None = None
        self.now = T0

    def sample(self, kernels: Sequence[KernelInfo]) -> Sample:
        step = self.step
        assert step is not None
        self.now += step.interval
        by_id = {h.kernel_id: h for h in step.held}
        gpus = []
        for i in range(GPUS):
            used = sum(g * GIB for h in step.held for idx, g in h.gpus if idx == i)
            gpus.append(GpuSample(i, f"GPU-{i}", "NVIDIA A100-SXM4-80GB", 80 * GIB, used,
                                  step.utilizations[i], 100.0))
        samples = []
        for info in kernels:
            h = by_id[info.kernel_id]
            cpus = info.cpus_held if info.cpus_held else 1.0
            samples.append(KernelSample(info, (1,), h.cpu_fraction * cpus * step.interval, 0,
                                        {f"GPU-{i}": g * GIB for i, g in h.gpus}))
        return Sample(self.now, step.interval, GpuReading("ok", gpus=tuple(gpus)),
                      HostSample(HOST_CPUS, 10.0, 1 << 40, 1 << 38), tuple(samples))


def infos(step: Step, now: float) -> list[KernelInfo]:
    return [KernelInfo(h.kernel_id, "python3", None, "busy" if h.busy else "idle", now, 1,
                       "jobs.ipynb" if h.kernel_id in JOBS else f"{h.kernel_id}.ipynb",
                       cpus_held=h.cpus_held) for h in step.held]


def metrics(published: Any) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """`/metrics` as Prometheus reads it: rendered and parsed again."""
    class Collector:
        def collect(self) -> Any:
            return build_metrics(published)

    registry = CollectorRegistry()
    registry.register(Collector())  # type: ignore[arg-type]
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def expected_waste(step: Step) -> dict[str, float]:
    """The waste of one interval by the rule (an oracle written apart from the spend model):
    a GPU's part held by a kernel that is not busy, while the GPU is *known* to be below the
    threshold; a GPU whose utilisation is unknown is neither busy nor waste."""
    per_gpu = step.rate * step.interval / 3600.0 * GPU_SHARE / GPUS
    waste: dict[str, float] = {}
    for i in range(GPUS):
        util = step.utilizations[i]
        holders = [(h, g) for h in step.held for idx, g in h.gpus if idx == i]
        total = sum(g for _, g in holders)
        for h, g in holders:
            if util is not None and util < THRESHOLD and not h.busy:
                waste[h.kernel_id] = waste.get(h.kernel_id, 0.0) + per_gpu * g / total
    return waste


def close(a: float, b: float, tol: float = 2e-6) -> bool:
    return abs(a - b) <= tol


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps())
def test_every_surface_shows_the_same_figures_and_spend_is_conserved(trace: list[Step]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        telemetry = ScriptedTelemetry()
        svc = CostService(telemetry, Ledger(Path(tmp) / "l.sqlite"),  # type: ignore[arg-type]
                          PricingConfig(hourly_rate=1.0, gpu_share=GPU_SHARE),
                          idle_threshold_percent=THRESHOLD, environ={},
                          metrics_builder=build_metrics)
        base: Pricing = svc.published.pricing
        cost_so_far = 0.0
        waste_so_far: dict[str, float] = {}
        estimated: dict[str, float] = {}  # job -> what its estimates at each rate add up to
        for step in trace:
            priced = dataclasses.replace(base, rate_per_hour=step.rate,
                                         instance_rate_per_hour=step.rate)
            svc._resolve = lambda sample, p=priced: p  # type: ignore[method-assign]
            telemetry.step = step
            published = svc.tick(infos(step, telemetry.now + step.interval))
            cost_so_far += step.rate * step.interval / 3600.0
            for kid, w in expected_waste(step).items():
                waste_so_far[kid] = waste_so_far.get(kid, 0.0) + w
            # what the offload dialog would have said for each running job, at this rate
            machine = LocalPrice(step.rate, "USD", "hourly_rate", "configured",
                                 rates=priced.machine_rates(HOST_CPUS, GPUS))
            for h in step.held:
                if h.kernel_id in JOBS:
                    est = local_estimate("local", Resources(gpus=1, cpus=h.cpus_held),
                                         EstimateContext({}, "USD", machine))
                    assert est.hourly_price is not None
                    estimated[h.kernel_id] = estimated.get(h.kernel_id, 0.0) \
                        + est.hourly_price * step.interval / 3600.0

            ledger = svc.ledger.server
            status = json.loads(published.views.document("status"))
            kernels = {k["kernel_id"]: k for k in json.loads(published.views.document("kernels"))
                       ["kernels"]}
            notebooks = json.loads(published.views.document("notebooks"))["notebooks"]
            scraped = metrics(published)

            # conservation, in the ledger and in the documents
            assert close(ledger.spend, cost_so_far, 1e-8)  # float sums, no rounding
            attributed = sum(n["spend"] for n in notebooks)
            # each document figure is rounded to 6 decimals: a sum of n is within n half-units
            assert close(attributed + status["totals"]["unattributed"], cost_so_far,
                         5e-7 * (len(notebooks) + 1) + 1e-9)
            assert close(status["totals"]["spend"], cost_so_far)
            # /metrics says what the documents say
            assert close(scraped["costguard_server_spend_total"][(("currency", "USD"),)],
                         status["totals"]["spend"])
            assert close(scraped["costguard_unattributed_spend_total"][(("currency", "USD"),)],
                         status["totals"]["unattributed"])
            for n in notebooks:
                key = (("currency", "USD"), ("notebook", n["path"]))
                assert close(scraped["costguard_notebook_spend_total"][key], n["spend"])
                assert close(scraped["costguard_notebook_waste_total"][key], n["waste"])
            for kid, k in kernels.items():
                key = (("currency", "USD"), ("kernel_id", kid), ("notebook", k["notebook"]))
                assert close(scraped["costguard_kernel_spend_total"][key], k["spend"])
            # waste by the one rule (unknown utilisation is never waste)
            for kid, k in kernels.items():
                assert close(k["waste"], waste_so_far.get(kid, 0.0)), (kid, k, step)
            # a job holding what it asked for is charged what its estimate said
            for kid in JOBS:
                if kid in kernels:
                    assert close(kernels[kid]["spend"], estimated[kid]), (kid, kernels[kid])
            # the status document and the REST documents are of the same sample
            assert status["last_sample_time"] == published.sample.time  # type: ignore[union-attr]


def test_the_oracle_counts_unknown_utilisation_as_neither() -> None:
    """The test's own rule, checked on one interval: a held GPU whose utilisation is unknown
    costs its holder spend but no waste."""
    step = Step(3600.0, 10.0, (None, 1.0, 50.0, None),
                (Held("k1", False, 0.0, ((0, 1), (1, 1))),))
    assert expected_waste(step) == pytest.approx({"k1": 10.0 * GPU_SHARE / GPUS})
