"""The hub store's records and the pure rules over them: a server's row as the pages, the
culler and the budget hold read it, the meter's row, the freshness window, and how a report's
spend is spread over the hours. Kept apart from the store (hub/store.py) so that what reads
rows needs no SQLite."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

HOUR = 3600


#: server states: reporting; silent or not yet reporting (kept with its last figures); its
#: last report refused (the reason in `detail`); no longer running
OK, STALE, REFUSED, STOPPED = "ok", "stale", "refused", "stopped"
#: the columns of `servers` that `server_row` maps, in its order
SERVER_COLUMNS = ("user, server, url, state, detail, last_ok, last_try, currency, simulated, "
                  "rate_per_hour, gpu_count, gpus_held, gpus_busy, gpu_idle_since, profile, "
                  "active_jobs, node_gpus, node_busy, node_time, node_idle_since, "
                  "node_unknown, waste_removed")
#: what one report may spread over: a longer gap goes into its last hours
MAX_SPREAD_HOURS = 24 * 40


@dataclass(frozen=True)
class ServerRow:
    user: str
    server: str
    url: str
    state: str
    detail: str
    last_ok: float | None
    last_try: float | None
    currency: str | None
    simulated: bool
    rate_per_hour: float
    gpu_count: int
    gpus_held: int
    gpus_busy: int
    gpu_idle_since: float | None
    profile: str
    spend: float
    waste: float
    active_jobs: int = 0
    #: the node's view of the server's pod (dcgm-exporter through Prometheus, hub/nodegpu.py):
    #: GPUs its pod holds, how many busy, when read, since when all idle; None: not read
    node_gpus: int | None = None
    node_busy: int | None = None
    node_time: float | None = None
    node_idle_since: float | None = None
    #: of the node's GPUs, how many of unknown activity (neither busy nor idle)
    node_unknown: int | None = None
    #: where gpus_held, gpus_busy and gpu_idle_since come from: "report" or "node"
    activity_source: str = "report"
    #: the waste its hibernations removed, as its last accepted report said (display only)
    waste_removed: float = 0.0


def server_row(r: Sequence[Any], spend: float = 0.0, waste: float = 0.0) -> ServerRow:
    """A `ServerRow` from the `servers` table's columns (SERVER_COLUMNS), in their order."""
    return ServerRow(user=r[0], server=r[1], url=r[2], state=r[3], detail=r[4], last_ok=r[5],
                     last_try=r[6], currency=r[7], simulated=bool(r[8]), rate_per_hour=r[9],
                     gpu_count=r[10], gpus_held=r[11], gpus_busy=r[12], gpu_idle_since=r[13],
                     profile=r[14], active_jobs=r[15] or 0, spend=spend, waste=waste,
                     node_gpus=r[16], node_busy=r[17], node_time=r[18],
                     node_idle_since=r[19], node_unknown=r[20],
                     waste_removed=r[21] if len(r) > 21 else 0.0)


def fresh_window(poll_interval: float, report_interval: float) -> float:
    """How old a server's accepted report, or the node's reading of its pod, may be and still
    decide: two of the longer interval (one may be missed) and 10 s. The one freshness window
    (`HubSettings.fresh`) the service's culler, the arbiter hook, the pages and the budget hold
    read."""
    return 2 * max(poll_interval, report_interval) + 10.0


#: the freshness window at the default intervals (30 s each): 70 s
DEFAULT_FRESH_SECONDS = fresh_window(30.0, 30.0)


def with_node_activity(row: ServerRow, now: float, fresh_seconds: float) -> ServerRow:
    """The row with its GPU activity from the node where the node's reading is fresh: what
    culling and the pages then go by, whatever the server reports."""
    if row.node_time is None or now - row.node_time > fresh_seconds:
        return row
    return replace(row, gpus_held=row.node_gpus or 0, gpus_busy=row.node_busy or 0,
                   gpu_count=max(row.gpu_count, row.node_gpus or 0),
                   gpu_idle_since=row.node_idle_since, activity_source="node")


def spread(start: float, end: float, amount: float) -> dict[int, float]:
    """`amount` spread evenly over [start, end), by the hour (epoch seconds // 3600), over
    at most MAX_SPREAD_HOURS (the loop is bounded whatever the times say)."""
    if amount == 0:
        return {}
    start = max(start, end - MAX_SPREAD_HOURS * HOUR)
    if not end > start:
        return {int(end // HOUR): amount}
    out: dict[int, float] = {}
    t = start
    while t < end:
        hour = int(t // HOUR)
        stop = min(end, (hour + 1) * HOUR)
        out[hour] = out.get(hour, 0.0) + amount * (stop - t) / (end - start)
        t = stop
    return out


def hour_bounds(since: float | None, until: float | None) -> tuple[int, int]:
    """The hours (epoch seconds // 3600) that start in [since, until)."""
    lo = -(1 << 62) if since is None else math.ceil(since / HOUR)
    hi = 1 << 62 if until is None else math.ceil(until / HOUR)
    return lo, hi


@dataclass(frozen=True)
class MeterRow:
    """A server's current run as the meter has it, beside what the server reported of it."""

    user: str
    server: str
    run: float  # the Hub's `started` of this run
    profile: str
    rate_per_hour: float
    spend: float  # metered, up to `last`
    last: float
    #: the server's own figures for the same run (its epoch): spend, when last reported
    reported: float | None
    reported_at: float | None
    #: since when the server counts that spend (its `since`: a little after the Hub's start)
    reported_since: float | None = None
