"""The views the REST API and /metrics read, as typed records, and their JSON documents.

One sample's kernel, notebook and status views are frozen dataclasses (built by
`cost/views.build_views` on the sampler thread), so the metrics read fields and a renamed one
is a type error rather than a silently empty series. `Views` turns them into the endpoints'
documents at most once per sample, when first asked, and keeps the bytes. The shapes are
described in `openapi.yaml`, which the tests hold these documents to.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from jupyter_costguard.common.gpuactivity import Activity


def alerts_doc(summary: dict[str, dict[str, Any]] | None, path: str) -> dict[str, Any]:
    """A notebook's active alerts: their ids and the highest severity (None when none)."""
    entry = (summary or {}).get(path)
    if not entry:
        return {"ids": [], "highest_severity": None}
    return {"ids": list(entry["ids"]), "highest_severity": entry["highest_severity"]}


@dataclass(frozen=True)
class Header:
    """What every document starts with: whether the figures are simulated, the currency,
    the sample's time, and whose server this is (null outside a hub)."""

    simulated: bool
    currency: str
    time: float | None
    user: str | None = None
    server: str | None = None

    def doc(self) -> dict[str, Any]:
        return {"simulated": self.simulated, "currency": self.currency, "time": self.time,
                "user": self.user, "server": self.server}


#: The per-kernel and per-notebook views are never changed once built, like the other
#: views, but are not declared frozen: a frozen dataclass's `__init__` costs three times a
#: plain one's, and these two are built for every kernel and notebook on every sample.
@dataclass
class KernelView:
    """One live kernel as `GET kernels` lists it (amounts rounded as served)."""

    kernel_id: str
    name: str
    notebook: str | None
    execution_state: str
    last_activity: float
    idle_seconds: float
    connections: int
    pids: list[int]
    cpu_percent: float
    rss_bytes: int
    gpus: list[str]
    gpu_memory_bytes: int
    gpu_utilization_percent: float | None
    #: busy, idle or unknown over the GPUs it holds (`combined_activity`); None: holds none
    gpu_activity: Activity | None
    attribution: str
    spend: float
    waste: float
    spend_rate_per_hour: float

    def doc(self) -> dict[str, Any]:
        return {
            "kernel_id": self.kernel_id, "name": self.name, "notebook": self.notebook,
            "execution_state": self.execution_state, "last_activity": self.last_activity,
            "idle_seconds": self.idle_seconds, "connections": self.connections,
            "pids": self.pids, "cpu_percent": self.cpu_percent, "rss_bytes": self.rss_bytes,
            "gpus": self.gpus, "gpu_memory_bytes": self.gpu_memory_bytes,
            "gpu_utilization_percent": self.gpu_utilization_percent,
            "gpu_activity": self.gpu_activity,
            "attribution": self.attribution, "spend": self.spend, "waste": self.waste,
            "spend_rate_per_hour": self.spend_rate_per_hour,
        }


@dataclass
class NotebookView:
    """One notebook the ledger knows, with its live kernels' figures (`GET notebooks`)."""

    path: str
    spend: float
    waste: float
    gpu_spend: float
    host_spend: float
    first_seen: float
    last_seen: float
    kernel_ids: list[str]
    kernels_seen: int
    gpu_utilization_percent: float | None
    #: its live kernels' GPU activity together; None: they hold no GPU
    gpu_activity: Activity | None
    gpu_memory_bytes: int
    idle_seconds: float | None
    spend_rate_per_hour: float
    history: list[dict[str, float]]
    alerts: dict[str, Any]

    def doc(self) -> dict[str, Any]:
        return {
            "path": self.path, "spend": self.spend, "waste": self.waste,
            "gpu_spend": self.gpu_spend, "host_spend": self.host_spend,
            "first_seen": self.first_seen, "last_seen": self.last_seen,
            "kernel_ids": self.kernel_ids, "kernels_seen": self.kernels_seen,
            "gpu_utilization_percent": self.gpu_utilization_percent,
            "gpu_activity": self.gpu_activity,
            "gpu_memory_bytes": self.gpu_memory_bytes, "idle_seconds": self.idle_seconds,
            "spend_rate_per_hour": self.spend_rate_per_hour, "history": self.history,
            "alerts": self.alerts,
        }


@dataclass(frozen=True)
class ServerTotalsView:
    """The server's running totals as the status document serves them."""

    since: float
    seconds: float
    spend: float
    waste: float
    unattributed: float
    unattributed_gpu: float

    def doc(self) -> dict[str, Any]:
        return {"since": self.since, "seconds": self.seconds, "spend": self.spend,
                "waste": self.waste, "unattributed": self.unattributed,
                "unattributed_gpu": self.unattributed_gpu}


@dataclass(frozen=True)
class StatusView:
    """`GET status`: the price, the GPUs' state, the counts and the server's totals."""

    header: Header
    instance: dict[str, Any] | None
    rate_per_hour: float | None
    market: str
    price_source: str
    price_detail: str
    gpu_share: float | None
    price: dict[str, Any]
    gpu_status: str
    gpu_detail: str
    gpu_count: int
    kernel_count: int
    notebook_count: int
    idle_threshold_percent: float
    sample_interval_seconds: float
    sample_duration_seconds: float | None
    last_sample_time: float | None
    totals: ServerTotalsView
    history: list[dict[str, float]]
    gpu_activity: dict[str, Any]
    hub_budgets: list[dict[str, Any]]

    def doc(self) -> dict[str, Any]:
        return {
            **self.header.doc(),
            "instance": self.instance, "rate_per_hour": self.rate_per_hour,
            "market": self.market, "price_source": self.price_source,
            "price_detail": self.price_detail, "gpu_share": self.gpu_share,
            "price": self.price, "gpu_status": self.gpu_status, "gpu_detail": self.gpu_detail,
            "gpu_count": self.gpu_count, "kernel_count": self.kernel_count,
            "notebook_count": self.notebook_count,
            "idle_threshold_percent": self.idle_threshold_percent,
            "sample_interval_seconds": self.sample_interval_seconds,
            "sample_duration_seconds": self.sample_duration_seconds,
            "last_sample_time": self.last_sample_time, "totals": self.totals.doc(),
            "history": self.history, "gpu_activity": self.gpu_activity,
            "hub_budgets": self.hub_budgets,
        }


@dataclass(frozen=True)
class Views:
    """Everything the API and the metrics can say, as of one sample; never mutated.

    `Views(time=...)` alone is the empty view (no document), as before the first build.
    """

    time: float | None
    header: Header | None = None
    status: StatusView | None = None
    gpus: dict[str, Any] | None = None  # the GET gpus document
    kernels: tuple[KernelView, ...] = ()
    notebooks: Mapping[str, NotebookView] = field(default_factory=dict)
    #: kernel id -> spend per hour over the last interval, unrounded
    kernel_rates: Mapping[str, float] = field(default_factory=dict)
    #: the documents and their JSON, made on first read (equal for every reader)
    _made: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def data(self) -> dict[str, dict[str, Any]]:
        """Endpoint -> its document (built once, on first read)."""
        made = self._made.get("data")
        if made is None:
            made = self._made["data"] = self._documents()
        return made

    def document(self, name: str) -> bytes:
        """The JSON body of endpoint `name` (encoded once, on first read)."""
        key = "json:" + name
        body = self._made.get(key)
        if body is None:
            body = self._made[key] = json.dumps(self.data[name]).encode()
        return body

    @property
    def documents(self) -> dict[str, bytes]:
        """Endpoint -> JSON body, every document."""
        return {name: self.document(name) for name in self.data}

    def notebook_doc(self, path: str) -> dict[str, Any] | None:
        """`GET notebooks/{path}`: the notebook with its live kernels, or None."""
        nb = self.notebooks.get(path)
        if nb is None or self.header is None:
            return None
        by_id = {k.kernel_id: k for k in self.kernels}
        return {**self.header.doc(), **nb.doc(),
                "kernels": [by_id[kid].doc() for kid in nb.kernel_ids]}

    def with_alerts(self, summary: dict[str, dict[str, Any]]) -> Views:
        """A copy whose notebooks carry `summary` (alerts changed between samples); this
        object is left as it was, since readers may still hold it."""
        if self.status is None:
            return self
        notebooks = {p: dataclasses.replace(nb, alerts=alerts_doc(summary, p))
                     for p, nb in self.notebooks.items()}
        return dataclasses.replace(self, notebooks=notebooks, _made={})

    def _documents(self) -> dict[str, dict[str, Any]]:
        if self.header is None or self.status is None or self.gpus is None:
            return {}
        common = self.header.doc()
        listing = sorted(self.notebooks.values(), key=lambda n: -n.spend)
        return {
            "status": self.status.doc(),
            "gpus": self.gpus,
            "kernels": {**common, "kernels": [k.doc() for k in self.kernels]},
            "notebooks": {**common, "notebooks": [n.doc() for n in listing]},
        }
