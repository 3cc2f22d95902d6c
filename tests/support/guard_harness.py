"""One harness for the guard's unit tests: the real `Guard` and `AlertStore` (and the real
ledger, catalog and pricing where the rules read them) fed samples the test builds, on a clock
only the test moves. Acts are collected, not carried out.

`GuardHarness` is the rig. Its subclasses differ only in how a test describes the next sample:

- `SpendHarness`: kernels as `K` records on two idle GPUs at an hourly rate, each interval's
  spend recorded in the ledger as the service records it (the idle and budget rules read it);
- `InstanceHarness`: GPU and kernel samples as given, on a catalog instance type (the
  training-sized and starved rules read its pricing);
- `ActivityHarness`: the server's activity as state the test edits between ticks, sampled
  from the moment the server starts (the auto-stop rule).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from jupyter_costguard.alerts.store import Alert, AlertStore
from jupyter_costguard.cost.catalog import Catalog
from jupyter_costguard.cost.ledger import Ledger
from jupyter_costguard.cost.pricing import Pricing, resolve_pricing
from jupyter_costguard.cost.published import Published
from jupyter_costguard.cost.spend import IntervalCost, split_interval
from jupyter_costguard.cost.viewrecords import Views
from jupyter_costguard.guard import Act, GuardConfig, GuardEngine, Rule
from jupyter_costguard.sampling.records import (
    GpuProcess,
    GpuReading,
    GpuSample,
    HostSample,
    KernelInfo,
    KernelSample,
    Sample,
)
from tests.support.units import GiB

#: Where simulated time starts by default.
T0 = 1_700_000_000.0
A100_40 = "NVIDIA A100-SXM4-40GB"
A100_80 = "NVIDIA A100-SXM4-80GB"
#: What `SpendHarness` charges: 36 per hour, 90% of it for the GPUs.
HOURLY_RATE, GPU_SHARE = 36.0, 0.9

#: The rules a harness runs, made from its config.
Rules = Callable[[GuardConfig], Sequence[Rule]]


# --- samples ------------------------------------------------------------------------------


def gpu(i: int, util: float | None, used: int = 0, total: int = 40 * GiB, name: str = A100_40,
        *, uuid: str | None = None, power: float | None = None,
        pids: Sequence[int] = ()) -> GpuSample:
    """GPU `i` (`GPU-<i>` unless `uuid` says otherwise) at `util` percent (None: not reported,
    as on MIG), `used` bytes held, by processes `pids`."""
    return GpuSample(index=i, uuid=uuid or f"GPU-{i}", name=name, memory_total_bytes=total,
                     memory_used_bytes=used, utilization_percent=util, power_watts=power,
                     processes=tuple(GpuProcess(pid, None) for pid in pids))


def kernel(kid: str, path: str | None, held: dict[str, int] | None = None, busy: bool = False,
           *, state: str | None = None, last_activity: float = 0.0, pid: int | None = 1000,
           connections: int = 1, cpu_seconds: float = 0.0, rss: int = 0,
           name: str = "python3") -> KernelSample:
    """Kernel `kid` of notebook `path` holding `held` (GPU uuid -> bytes); idle unless `busy`
    or another `state` is given."""
    info = KernelInfo(kernel_id=kid, name=name, pid=pid,
                      execution_state=state or ("busy" if busy else "idle"),
                      last_activity=last_activity, connections=connections, path=path)
    return KernelSample(info=info, pids=() if pid is None else (pid,), cpu_seconds=cpu_seconds,
                        rss_bytes=rss, gpu_memory_bytes=dict(held or {}))


def host_sample(cpus: int = 8, percent: float = 1.0, total: int = 64 * GiB,
                used: int = GiB) -> HostSample:
    return HostSample(cpu_count=cpus, cpu_percent=percent, memory_total_bytes=total,
                      memory_used_bytes=used)


def sample(time: float, interval: float, gpus: Sequence[GpuSample] = (),
           kernels: Sequence[KernelSample] = (), host: HostSample | None = None, *,
           status: str = "ok", simulated: bool = False) -> Sample:
    return Sample(time=time, interval=interval, gpu=GpuReading(status=status, gpus=tuple(gpus)),
                  host=host or host_sample(), kernels=tuple(kernels), simulated=simulated)


def publish(sample: Sample, cost: IntervalCost | None = None, pricing: Pricing | None = None,
            views: Views | None = None) -> Published:
    """`sample` as the service publishes it; the rules under test read no more than given."""
    return Published(sample=sample, cost=cost, pricing=cast(Any, pricing),
                     views=cast(Any, views))


# --- the rig --------------------------------------------------------------------------------


class GuardHarness:
    """The real Guard and AlertStore on a clock only the test moves; acts are collected."""

    def __init__(self, rules: Rules, *, config: GuardConfig | None = None, now: float = T0,
                 ledger: Path | None = None, catalog: Catalog | None = None,
                 pricing: Pricing | None = None, **settings: Any) -> None:
        assert config is None or not settings, "a GuardConfig or its settings, not both"
        self.now = now
        self.config = config or GuardConfig(**settings)
        self.alerts = AlertStore(None, clock=lambda: self.now)
        self.ledger = Ledger(ledger, now=now) if ledger is not None else None
        self.catalog = catalog
        self.pricing = pricing
        #: batch jobs running, as the guard asks the job service
        self.jobs = 0
        self.acts: list[Act] = []
        self.rules = list(rules(self.config))
        self.guard = GuardEngine(self.config, self.rules, self.alerts, cast(Any, self.ledger),
                           cast(Any, self.catalog), dispatch=self.acts.append,
                           running_jobs=lambda: self.jobs)

    def evaluate(self, sample: Sample, cost: IntervalCost | None = None,
                 views: Views | None = None) -> list[Act]:
        """One round of the rules over `sample`; the acts it dispatched."""
        return self.guard.evaluate(publish(sample, cost, self.pricing, views))

    def alert(self, kind: str, key: str) -> Alert | None:
        """The open (unresolved) alert for `(kind, key)`, whatever its state."""
        return self.alerts.find(kind, key)

    def shown(self, kind: str, key: str) -> Alert | None:
        """The open alert as the UI sees it (not dismissed, not snoozed)."""
        a = self.alert(kind, key)
        return a if a is not None and a.is_active(self.now) else None


# --- how a test describes the next sample --------------------------------------------------


@dataclass
class K:
    """A kernel as the test wants it to look in the next sample."""

    kernel_id: str
    path: str | None = None
    state: str = "idle"
    last_activity: float = T0
    gpu: dict[str, int] = field(default_factory=lambda: {"GPU-a": 4 * GiB})
    cpu_seconds: float = 0.0
    name: str = "python3"

    def sample(self, pid: int) -> KernelSample:
        return kernel(self.kernel_id, self.path, self.gpu, state=self.state,
                      last_activity=self.last_activity, pid=pid, connections=0,
                      cpu_seconds=self.cpu_seconds, rss=GiB, name=self.name)


class SpendHarness(GuardHarness):
    """Kernels as `K` records on two idle 80 GB GPUs (GPU-a, GPU-b) at `HOURLY_RATE`, each
    interval's spend split and recorded in the ledger before the rules run. `gpu_util`: the
    GPUs' utilisation (None: not reported, as on MIG)."""

    gpu_util: float | None = 0.0

    def __init__(self, tmp_path: Path, rules: Rules, **settings: Any) -> None:
        pricing = Pricing(instance=None, rate_per_hour=HOURLY_RATE, currency="USD",
                          market="on-demand", source="hourly_rate", detail="test",
                          gpu_share=GPU_SHARE)
        super().__init__(rules, ledger=tmp_path / "ledger.sqlite", catalog=Catalog.load(),
                         pricing=pricing, **settings)

    def step(self, dt: float, kernels: list[K]) -> list[Act]:
        """One sample `dt` seconds after the last; returns the acts it dispatched."""
        self.now += dt
        gpus = [gpu(i, self.gpu_util, sum(k.gpu.get(uuid, 0) for k in kernels), 80 * GiB,
                    A100_80, uuid=uuid) for i, uuid in enumerate(("GPU-a", "GPU-b"))]
        taken = sample(self.now, dt, gpus, [k.sample(1000 + i) for i, k in enumerate(kernels)])
        cost = split_interval(taken, HOURLY_RATE, GPU_SHARE)
        assert self.ledger is not None
        self.ledger.record(self.now, dt, cost, paths={k.kernel_id: k.path for k in kernels},
                           names={k.kernel_id: k.name for k in kernels})
        return self.evaluate(taken, cost)

    def run(self, until: float, dt: float, kernels: list[K]) -> list[Act]:
        """Step until `self.now >= until`; all the acts dispatched on the way."""
        acts: list[Act] = []
        while self.now < until:
            acts += self.step(min(dt, until - self.now), kernels)
        return acts


class InstanceHarness(GuardHarness):
    """GPU and kernel samples as given, simulated, on a big host priced as `instance_type`
    (or at `hourly_rate`); no spend is recorded."""

    def __init__(self, tmp_path: Path, rules: Rules,
                 instance_type: str | None = "p4d.24xlarge", hourly_rate: float | None = None,
                 config: GuardConfig | None = None, market: str = "on-demand") -> None:
        catalog = Catalog.load()
        pricing = resolve_pricing(catalog, instance_type=instance_type, environ={}, gpu=None,
                                  host=None, hourly_rate=hourly_rate, market=market)
        super().__init__(rules, config=config, ledger=tmp_path / "ledger.sqlite",
                         catalog=catalog, pricing=pricing)

    def step(self, gpus: Sequence[GpuSample], kernels: Sequence[KernelSample],
             dt: float = 2.0, cpu_percent: float = 3.0, cpu_count: int = 96,
             memory_used: int = 12 * GiB) -> list[Act]:
        self.now += dt
        host = host_sample(cpu_count, cpu_percent, 1152 * GiB, memory_used)
        return self.evaluate(sample(self.now, dt, gpus, kernels, host, simulated=True),
                             views=Views(time=self.now))

    def run(self, seconds: float, gpus: Sequence[GpuSample], kernels: Sequence[KernelSample],
            dt: float = 5.0, **host: Any) -> None:
        for _ in range(round(seconds / dt)):
            self.step(gpus, kernels, dt, **host)


class ActivityHarness(GuardHarness):
    """The server's activity as state the test edits between ticks: `kernels` (id ->
    execution state, last activity; each of notebook `<id>.ipynb`), `jobs` running and one
    GPU's utilisation (`gpu_util`; None: no GPU, unless `gpu_held_unknown`: then one GPU that
    reports no utilisation, as a MIG instance, with a process on it). The first tick also
    samples the start."""

    def __init__(self, rules: Rules, **settings: Any) -> None:
        super().__init__(rules, now=10_000.0, **settings)
        self.kernels: dict[str, tuple[str, float]] = {}
        self.gpu_util: float | None = None
        self.gpu_held_unknown = False
        self.started = False

    def touch(self, kid: str = "k1", state: str = "idle") -> None:
        """Kernel activity now."""
        self.kernels[kid] = (state, self.now)

    def tick(self, dt: float = 10.0) -> list[Act]:
        acts: list[Act] = []
        if not self.started:  # the server starts at the test's starting time
            self.started = True
            acts += self._sample(0.0)
        self.now += dt
        return acts + self._sample(dt)

    def _sample(self, dt: float) -> list[Act]:
        kernels = [kernel(kid, f"{kid}.ipynb", state=state, last_activity=last, pid=None)
                   for kid, (state, last) in self.kernels.items()]
        gpus = [] if self.gpu_util is None else [
            gpu(0, self.gpu_util, GiB, 80 * GiB, A100_80, power=60.0)]
        if self.gpu_held_unknown:
            gpus = [gpu(0, None, GiB, 40 * GiB, A100_80, uuid="MIG-0", pids=[4242])]
        return self.evaluate(sample(self.now, dt, gpus, kernels, host_sample(used=4 * GiB),
                                    status="ok" if gpus else "no-gpu"))

    def run(self, seconds: float, dt: float = 10.0) -> list[Act]:
        acts: list[Act] = []
        end = self.now + seconds
        while self.now < end - 1e-9:
            acts += self.tick(dt)
        return acts
