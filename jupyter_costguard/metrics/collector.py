"""Prometheus metrics on jupyter_server's own /metrics.

Families are built from the latest published snapshot when a scrape first asks for them
(`Published.metrics`), at most once per sample, from views the sampler thread already made:
no NVML, /proc or SQLite on the scrape, and a server nobody scrapes builds none. One collector is
registered per process and re-pointed at whichever server loaded the extension last, so
loading the extension repeatedly (tests, restarts in one process) never double-registers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping

from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample as Series

from jupyter_costguard.common.owner import Owner
from jupyter_costguard.cost.published import Published
from jupyter_costguard.cost.viewrecords import KernelView, NotebookView, StatusView
from jupyter_costguard.sampling.records import Sample


def build_metrics(p: Published) -> list[Metric]:
    """All costguard families for one published sample."""
    cur = p.pricing.currency
    views = p.views
    return [
        *price_families(p),
        *gpu_families(p.sample, {g["uuid"]: g["activity"]
                                 for g in (views.gpus or {}).get("gpus", ())}),
        *kernel_families(views.kernels, cur),
        *notebook_families(views.notebooks.values(), cur),
        *server_families(views.status, cur),
        CounterMetricFamily("costguard_samples", "Samples taken.",
                            value=float(p.samples_total)),
        GaugeMetricFamily("costguard_sample_duration_seconds", "How long the last sample took.",
                          value=p.sample.duration_seconds if p.sample else 0.0),
        *alert_families(p.alert_counts, p.alerts_raised),
    ]


def price_families(p: Published) -> list[Metric]:
    """The instance's hourly price, and whether the GPU figures are simulated."""
    pricing = p.pricing
    rate = GaugeMetricFamily(
        "costguard_instance_price_per_hour",
        "Hourly price of this instance in the configured currency.",
        labels=["currency", "provider", "instance_type", "market", "source"],
    )
    if pricing.rate_per_hour is not None:
        inst = pricing.instance
        rate.add_metric([pricing.currency, inst.provider if inst else "",
                         inst.instance_type if inst else "", pricing.market, pricing.source],
                        pricing.rate_per_hour)
    simulated = p.sample is not None and p.sample.simulated
    return [rate, GaugeMetricFamily(
        "costguard_simulated", "1 when GPU figures come from a replayed trace, not a real GPU.",
        value=1.0 if simulated else 0.0)]


def gpu_families(sample: Sample | None,
                 activities: Mapping[str, str] | None = None) -> list[Metric]:
    """Each GPU's utilisation, memory, power and activity (`activities`: uuid -> busy, idle
    or unknown, as the gpus document says: one series per GPU, value 1, so a MIG instance,
    which has no utilisation series, still says "unknown")."""
    labels = ["gpu", "uuid", "name"]
    util = GaugeMetricFamily("costguard_gpu_utilization_ratio",
                             "GPU utilisation (0-1) over the last sample.", labels=labels)
    mem_used = GaugeMetricFamily("costguard_gpu_memory_used_bytes", "GPU memory in use.",
                                 labels=labels)
    mem_total = GaugeMetricFamily("costguard_gpu_memory_total_bytes", "GPU memory in total.",
                                  labels=labels)
    power = GaugeMetricFamily("costguard_gpu_power_watts", "GPU power draw.", labels=labels)
    activity = GaugeMetricFamily(
        "costguard_gpu_activity", "1 for each GPU, labelled with its activity: busy, idle, or "
        "unknown where the GPU reports no utilisation (MIG).", labels=[*labels, "activity"])
    activities = activities or {}
    # Samples made directly, one label dict per GPU shared by its four series (what
    # add_metric does with a dict per call).
    for g in sample.gpu.gpus if sample is not None else ():
        values = {"gpu": str(g.index), "uuid": g.uuid, "name": g.name}
        if g.utilization_percent is not None:
            util.samples.append(Series(util.name, values, g.utilization_percent / 100.0, None))
        mem_used.samples.append(Series(mem_used.name, values, float(g.memory_used_bytes), None))
        mem_total.samples.append(Series(mem_total.name, values, float(g.memory_total_bytes),
                                        None))
        if g.power_watts is not None:
            power.samples.append(Series(power.name, values, g.power_watts, None))
        state = activities.get(g.uuid)
        if state is not None:
            activity.samples.append(Series(activity.name, {**values, "activity": state}, 1.0,
                                           None))
    return [util, mem_used, mem_total, power, activity]


def kernel_families(kernels: Iterable[KernelView], currency: str) -> list[Metric]:
    """Each live kernel's idle time, GPU memory, spend and waste, from its view."""
    labels = ["kernel_id", "notebook"]
    idle = GaugeMetricFamily("costguard_kernel_idle_seconds",
                             "Seconds since the kernel was last busy (0 while busy).",
                             labels=labels)
    kmem = GaugeMetricFamily("costguard_kernel_gpu_memory_bytes",
                             "GPU memory held by the kernel's processes.", labels=labels)
    spend = CounterMetricFamily("costguard_kernel_spend",
                                "Money a kernel has cost, in the labelled currency.",
                                labels=[*labels, "currency"])
    waste = CounterMetricFamily("costguard_kernel_waste",
                                "Money a kernel has cost while holding an idle GPU.",
                                labels=[*labels, "currency"])
    # Samples made directly (what add_metric does, without zipping label names per call):
    # this runs for every kernel on every sample. Label dicts are shared, never changed.
    for k in kernels:
        values = {"kernel_id": k.kernel_id, "notebook": k.notebook or ""}
        priced = {**values, "currency": currency}
        idle.samples.append(Series(idle.name, values, k.idle_seconds, None))
        kmem.samples.append(Series(kmem.name, values, float(k.gpu_memory_bytes), None))
        spend.samples.append(Series(spend.name + "_total", priced, k.spend, None))
        waste.samples.append(Series(waste.name + "_total", priced, k.waste, None))
    return [idle, kmem, spend, waste]


def notebook_families(notebooks: Iterable[NotebookView], currency: str) -> list[Metric]:
    """Each notebook's spend and waste over all its kernels."""
    spend = CounterMetricFamily("costguard_notebook_spend",
                                "Money a notebook has cost across all its kernels.",
                                labels=["notebook", "currency"])
    waste = CounterMetricFamily("costguard_notebook_waste",
                                "Money a notebook's kernels cost while holding idle GPUs.",
                                labels=["notebook", "currency"])
    for n in notebooks:
        labels = {"notebook": n.path, "currency": currency}
        spend.samples.append(Series(spend.name + "_total", labels, n.spend, None))
        waste.samples.append(Series(waste.name + "_total", labels, n.waste, None))
    return [spend, waste]


def server_families(status: StatusView | None, currency: str) -> list[Metric]:
    """The server's spend, and the part of it no kernel or job used."""
    server = CounterMetricFamily("costguard_server_spend",
                                 "Money the instance has cost while this server sampled it.",
                                 labels=["currency"])
    unattributed = CounterMetricFamily("costguard_unattributed_spend",
                                       "Instance cost that no kernel or job used.",
                                       labels=["currency"])
    if status is not None:
        server.add_metric([currency], status.totals.spend)
        unattributed.add_metric([currency], status.totals.unattributed)
    return [server, unattributed]


def alert_families(counts: dict[tuple[str, str], int], raised: dict[str, int]) -> list[Metric]:
    """Active alerts by kind and severity, and alerts raised since the server started."""
    active = GaugeMetricFamily("costguard_alerts",
                               "Active alerts (not dismissed, snoozed or resolved).",
                               labels=["kind", "severity"])
    for (kind, severity), n in sorted(counts.items()):
        active.add_metric([kind, severity], float(n))
    total = CounterMetricFamily("costguard_alerts_raised",
                                "New alerts raised since the server started.", labels=["kind"])
    for kind, n in sorted(raised.items()):
        total.add_metric([kind], float(n))
    return [active, total]


def with_owner(families: list[Metric], owner: Owner | None) -> list[Metric]:
    """Every series labelled with whose server it is (`user`, `server`), so Prometheus can
    sum spend by user across a hub's servers; unchanged outside a hub."""
    if owner is None:
        return families
    extra = {"user": owner.user, "server": owner.server}
    out = []
    for family in families:
        copy = Metric(family.name, family.documentation, family.type, family.unit)
        copy.samples = [s._replace(labels={**s.labels, **extra}) for s in family.samples]
        out.append(copy)
    return out


class CostguardCollector(Collector):
    def __init__(self) -> None:
        self._source: Callable[[], list[Metric]] | None = None
        self._owner: Owner | None = None

    def point_at(self, source: Callable[[], list[Metric]] | None,
                 owner: Owner | None = None) -> None:
        self._source = source
        self._owner = owner

    def collect(self) -> Iterator[Metric]:
        source = self._source
        if source is None:
            return iter(())
        return iter(with_owner(source(), self._owner))

    def describe(self) -> list[Metric]:
        return []  # families vary with the hardware: don't let the registry probe at import


_lock = threading.Lock()
_collector: CostguardCollector | None = None


def install(source: Callable[[], list[Metric]] | None,
            owner: Owner | None = None) -> CostguardCollector:
    """Register the process-wide collector once and point it at `source` (whose series get
    `owner`'s labels)."""
    global _collector
    with _lock:
        if _collector is None:
            _collector = CostguardCollector()
            REGISTRY.register(_collector)
        _collector.point_at(source, owner)
        return _collector
