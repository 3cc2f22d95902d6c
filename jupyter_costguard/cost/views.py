"""JSON documents the REST API serves, built once per sample on the sampler thread.

Handlers only pick a prebuilt document, so a request never waits for NVML, /proc or SQLite.
The shapes are described in `openapi.yaml`, which the tests hold these documents to.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from dataclasses import dataclass, field
from typing import Any

from jupyter_costguard.common.owner import Owner, owner_doc
from jupyter_costguard.cost.ledger import HISTORY_BUCKET_SECONDS, HistoryPoint, Ledger
from jupyter_costguard.cost.pricing import Pricing
from jupyter_costguard.cost.spend import IntervalCost, kernel_gpu_utilization
from jupyter_costguard.sampling.records import GpuSample, KernelSample, Sample

#: Minute points included with each notebook in list responses (sparklines).
SPARKLINE_POINTS = 30


def _money(x: float) -> float:
    return round(x, 6)


def history_doc(points: list[HistoryPoint], limit: int) -> list[dict[str, float]]:
    return [
        {"time": float(p.bucket * HISTORY_BUCKET_SECONDS), "spend": _money(p.spend),
         "waste": _money(p.waste)}
        for p in points[-limit:]
    ]


def instance_doc(pricing: Pricing) -> dict[str, Any] | None:
    i = pricing.instance
    if i is None:
        return None
    return {
        "provider": i.provider,
        "instance_type": i.instance_type,
        "gpu_model": i.gpu_model or None,
        "gpu_count": i.gpu_count,
        "gpu_memory_gib": i.gpu_memory_gib,
        "vcpus": i.vcpus,
        "memory_gib": i.memory_gib,
        "region": i.region,
        "on_demand_per_hour": i.on_demand_per_hour,
        "spot_per_hour": i.spot_per_hour,
        "source_url": i.source_url,
        "retrieved": i.retrieved,
    }


#: what to run when a price is old (the status document says it with the age)
REFRESH_HINT = "jupyter costguard catalog update"


def price_doc(pricing: Pricing, now: float, stale_after_days: int) -> dict[str, Any]:
    """Where the price comes from, how old it is, and the container's share of it."""
    i = pricing.instance
    retrieved = i.retrieved if i is not None else None
    age = None
    if retrieved:
        age = max(0, (dt.datetime.fromtimestamp(now, dt.timezone.utc).date()
                      - dt.date.fromisoformat(retrieved)).days)
    share = pricing.share
    rate, whole = pricing.rate_per_hour, pricing.instance_rate_per_hour
    return {
        "provider": pricing.provider or (i.provider if i is not None else None),
        "instance_type": i.instance_type if i is not None else None,
        "region": pricing.region,
        "region_source": pricing.region_source,
        "region_priced": (i.region or None) if i is not None else None,
        "region_note": pricing.region_note,
        "market": pricing.market,
        "market_source": pricing.market_source,
        "retrieved": retrieved,
        "age_days": age,
        "stale": age is not None and age > stale_after_days,
        "stale_after_days": stale_after_days,
        "refresh_hint": REFRESH_HINT,
        "converted_from": i.converted_from if i is not None else None,
        "instance_rate_per_hour": whole,
        "share": None if share is None else {
            "gpus_held": share.gpus_held, "gpus_instance": share.gpus_instance,
            "cpu_share": share.cpu_share, "memory_share": share.memory_share,
            "host_share": share.host_share,
            "fraction": (rate / whole) if rate is not None and whole else 0.0,
            "detail": share.detail,
        },
        "tried": list(pricing.tried),
    }


def gpu_doc(g: GpuSample, owners: dict[int, str]) -> dict[str, Any]:
    return {
        "index": g.index,
        "uuid": g.uuid,
        "name": g.name,
        "memory_total_bytes": g.memory_total_bytes,
        "memory_used_bytes": g.memory_used_bytes,
        "utilization_percent": g.utilization_percent,
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
    """How many GPUs are held and busy now, and since when every GPU has been idle: what a
    hub's culler needs to tell a forgotten GPU server from a silent training run."""
    if sample is None:
        return {"gpus_held": 0, "gpus_busy": 0, "idle_since": None}
    busy = sum(1 for g in sample.gpu.gpus if gpu_busy(g, idle_threshold_percent))
    return {
        "gpus_held": sum(1 for g in sample.gpu.gpus if g.processes),
        "gpus_busy": busy,
        "idle_since": None if busy else busy_time,
    }


def gpu_busy(g: GpuSample, idle_threshold_percent: float) -> bool:
    """At or above the threshold; a device that reports no utilisation (a MIG instance)
    counts as busy while anything holds it, so what cannot be seen is never called idle."""
    if g.utilization_percent is None:
        return bool(g.processes)
    return g.utilization_percent >= idle_threshold_percent


def alerts_doc(summary: dict[str, dict[str, Any]] | None, path: str) -> dict[str, Any]:
    """A notebook's active alerts: their ids and the highest severity (None when none)."""
    entry = (summary or {}).get(path)
    if not entry:
        return {"ids": [], "highest_severity": None}
    return {"ids": list(entry["ids"]), "highest_severity": entry["highest_severity"]}


@dataclass
class Views:
    """Everything the API can answer, as of one sample."""

    time: float | None
    documents: dict[str, bytes] = field(default_factory=dict)  # endpoint -> JSON body
    data: dict[str, dict[str, Any]] = field(default_factory=dict)  # endpoint -> the same, parsed
    notebooks: dict[str, dict[str, Any]] = field(default_factory=dict)  # path -> detail doc
    kernel_rates: dict[str, float] = field(default_factory=dict)

    def with_alerts(self, summary: dict[str, dict[str, Any]]) -> Views:
        """A copy whose notebook documents carry `summary` (alerts changed between samples).

        Only the notebook documents are rebuilt; this object is left as it was, since
        readers may still hold it.
        """
        listing = self.data.get("notebooks")
        if listing is None:
            return self
        new_listing = {**listing, "notebooks": [
            {**n, "alerts": alerts_doc(summary, n["path"])} for n in listing["notebooks"]]}
        data = {**self.data, "notebooks": new_listing}
        documents = {**self.documents, "notebooks": json.dumps(new_listing).encode()}
        notebooks = {p: {**doc, "alerts": alerts_doc(summary, p)}
                     for p, doc in self.notebooks.items()}
        return Views(time=self.time, documents=documents, data=data, notebooks=notebooks,
                     kernel_rates=self.kernel_rates)


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
) -> Views:
    """Render every document from the latest sample and the ledger's totals.

    `alerts` maps a notebook path to its active alerts (`AlertStore.summary`);
    `gpu_busy_time` is when a GPU was last at or above the idle threshold (the service
    tracks it across samples), for the status document's `gpu_activity`.
    """
    now = sample.time if sample else None
    simulated = sample.simulated if sample is not None else simulated
    currency = pricing.currency
    server = ledger.server
    kernels: list[dict[str, Any]] = []
    gpus: list[dict[str, Any]] = []
    by_path: dict[str, list[KernelSample]] = {}
    rates: dict[str, float] = {}
    if sample is not None:
        owners = {pid: k.info.kernel_id for k in sample.kernels for pid in k.pids}
        gpus = [gpu_doc(g, owners) for g in sample.gpu.gpus]
        for k in sample.kernels:
            info = k.info
            path = info.path or ""
            totals = ledger.kernels.get((info.kernel_id, path))
            share = cost.shares.get(info.kernel_id) if cost else None
            rate = share.spend * 3600.0 / sample.interval if share and sample.interval else 0.0
            rates[info.kernel_id] = rate
            # as the idle rule counts it: anything but busy (a kernel nobody connected to
            # stays "starting")
            idle = max(0.0, sample.time - info.last_activity) \
                if info.execution_state != "busy" else 0.0
            kernels.append({
                "kernel_id": info.kernel_id,
                "name": info.name,
                "notebook": info.path,
                "execution_state": info.execution_state,
                "last_activity": info.last_activity,
                "idle_seconds": round(idle, 3),
                "connections": info.connections,
                "pids": list(k.pids),
                "cpu_percent": round(100.0 * k.cpu_seconds / sample.interval, 2)
                if sample.interval else 0.0,
                "rss_bytes": k.rss_bytes,
                "gpus": sorted(k.gpu_memory_bytes),
                "gpu_memory_bytes": sum(k.gpu_memory_bytes.values()),
                "gpu_utilization_percent": kernel_gpu_utilization(k, sample.gpu.gpus),
                "attribution": k.attribution,
                "spend": _money(totals.spend if totals else 0.0),
                "waste": _money(totals.waste if totals else 0.0),
                "spend_rate_per_hour": _money(rate),
            })
            if info.path:
                by_path.setdefault(info.path, []).append(k)

    live_by_id = {k["kernel_id"]: k for k in kernels}
    notebooks: dict[str, dict[str, Any]] = {}
    for path, totals in ledger.notebooks.items():
        live = by_path.get(path, [])
        live_docs = [live_by_id[k.info.kernel_id] for k in live]
        utils = [d["gpu_utilization_percent"] for d in live_docs
                 if d["gpu_utilization_percent"] is not None]
        notebooks[path] = {
            "path": path,
            "spend": _money(totals.spend),
            "waste": _money(totals.waste),
            "gpu_spend": _money(totals.gpu_spend),
            "host_spend": _money(totals.host_spend),
            "first_seen": totals.first_seen,
            "last_seen": totals.last_seen,
            "kernel_ids": [d["kernel_id"] for d in live_docs],
            "kernels_seen": len(ledger.notebook_kernel_ids(path)),
            "gpu_utilization_percent": sum(utils) / len(utils) if utils else None,
            "gpu_memory_bytes": sum(d["gpu_memory_bytes"] for d in live_docs),
            "idle_seconds": min((d["idle_seconds"] for d in live_docs), default=None),
            "spend_rate_per_hour": _money(sum(rates.get(d["kernel_id"], 0.0) for d in live_docs)),
            "history": history_doc(ledger.recent_history(path), SPARKLINE_POINTS),
            "alerts": alerts_doc(alerts, path),
        }

    common = {"simulated": simulated, "currency": currency, "time": now, **owner_doc(owner)}
    status = {
        **common,
        "instance": instance_doc(pricing),
        "rate_per_hour": pricing.rate_per_hour,
        "market": pricing.market,
        "price_source": pricing.source,
        "price_detail": pricing.detail,
        "gpu_share": pricing.gpu_share,
        "price": price_doc(pricing, now if now is not None else time.time(),
                           stale_after_days),
        "gpu_status": sample.gpu.status if sample else "starting",
        "gpu_detail": sample.gpu.detail if sample else "",
        "gpu_count": len(gpus),
        "kernel_count": len(kernels),
        "notebook_count": len(by_path),
        "idle_threshold_percent": idle_threshold_percent,
        "sample_interval_seconds": sample_interval,
        "sample_duration_seconds": sample.duration_seconds if sample else None,
        "last_sample_time": server.last_sample,
        "totals": {
            "since": server.since,
            "seconds": round(server.seconds, 3),
            "spend": _money(server.spend),
            "waste": _money(server.waste),
            "unattributed": _money(server.unattributed),
            "unattributed_gpu": _money(server.unattributed_gpu),
        },
        "history": history_doc(ledger.recent_history(""), SPARKLINE_POINTS),
        "gpu_activity": gpu_activity_doc(sample, idle_threshold_percent, gpu_busy_time),
        "hub_budgets": hub_budgets or [],
    }
    gpu_list = {**common, "status": status["gpu_status"], "detail": status["gpu_detail"],
                "driver_version": sample.gpu.driver_version if sample else None, "gpus": gpus}
    listing = sorted(notebooks.values(), key=lambda n: -n["spend"])
    data = {
        "status": status,
        "gpus": gpu_list,
        "kernels": {**common, "kernels": kernels},
        "notebooks": {**common, "notebooks": listing},
    }
    return Views(
        time=now,
        documents={name: json.dumps(doc).encode() for name, doc in data.items()},
        data=data,
        notebooks={p: {**common, **doc, "kernels": [live_by_id[k] for k in doc["kernel_ids"]]}
                   for p, doc in notebooks.items()},
        kernel_rates=rates,
    )
