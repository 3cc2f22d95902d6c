"""The figures the pages, the JSON and CSV and the metrics show, per user, group or server.

`spend` is the figure the site counts (`c.CostGuardHub.count`, hub/store.py): by default the
service's own meter where the server's profile is priced. Each row also carries the meter's
rate and the **reconciliation**: a running server whose reported rate, or spend for its run,
falls below its meter by more than the tolerance is flagged, with both figures.

Spend for all time is exact to the last reading of each server; spend for a period adds the
whole hours that start in [since, until) (what two polls saw is spread evenly over the hours
between them). A user in two groups counts in both groups, so groups need not add up to the
hub; users and servers always do.
"""

from __future__ import annotations

import csv
import io
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from jupyter_costguard.hub.budgets import Budgets, BudgetState
from jupyter_costguard.hub.store import HubStore, counted_value
from jupyter_costguard.hub.storerows import (
    DEFAULT_FRESH_SECONDS,
    OK,
    REFUSED,
    STALE,
    MeterRow,
    ServerRow,
    with_node_activity,
)

BY = ("user", "group", "server")
#: group name for users who belong to none
NO_GROUP = "(no group)"

CSV_COLUMNS = ("key", "user", "group", "server", "spend", "waste", "idle_gpu_hours",
               "rate_per_hour", "gpus_held", "gpus_busy", "servers_running", "servers_stale",
               "budget", "budget_spent", "budget_used", "currency", "simulated", "counted",
               "metered_rate_per_hour", "flags", "waste_removed")


@dataclass(frozen=True)
class Reconcile:
    """When a server's own figures are flagged against its meter: below it by more than
    `tolerance` (a fraction), past `grace_seconds` of the meter's figure (a server starts
    reporting a little after the Hub starts it, and reports every interval)."""

    tolerance: float = 0.05
    grace_seconds: float = 120.0
    #: how old the node's GPU reading of a pod may be and still stand for the server's GPU
    #: figures (hub/nodegpu.py): the service's one freshness window (`HubSettings.fresh`)
    node_fresh_seconds: float = DEFAULT_FRESH_SECONDS


def flags_of(s: ServerRow, m: MeterRow | None, r: Reconcile) -> list[str]:
    """Why a running server's report disagrees with its meter (empty: it agrees)."""
    if m is None or s.state not in (OK, STALE, REFUSED):
        return []
    out = []
    cur = s.currency or ""
    low = 1.0 - r.tolerance
    if s.state == OK and s.rate_per_hour < m.rate_per_hour * low - 1e-9:
        out.append(f"reports a rate of {s.rate_per_hour:.2f} {cur}/h; its profile "
                   f"{m.profile or '(default)'} is metered at {m.rate_per_hour:.2f}/h")
    if m.reported is None or m.reported_at is None:
        if m.last - m.run > r.grace_seconds:
            out.append(f"has reported nothing for this run; metered {m.spend:.2f} since the "
                       "Hub started it")
        return out
    expected = m.rate_per_hour * max(0.0, m.reported_at - m.run) / 3600.0
    allowed = expected * low - m.rate_per_hour * r.grace_seconds / 3600.0
    if m.reported < allowed - 1e-9:
        out.append(f"reports {m.reported:.2f} {cur} for this run; its meter counted "
                   f"{expected:.2f} by the time of that report")
    return out


@dataclass
class Row:
    key: str
    user: str | None = None
    group: str | None = None
    server: str | None = None
    spend: float = 0.0
    waste: float = 0.0
    idle_gpu_seconds: float = 0.0
    rate_per_hour: float = 0.0
    #: the GPUs the running servers pay for (what idle GPU hours count); of them, held by
    #: their kernels, and of those, busy
    gpus_paid: int = 0
    gpus_held: int = 0
    gpus_busy: int = 0
    servers_running: int = 0
    servers_stale: int = 0
    currency: str | None = None
    simulated: bool = False
    last_ok: float | None = None
    state: str | None = None
    detail: str | None = None
    budget: BudgetState | None = None
    #: what `spend` counts: "metered", "reported", "larger", or "mixed" (servers differ)
    counted: str | None = None
    metered_rate_per_hour: float = 0.0
    #: what the servers say they cost per hour (rate_per_hour is the counted one)
    reported_rate_per_hour: float = 0.0
    flags: list[str] | None = None
    #: where gpus_held/gpus_busy come from: "node" (dcgm-exporter), "report", or "mixed"
    gpu_source: str | None = None
    #: the waste the servers' hibernations removed, as each one's last report said: shown
    #: labelled "reported by the server", never counted into spend, budgets or a stop
    waste_removed: float = 0.0

    def add(self, s: ServerRow, spend: float, waste: float, idle: float,
            meter: MeterRow | None = None, flags: list[str] | None = None,
            count: str = "reported") -> None:
        """One server's figures: spend as counted (`count`, hub/store.py), its rate by the
        same rule, waste at most that spend (a server reporting more waste than the meter
        counts is not believed past it)."""
        self.spend += spend
        self.waste += min(waste, spend)
        self.idle_gpu_seconds += idle
        self.waste_removed += s.waste_removed
        if flags:
            name = f"{s.user}/{s.server}"
            self.flags = (self.flags or []) + [f"{name} {f}" for f in flags]
        if s.state in (OK, STALE, REFUSED):  # running: a refused report keeps its last figures
            if meter is not None:
                self.metered_rate_per_hour += meter.rate_per_hour
            self.reported_rate_per_hour += s.rate_per_hour
            self.rate_per_hour += counted_value(
                count, None if meter is None else meter.rate_per_hour, s.rate_per_hour)
            self.gpus_paid += max(s.gpu_count, s.gpus_held)
            self.gpus_held += s.gpus_held
            self.gpus_busy += s.gpus_busy
            self.servers_running += 1
            self.servers_stale += s.state != OK
        self.currency = self.currency or s.currency
        self.simulated = self.simulated or s.simulated
        if s.last_ok is not None:
            self.last_ok = max(self.last_ok or 0.0, s.last_ok)

    def doc(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "key": self.key, "user": self.user, "group": self.group, "server": self.server,
            "spend": round(self.spend, 6), "waste": round(self.waste, 6),
            "idle_gpu_hours": round(self.idle_gpu_seconds / 3600.0, 4),
            "rate_per_hour": round(self.rate_per_hour, 6), "gpus_paid": self.gpus_paid,
            "gpus_held": self.gpus_held,
            "gpus_busy": self.gpus_busy, "servers_running": self.servers_running,
            "servers_stale": self.servers_stale, "currency": self.currency,
            "simulated": self.simulated, "last_ok": self.last_ok,
            "budget": self.budget.doc() if self.budget else None,
            "counted": self.counted,
            "metered_rate_per_hour": round(self.metered_rate_per_hour, 6),
            "reported_rate_per_hour": round(self.reported_rate_per_hour, 6),
            "flags": self.flags or [],
            "gpu_source": self.gpu_source or "report",
            "waste_removed": round(self.waste_removed, 6),
        }
        if self.state is not None:
            d["state"], d["detail"] = self.state, self.detail
        return d


def rows(store: HubStore, budgets: Budgets, by: str, now: float,
         since: float | None = None, until: float | None = None,
         users: Iterable[str] | None = None, currency: str | None = None,
         reconcile: Reconcile | None = None) -> list[Row]:
    """Rows `by` user, group or server, for all time or [since, until), biggest first;
    only those of `users` when given (a non-admin sees their own). Group rows, which add up
    several users' servers, and rows counted by the meter carry the site's `currency` when
    given, never the text one user's server reported; other rows keep their servers'."""
    if by not in BY:
        raise ValueError(f"by must be one of {', '.join(BY)}, not {by!r}")
    wanted = None if users is None else set(users)
    servers = [s for s in store.servers() if wanted is None or s.user in wanted]
    meters = {(m.user, m.server): m for m in store.meter_rows()}
    recon = reconcile or Reconcile()
    counted = store.count
    wall = time.time()
    servers = [with_node_activity(s, wall, recon.node_fresh_seconds) for s in servers]
    totals = store.totals(since, until)
    members = store.memberships()
    # every budget figure from the one book (hub/budgetbook.py): a group's budget counts
    # every member of its period, running now or not
    book = store.budget_book(budgets, now)

    out: dict[str, Row] = {}
    for s in servers:
        spend, waste, idle = totals.get((s.user, s.server), (0.0, 0.0, 0.0))
        if by == "server":
            keys = [f"{s.user}/{s.server}"]
        elif by == "user":
            keys = [s.user]
        else:
            keys = members.get(s.user) or [NO_GROUP]
        for key in keys:
            row = out.get(key)
            if row is None:
                row = out[key] = Row(key=key)
                if by == "server":
                    row.user, row.server = s.user, s.server
                    row.state, row.detail = s.state, s.detail
                elif by == "user":
                    row.user = s.user
                else:
                    row.group = key
                    row.currency = currency
            meter = meters.get((s.user, s.server))
            # what this server's spend counts: the site's choice where it has a meter
            source = counted if meter is not None else "reported"
            row.counted = source if row.counted in (None, source) else "mixed"
            if s.state in (OK, STALE, REFUSED):
                row.gpu_source = s.activity_source if row.gpu_source in (
                    None, s.activity_source) else "mixed"
            row.add(s, spend, waste, idle, meter, flags_of(s, meter, recon), source)
            if source != "reported" and currency:  # the meter counts in the site's currency
                row.currency = currency
    for row in out.values():
        if by == "group" and row.group is not None:
            row.budget = book.group_state(row.group)
        elif row.user is not None and by == "user":
            row.budget = book.user_state(row.user)
    return sorted(out.values(), key=lambda r: (-r.spend, r.key))


def series(store: HubStore, by: str, since: float, until: float, step: str,
           keys: Iterable[str] | None = None) -> dict[str, Any]:
    """Spend, waste and unattributed (what servers report no kernel spent) per `step` (hour
    or day, UTC) per key: the chart's data."""
    if step not in ("hour", "day"):
        raise ValueError(f"step must be hour or day, not {step!r}")
    if by not in BY:
        raise ValueError(f"by must be one of {', '.join(BY)}, not {by!r}")
    width = 3600 if step == "hour" else 86400
    members = store.memberships()
    wanted = None if keys is None else set(keys)
    points: dict[str, dict[int, list[float]]] = {}
    for user, server, hour, spend, waste, unattributed in store.series_bands(since, until):
        if by == "user":
            ks = [user]
        elif by == "server":
            ks = [f"{user}/{server}"]
        else:
            ks = members.get(user) or [NO_GROUP]
        t = (hour * 3600) // width * width
        for k in ks:
            if wanted is not None and k not in wanted:
                continue
            p = points.setdefault(k, {}).setdefault(t, [0.0, 0.0, 0.0])
            p[0] += spend
            p[1] += waste
            p[2] += unattributed
    return {
        "by": by, "step": step, "since": since, "until": until,
        "series": [{"key": k, "points": [
            {"time": t, "spend": round(v[0], 6), "waste": round(v[1], 6),
             "unattributed": round(v[2], 6)}
            for t, v in sorted(pts.items())]} for k, pts in sorted(points.items())],
    }


#: what a spreadsheet reads as the start of a formula (OWASP's CSV injection list)
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def inert(cell: str) -> str:
    """A text cell a spreadsheet shows as text: one that would start a formula gets a leading
    `'` (names and currencies come from users and their servers)."""
    return f"'{cell}" if cell.startswith(FORMULA_STARTS) else cell


def rows_json(*args: Any) -> str:
    """`rows(*args)` as the JSON list of their documents: built once on the worker and kept
    by the page cache, never on the IO loop per request."""
    return json.dumps([r.doc() for r in rows(*args)])


def to_csv(rows_: list[Row]) -> str:
    """The rows as CSV; numbers as numbers, every text cell made inert."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\r\n")
    w.writerow(CSV_COLUMNS)
    for r in rows_:
        d = r.doc()
        b = r.budget
        w.writerow([
            inert(d["key"]), inert(d["user"] or ""), inert(d["group"] or ""),
            inert("" if d["server"] is None else d["server"]), f"{r.spend:.6f}",
            f"{r.waste:.6f}", d["idle_gpu_hours"],
            f"{r.rate_per_hour:.6f}", r.gpus_held, r.gpus_busy, r.servers_running,
            r.servers_stale, "" if b is None else f"{b.budget:.2f}",
            "" if b is None else f"{b.spent:.6f}", "" if b is None else f"{b.used:.4f}",
            inert(r.currency or ""), str(r.simulated).lower(), r.counted or "",
            f"{r.metered_rate_per_hour:.6f}", inert("; ".join(r.flags or [])),
            f"{r.waste_removed:.6f}"])
    return buf.getvalue()
