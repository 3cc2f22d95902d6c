"""What the REST API and /metrics say about one sample: the views, built once per sample.

The sampler thread builds the kernel, notebook and status views (`cost/viewrecords`, where
they become JSON) once per sample from the sample, the interval's cost and the ledger's
totals, so a request never waits for NVML, /proc or SQLite. The notebooks' sparklines come
from `cost/sparklines`.

A kernel's `idle_seconds` has one meaning everywhere (the API, the metric, the idle rule):
see `idle_seconds`. Whether a GPU is busy, idle or unknown (a MIG instance reports no
utilisation) is `common/gpuactivity.py`'s rule: GPUs, kernels and notebooks carry it as
`activity` / `gpu_activity`, the status document counts it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from jupyter_costguard.common.gpuactivity import (
    BUSY,
    IDLE,
    UNKNOWN,
    Activity,
    combined_activity,
    executing,
)
from jupyter_costguard.common.owner import Owner
from jupyter_costguard.cost.activity import activity_of, server_idleness
from jupyter_costguard.cost.ledger import Ledger, ServerTotals, Totals
from jupyter_costguard.cost.money import round_money
from jupyter_costguard.cost.pricedoc import instance_doc, price_doc
from jupyter_costguard.cost.pricing import Pricing
from jupyter_costguard.cost.sparklines import (
    SPARKLINE_POINTS,
    Sparklines,
    history_doc,
    sparklines_of,
)
from jupyter_costguard.cost.spend import IntervalCost, kernel_gpu_utilization
from jupyter_costguard.cost.viewrecords import (
    Header,
    KernelView,
    NotebookView,
    ServerTotalsView,
    StatusView,
    Views,
    alerts_doc,
)
from jupyter_costguard.sampling.records import GpuSample, KernelInfo, KernelSample, Sample


def gpu_doc(g: GpuSample, owners: dict[int, str], activity: Activity) -> dict[str, Any]:
    return {
        "index": g.index,
        "uuid": g.uuid,
        "name": g.name,
        "memory_total_bytes": g.memory_total_bytes,
        "memory_used_bytes": g.memory_used_bytes,
        "utilization_percent": g.utilization_percent,
        "activity": activity,
        "power_watts": g.power_watts,
        "mig_parent_uuid": g.mig_parent_uuid,
        "faulty": g.faulty,
        "processes": [
            {"pid": p.pid, "used_memory_bytes": p.used_memory_bytes, "kind": p.kind,
             "kernel_id": owners.get(p.pid)}
            for p in g.processes
        ],
    }


def gpu_activity_doc(sample: Sample | None, idle_threshold_percent: float,
                     busy_time: float | None) -> dict[str, Any]:
    """How many GPUs are held, busy, and held of unknown activity now, and since when the
    server has been idle by every measure (`busy_time`, the service's `server_idleness`
    clock: no kernel executing, no GPU that may be working): what a hub's culler needs to
    tell a forgotten GPU server from a silent training run. A held GPU of unknown activity
    (MIG) is not counted busy, but no idle clock runs while it is held."""
    if sample is None:
        return {"gpus_held": 0, "gpus_busy": 0, "gpus_unknown": 0, "idle_since": None}
    gpus = sample.gpu.gpus
    busy = sum(1 for g in gpus if activity_of(g, idle_threshold_percent) == BUSY)
    working = server_idleness(sample, idle_threshold_percent) != IDLE
    return {
        "gpus_held": sum(1 for g in gpus if g.processes),
        "gpus_busy": busy,
        "gpus_unknown": sum(1 for g in gpus
                            if g.processes and activity_of(g, idle_threshold_percent) == UNKNOWN),
        "idle_since": None if working else busy_time,
    }


def idle_seconds(info: KernelInfo, now: float, worked_at: float | None = None) -> float:
    """How long a kernel has done nothing: 0 while it executes, else since the later of its
    `last_activity` and `worked_at` (the last sample that saw a GPU it holds busy,
    `cost/activity.WorkClock`): a kernel at its prompt whose training thread keeps its GPU
    busy is not idle (the one stop decision, `common/gpuactivity.idleness`).

    The one meaning the API, the `costguard_kernel_idle_seconds` metric and the idle rule
    share. A kernel started without a client stays "starting" and one being restarted is
    not running anything either: to a user that is idle time, since the last thing it did.
    """
    if executing(info.execution_state):
        return 0.0
    return max(0.0, now - max(info.last_activity, worked_at or info.last_activity))




def kernel_view(k: KernelSample, sample: Sample, totals: Totals | None,
                rate: float, utilization: Mapping[str, float] | None = None,
                activities: Mapping[str, Activity] | None = None,
                worked_at: float | None = None) -> KernelView:
    """One kernel of `sample`, with the ledger's totals for it and its current rate
    (`utilization`: GPU uuid -> utilisation where known; `activities`: GPU uuid -> its
    activity; both worked out once per sample, the activity at the default threshold when
    not given)."""
    info = k.info
    if activities is None:
        activities = {g.uuid: activity_of(g) for g in sample.gpu.gpus}
    gpu_activity = combined_activity(activities[uuid] for uuid in k.gpu_memory_bytes
                                     if uuid in activities)
    interval = sample.interval
    if utilization is None:
        gpu_util = kernel_gpu_utilization(k, sample.gpu.gpus)
    elif len(k.gpu_memory_bytes) == 1:  # most kernels hold one GPU or none
        (uuid,) = k.gpu_memory_bytes
        u = utilization.get(uuid)
        gpu_util = None if u is None else (0 + u) / 1  # sum([u]) / 1: a float, as before
    elif not k.gpu_memory_bytes:
        gpu_util = None
    else:  # summed in GPU order, as always
        held = [u for uuid, u in utilization.items() if uuid in k.gpu_memory_bytes]
        gpu_util = sum(held) / len(held) if held else None
    return KernelView(
        kernel_id=info.kernel_id, name=info.name, notebook=info.path,
        execution_state=info.execution_state, last_activity=info.last_activity,
        idle_seconds=round(idle_seconds(info, sample.time, worked_at), 3),
        connections=info.connections, pids=list(k.pids),
        cpu_percent=round(100.0 * k.cpu_seconds / interval, 2) if interval else 0.0,
        rss_bytes=k.rss_bytes, gpus=sorted(k.gpu_memory_bytes),
        gpu_memory_bytes=sum(k.gpu_memory_bytes.values()),
        gpu_utilization_percent=gpu_util,
        gpu_activity=gpu_activity,
        attribution=k.attribution,
        spend=round_money(totals.spend if totals else 0.0),
        waste=round_money(totals.waste if totals else 0.0),
        spend_rate_per_hour=round_money(rate),
    )


def kernel_rates(sample: Sample, cost: IntervalCost | None) -> dict[str, float]:
    """Kernel id -> what it cost per hour over the last interval."""
    rates: dict[str, float] = {}
    for k in sample.kernels:
        share = cost.shares.get(k.info.kernel_id) if cost else None
        rates[k.info.kernel_id] = (share.spend * 3600.0 / sample.interval
                                   if share and sample.interval else 0.0)
    return rates


def notebook_view(path: str, totals: Totals, live: list[KernelView], rates: Mapping[str, float],
                  ledger: Ledger, alerts: dict[str, dict[str, Any]] | None,
                  sparklines: Sparklines | None = None) -> NotebookView:
    """One notebook from the ledger's totals and the views of its live kernels."""
    util: float | None
    if len(live) == 1:  # the usual case, without a pass per figure (same sums: 0 + x)
        k = live[0]
        u = k.gpu_utilization_percent
        util = None if u is None else (0 + u) / 1
        kernel_ids, gpu_memory = [k.kernel_id], 0 + k.gpu_memory_bytes
        idle: float | None = k.idle_seconds
        rate = 0 + rates.get(k.kernel_id, 0.0)
    else:
        utils = [k.gpu_utilization_percent for k in live
                 if k.gpu_utilization_percent is not None]
        util = sum(utils) / len(utils) if utils else None
        kernel_ids = [k.kernel_id for k in live]
        gpu_memory = sum(k.gpu_memory_bytes for k in live)
        idle = min((k.idle_seconds for k in live), default=None)
        rate = sum(rates.get(k.kernel_id, 0.0) for k in live)
    return NotebookView(
        path=path, spend=round_money(totals.spend), waste=round_money(totals.waste),
        gpu_spend=round_money(totals.gpu_spend), host_spend=round_money(totals.host_spend),
        first_seen=totals.first_seen, last_seen=totals.last_seen,
        kernel_ids=kernel_ids,
        kernels_seen=len(ledger.notebook_kernel_ids(path)),
        gpu_utilization_percent=util,
        gpu_activity=combined_activity(k.gpu_activity for k in live
                                       if k.gpu_activity is not None),
        gpu_memory_bytes=gpu_memory,
        idle_seconds=idle,
        spend_rate_per_hour=round_money(rate),
        history=(sparklines.doc(path, ledger.recent_history(path)) if sparklines is not None
                 else history_doc(ledger.recent_history(path), SPARKLINE_POINTS)),
        alerts=alerts_doc(alerts, path),
    )


def totals_view(server: ServerTotals) -> ServerTotalsView:
    return ServerTotalsView(
        since=server.since, seconds=round(server.seconds, 3), spend=round_money(server.spend),
        waste=round_money(server.waste), unattributed=round_money(server.unattributed),
        unattributed_gpu=round_money(server.unattributed_gpu))


@dataclass(frozen=True)
class StatusInputs:
    """What the status document says beyond the sample and the price: the service's
    settings and what it tracks across samples."""

    sample_interval: float
    idle_threshold_percent: float
    stale_after_days: int = 90
    gpu_busy_time: float | None = None
    hub_budgets: list[dict[str, Any]] = field(default_factory=list)


def status_view(header: Header, sample: Sample | None, pricing: Pricing, ledger: Ledger,
                counts: tuple[int, int, int], inputs: StatusInputs) -> StatusView:
    """`GET status`; `counts` is (GPUs, live kernels, notebooks with a live kernel)."""
    now = header.time
    return StatusView(
        header=header, instance=instance_doc(pricing), rate_per_hour=pricing.rate_per_hour,
        market=pricing.market, price_source=pricing.source, price_detail=pricing.detail,
        gpu_share=pricing.gpu_share,
        price=price_doc(pricing, now if now is not None else time.time(),
                        inputs.stale_after_days),
        gpu_status=sample.gpu.status if sample else "starting",
        gpu_detail=sample.gpu.detail if sample else "",
        gpu_count=counts[0], kernel_count=counts[1], notebook_count=counts[2],
        idle_threshold_percent=inputs.idle_threshold_percent,
        sample_interval_seconds=inputs.sample_interval,
        sample_duration_seconds=sample.duration_seconds if sample else None,
        last_sample_time=ledger.server.last_sample,
        totals=totals_view(ledger.server),
        history=sparklines_of(ledger).doc("", ledger.recent_history("")),
        gpu_activity=gpu_activity_doc(sample, inputs.idle_threshold_percent,
                                      inputs.gpu_busy_time),
        hub_budgets=inputs.hub_budgets,
    )


def gpus_doc(header: Header, sample: Sample | None,
             activities: Mapping[str, Activity] | None = None) -> dict[str, Any]:
    """`GET gpus`: every GPU with its activity and the processes on it, each named by its
    kernel (`activities`: uuid -> activity; the default threshold's when not given)."""
    gpus: list[dict[str, Any]] = []
    if sample is not None:
        owners = {pid: k.info.kernel_id for k in sample.kernels for pid in k.pids}
        gpus = [gpu_doc(g, owners, activities[g.uuid] if activities is not None
                        and g.uuid in activities else activity_of(g))
                for g in sample.gpu.gpus]
    return {**header.doc(), "status": sample.gpu.status if sample else "starting",
            "detail": sample.gpu.detail if sample else "",
            "driver_version": sample.gpu.driver_version if sample else None, "gpus": gpus}


def build_views(
    sample: Sample | None,
    cost: IntervalCost | None,
    pricing: Pricing,
    ledger: Ledger,
    sample_interval: float,
    idle_threshold_percent: float,
    simulated: bool = False,
    alerts: dict[str, dict[str, Any]] | None = None,
    stale_after_days: int = 90,
    owner: Owner | None = None,
    gpu_busy_time: float | None = None,
    hub_budgets: list[dict[str, Any]] | None = None,
    worked: Mapping[str, float] | None = None,
) -> Views:
    """Every view of the latest sample and the ledger's totals.

    `alerts` maps a notebook path to its active alerts (`AlertStore.summary`);
    `gpu_busy_time` is when the server was last not idle by every measure
    (`server_idleness`: a kernel executing, a GPU busy or held with unknown activity; the
    service tracks it across samples), for the status document's `gpu_activity`; `worked`
    when each kernel was last at work (`WorkClock`: executing, or a GPU it holds busy),
    where its idle time starts.
    """
    header = Header(simulated=sample.simulated if sample is not None else simulated,
                    currency=pricing.currency, time=sample.time if sample else None,
                    user=owner.user if owner else None, server=owner.server if owner else None)
    kernels: list[KernelView] = []
    rates: dict[str, float] = {}
    by_path: dict[str, list[KernelView]] = {}
    activities: dict[str, Activity] = {}
    if sample is not None:
        activities = {g.uuid: activity_of(g, idle_threshold_percent) for g in sample.gpu.gpus}
        rates = kernel_rates(sample, cost)
        ledger_kernels = ledger.kernels
        utilization = {g.uuid: g.utilization_percent for g in sample.gpu.gpus
                       if g.utilization_percent is not None}
        for k in sample.kernels:
            info = k.info
            view = kernel_view(k, sample, ledger_kernels.get((info.kernel_id, info.path or "")),
                               rates[info.kernel_id], utilization, activities,
                               (worked or {}).get(info.kernel_id))
            kernels.append(view)
            if info.path:
                by_path.setdefault(info.path, []).append(view)
    sparklines = sparklines_of(ledger)
    sparklines.keep_only(ledger.notebooks)
    notebooks: dict[str, NotebookView] = {}
    quiet = sparklines.quiet
    for path, totals in ledger.notebooks.items():
        live = by_path.get(path)
        if live:
            notebooks[path] = notebook_view(path, totals, live, rates, ledger, alerts,
                                            sparklines)
            continue
        # No live kernel: the view depends only on the ledger's figures for the notebook
        # and its alerts. Its history grows only when it records a share, which moves
        # `last_seen`, so the totals stand for the history too.
        entry = (alerts or {}).get(path)
        key = (totals.spend, totals.waste, totals.gpu_spend, totals.host_spend,
               totals.first_seen, totals.last_seen, len(ledger.notebook_kernel_ids(path)),
               None if not entry else (tuple(entry["ids"]), entry["highest_severity"]))
        made = quiet.get(path)
        if made is None or made[0] != key:
            made = quiet[path] = (key, notebook_view(path, totals, [], rates, ledger, alerts,
                                                     sparklines))
        notebooks[path] = made[1]
    inputs = StatusInputs(sample_interval=sample_interval,
                          idle_threshold_percent=idle_threshold_percent,
                          stale_after_days=stale_after_days, gpu_busy_time=gpu_busy_time,
                          hub_budgets=hub_budgets or [])
    gpu_count = len(sample.gpu.gpus) if sample is not None else 0
    status = status_view(header, sample, pricing, ledger,
                         (gpu_count, len(kernels), len(by_path)), inputs)
    return Views(time=header.time, header=header, status=status,
                 gpus=gpus_doc(header, sample, activities), kernels=tuple(kernels),
                 notebooks=notebooks, kernel_rates=rates)
