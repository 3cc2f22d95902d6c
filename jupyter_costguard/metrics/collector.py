"""Prometheus metrics on jupyter_server's own /metrics.

Families are built on the sampler thread after each sample; the collector only hands the
latest ones over, so a scrape costs the IO loop nothing but serialisation. One collector is
registered per process and re-pointed at whichever server loaded the extension last, so
loading the extension repeatedly (tests, restarts in one process) never double-registers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from jupyter_costguard.common.owner import Owner
from jupyter_costguard.cost.published import Published


def build_metrics(p: Published) -> list[Metric]:
    """All costguard families for one published sample."""
    cur = p.pricing.currency
    sample = p.sample
    sim = "true" if sample is not None and sample.simulated else "false"
    out: list[Metric] = []

    rate = GaugeMetricFamily(
        "costguard_instance_price_per_hour",
        "Hourly price of this instance in the configured currency.",
        labels=["currency", "provider", "instance_type", "market", "source"],
    )
    if p.pricing.rate_per_hour is not None:
        inst = p.pricing.instance
        rate.add_metric([cur, inst.provider if inst else "", inst.instance_type if inst else "",
                         p.pricing.market, p.pricing.source], p.pricing.rate_per_hour)
    out.append(rate)
    out.append(GaugeMetricFamily(
        "costguard_simulated", "1 when GPU figures come from a replayed trace, not a real GPU.",
        value=1.0 if sim == "true" else 0.0))

    util = GaugeMetricFamily("costguard_gpu_utilization_ratio",
                             "GPU utilisation (0-1) over the last sample.",
                             labels=["gpu", "uuid", "name"])
    mem_used = GaugeMetricFamily("costguard_gpu_memory_used_bytes", "GPU memory in use.",
                                 labels=["gpu", "uuid", "name"])
    mem_total = GaugeMetricFamily("costguard_gpu_memory_total_bytes", "GPU memory in total.",
                                  labels=["gpu", "uuid", "name"])
    power = GaugeMetricFamily("costguard_gpu_power_watts", "GPU power draw.",
                              labels=["gpu", "uuid", "name"])
    idle = GaugeMetricFamily("costguard_kernel_idle_seconds",
                             "Seconds since the kernel was last busy (0 while busy).",
                             labels=["kernel_id", "notebook"])
    kmem = GaugeMetricFamily("costguard_kernel_gpu_memory_bytes",
                             "GPU memory held by the kernel's processes.",
                             labels=["kernel_id", "notebook"])
    if sample is not None:
        for g in sample.gpu.gpus:
            labels = [str(g.index), g.uuid, g.name]
            if g.utilization_percent is not None:
                util.add_metric(labels, g.utilization_percent / 100.0)
            mem_used.add_metric(labels, float(g.memory_used_bytes))
            mem_total.add_metric(labels, float(g.memory_total_bytes))
            if g.power_watts is not None:
                power.add_metric(labels, g.power_watts)
        for k in sample.kernels:
            info = k.info
            labels = [info.kernel_id, info.path or ""]
            idle_s = max(0.0, sample.time - info.last_activity) \
                if info.execution_state == "idle" else 0.0
            idle.add_metric(labels, idle_s)
            kmem.add_metric(labels, float(sum(k.gpu_memory_bytes.values())))
    out += [util, mem_used, mem_total, power, idle, kmem]

    k_spend = CounterMetricFamily("costguard_kernel_spend",
                                  "Money a kernel has cost, in the labelled currency.",
                                  labels=["kernel_id", "notebook", "currency"])
    k_waste = CounterMetricFamily("costguard_kernel_waste",
                                  "Money a kernel has cost while holding an idle GPU.",
                                  labels=["kernel_id", "notebook", "currency"])
    for doc in p.views.data["kernels"]["kernels"]:
        labels = [doc["kernel_id"], doc["notebook"] or "", cur]
        k_spend.add_metric(labels, doc["spend"])
        k_waste.add_metric(labels, doc["waste"])
    out += [k_spend, k_waste]

    n_spend = CounterMetricFamily("costguard_notebook_spend",
                                  "Money a notebook has cost across all its kernels.",
                                  labels=["notebook", "currency"])
    n_waste = CounterMetricFamily("costguard_notebook_waste",
                                  "Money a notebook's kernels cost while holding idle GPUs.",
                                  labels=["notebook", "currency"])
    for path, doc in p.views.notebooks.items():
        n_spend.add_metric([path, cur], doc["spend"])
        n_waste.add_metric([path, cur], doc["waste"])
    out += [n_spend, n_waste]

    totals = p.views.data["status"]["totals"]
    server = CounterMetricFamily("costguard_server_spend",
                                 "Money the instance has cost while this server sampled it.",
                                 labels=["currency"])
    server.add_metric([cur], totals["spend"])
    unattributed = CounterMetricFamily("costguard_unattributed_spend",
                                       "Instance cost that no kernel or job used.",
                                       labels=["currency"])
    unattributed.add_metric([cur], totals["unattributed"])
    out += [server, unattributed]
    out.append(CounterMetricFamily("costguard_samples", "Samples taken.",
                                   value=float(p.samples_total)))
    out.append(GaugeMetricFamily("costguard_sample_duration_seconds",
                                 "How long the last sample took.",
                                 value=sample.duration_seconds if sample else 0.0))

    alerts = GaugeMetricFamily("costguard_alerts",
                               "Active alerts (not dismissed, snoozed or resolved).",
                               labels=["kind", "severity"])
    for (kind, severity), n in sorted(p.alert_counts.items()):
        alerts.add_metric([kind, severity], float(n))
    raised = CounterMetricFamily("costguard_alerts_raised",
                                 "New alerts raised since the server started.",
                                 labels=["kind"])
    for kind, n in sorted(p.alerts_raised.items()):
        raised.add_metric([kind], float(n))
    out += [alerts, raised]
    return out


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
