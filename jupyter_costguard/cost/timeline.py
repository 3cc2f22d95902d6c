"""Spend over time: the ledger's minute history in buckets coarse enough to draw.

`GET costguard/api/history` serves this. The window is the last `minutes` minutes (1 to
`MAX_MINUTES`); its buckets are 1 minute up to 6 h, 5 minutes up to 24 h, 15 minutes up to
3 days and 1 hour beyond, aligned on multiples of their length (epoch time), so a chart has
at most 360 points and a bucket's edges do not move between polls. Each bucket holds every
notebook's spend and waste, and what the server spent that no notebook did (idle GPUs
nobody holds, the host's unused share, kernels without a notebook) as `unattributed`: the
stack of a bucket adds up to the server's spend in it (conservation), to rounding.

A fitted window (`fit`, what the cost panel asks for) starts at the ledger's first minute
when that is inside the window: a fresh server is drawn over its own few minutes in 1-minute
buckets, not squeezed into the right edge of 6 hours, and never from before its first minute
(a ledger with no history yet is drawn over the current minute); the window grows with the
ledger up to the `minutes` asked, its buckets sized for its span.

Each minute of the ledger holds the spend of its own seconds (`Ledger.record_by_minute`
cuts a sample's interval at minute boundaries), and the document's `time` is the ledger's
last sample, read with the buckets: a full bucket's spend is its length at the rates in
force, and the current one's is the time from its start to `time`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from jupyter_costguard.cost.ledger import HISTORY_BUCKET_SECONDS, Ledger
from jupyter_costguard.cost.money import round_money

#: The longest window (the ledger keeps 7 days by default).
MAX_MINUTES = 7 * 1440
#: The window when none is asked for.
DEFAULT_MINUTES = 6 * 60
#: A last sample this recent (seconds) ends the window: its bucket is the current one.
LIVE_SECONDS = 120
#: (longest window, bucket minutes), shortest first.
BUCKETS = ((6 * 60, 1), (24 * 60, 5), (3 * 1440, 15), (MAX_MINUTES, 60))


def bucket_minutes(minutes: int) -> int:
    """The bucket length for a window of `minutes`."""
    for longest, step in BUCKETS:
        if minutes <= longest:
            return step
    return BUCKETS[-1][1]


@dataclass(frozen=True)
class Window:
    """Buckets of `step` minutes from epoch minute `first` to `last` (both bucket starts).

    `minutes`: the window asked for; `since`: the ledger's first minute when the window was
    fitted to it (None when the window is the whole of `minutes`)."""

    minutes: int
    step: int
    first: int
    last: int
    since: int | None = None

    @property
    def count(self) -> int:
        return (self.last - self.first) // self.step + 1

    @property
    def end(self) -> int:
        """The last epoch minute the buckets cover (the last bucket's last minute)."""
        return self.last + self.step - 1


def window(now: float, minutes: int, span: int | None = None,
           since: int | None = None) -> Window:
    """The buckets covering the last `span` minutes (default `minutes`) up to `now`, the
    current (partial) bucket last, sized for `span`."""
    span = minutes if span is None else span
    step = bucket_minutes(span)
    current = int(now // HISTORY_BUCKET_SECONDS)
    last = (current // step) * step
    first = ((current - span + 1) // step) * step
    return Window(minutes=minutes, step=step, first=first, last=last, since=since)


def fitted(now: float, minutes: int, first_bucket: int | None) -> Window:
    """The window of at most `minutes` that starts at the ledger's first minute
    (`first_bucket`; None when it has none: the current minute), and the whole of `minutes`
    when the ledger is older than that. Never a minute before the ledger's first: the chart's
    axis does not start before the server did."""
    current = int(now // HISTORY_BUCKET_SECONDS)
    oldest = current - minutes + 1
    if first_bucket is not None and first_bucket < oldest:
        return window(now, minutes)
    since = current if first_bucket is None else min(first_bucket, current)
    return window(now, minutes, current - since + 1, since)


def read(ledger: Ledger, now: float, minutes: int, notebook: str | None,
         fit: bool) -> dict[str, Any]:
    """The document for the last `minutes` up to `now` (fitted to the ledger's first minute
    when `fit`), with `time` the ledger's last sample: read together on the worker thread
    that records samples, so the buckets hold exactly the spend up to `time`. The window
    ends with the last sample's bucket when that sample is recent (a new minute that has no
    sample yet would draw as a drop to nothing at the chart's right edge)."""
    last = ledger.server.last_sample
    if last is not None and now - LIVE_SECONDS <= last <= now:
        now = last
    if fit:
        win = fitted(now, minutes, ledger.first_history_bucket())
    else:
        win = window(now, minutes)
    rows = ledger.history_buckets(win.first, win.end, win.step)
    doc = timeline_doc(rows, win, notebook)
    if last is not None:
        doc["time"] = last
    return doc


def _series(kind: str, path: str | None, spend: list[float],
            waste: list[float]) -> dict[str, Any]:
    return {
        "kind": kind,
        "path": path,
        "spend": [round_money(v) for v in spend],
        "waste": [round_money(v) for v in waste],
        "total_spend": round_money(sum(spend)),
        "total_waste": round_money(sum(waste)),
    }


def timeline_doc(rows: Iterable[tuple[int, str, float, float]], win: Window,
                 notebook: str | None = None) -> dict[str, Any]:
    """The document from `Ledger.history_buckets` rows over `win`.

    Without `notebook`: one series per notebook with spend in the window (most first),
    then `unattributed`. With it: that notebook's series only. `total` is always the whole
    server's spend and waste per bucket; `notebooks` every notebook with spend in the
    window, most first (what a chart's notebook selector offers)."""
    n = win.count
    per_path: dict[str, tuple[list[float], list[float]]] = {}
    for bucket, path, spend, waste in rows:
        i = (bucket - win.first) // win.step
        if not 0 <= i < n:
            continue
        s, w = per_path.setdefault(path, ([0.0] * n, [0.0] * n))
        s[i] += spend
        w[i] += waste
    zeros = [0.0] * n
    server_spend, server_waste = per_path.pop("", (zeros, zeros))
    ranked = sorted(per_path.items(), key=lambda kv: (-sum(kv[1][0]), kv[0]))
    notebooks = [path for path, (s, _) in ranked if sum(s) > 0]
    if notebook is None:
        series = [_series("notebook", path, s, w) for path, (s, w) in ranked
                  if path in notebooks]
        series.append(_series(
            "unattributed", None,
            [server_spend[i] - sum(s[i] for s, _ in per_path.values()) for i in range(n)],
            [server_waste[i] - sum(w[i] for _, w in per_path.values()) for i in range(n)]))
    else:
        s, w = per_path.get(notebook, (zeros, zeros))
        series = [_series("notebook", notebook, s, w)]
    seconds = win.step * HISTORY_BUCKET_SECONDS
    start = win.first * HISTORY_BUCKET_SECONDS
    return {
        "minutes": win.minutes,
        "since": None if win.since is None else float(win.since * HISTORY_BUCKET_SECONDS),
        "bucket_seconds": seconds,
        "start": float(start),
        "end": float(start + n * seconds),
        "notebook": notebook,
        "times": [float(start + i * seconds) for i in range(n)],
        "series": series,
        "total": _series("server", None, server_spend, server_waste),
        "notebooks": notebooks,
    }
