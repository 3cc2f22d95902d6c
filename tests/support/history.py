"""Hours of spend history before a server starts, written by the ledger's own writer.

No test waits hours (or minutes) for history: `seed_history` records one interval a minute
through `Ledger.record`, the path the sampler takes, into the ledger file a server is then
started on. The server loads it as it loads its own past (totals, notebooks, history).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from jupyter_costguard.cost.ledger import HISTORY_BUCKET_SECONDS, Ledger
from jupyter_costguard.cost.spend import IntervalCost, Share

#: minute index -> {notebook path: (share of the rate it spent, share of that which was waste)}
Profile = Callable[[int], Mapping[str, tuple[float, float]]]


def two_notebooks(minute: int) -> dict[str, tuple[float, float]]:
    """train.ipynb holds half the box for the first 90 minutes (busy: a little waste), then
    explore.ipynb a quarter of it for the rest (idle: mostly waste); the remainder is
    unattributed."""
    if minute < 90:
        return {"train.ipynb": (0.5, 0.1)}
    return {"explore.ipynb": (0.25, 0.8), "train.ipynb": (0.05, 0.0)}


def seed_history(db_path: Path, *, now: float, minutes: int, rate_per_hour: float,
                 profile: Profile = two_notebooks) -> dict[tuple[int, str], tuple[float, float]]:
    """One 60-second interval per minute for the `minutes` minutes ending two minutes before
    `now`, priced at `rate_per_hour`; returns what was recorded per (epoch minute, path),
    the server's as path ''."""
    current = int(now // HISTORY_BUCKET_SECONDS)
    first = current - 1 - minutes
    ledger = Ledger(db_path, now=first * HISTORY_BUCKET_SECONDS)
    recorded: dict[tuple[int, str], tuple[float, float]] = {}
    try:
        for i in range(minutes):
            bucket = first + i
            t = bucket * HISTORY_BUCKET_SECONDS + 30.0
            total = rate_per_hour * HISTORY_BUCKET_SECONDS / 3600.0
            shares: dict[str, Share] = {}
            paths: dict[str, str] = {}
            for path, (fraction, waste) in sorted(profile(i).items()):
                spend = total * fraction
                kid = f"seeded-kernel-of-{path}"
                shares[kid] = Share(gpu=spend, waste=spend * waste)
                paths[kid] = path
                recorded[(bucket, path)] = (spend, spend * waste)
            attributed = sum(s.spend for s in shares.values())
            cost = IntervalCost(total=total, unattributed=total - attributed,
                                unattributed_gpu=total - attributed, shares=shares)
            ledger.record(t, float(HISTORY_BUCKET_SECONDS), cost, paths,
                          {kid: "python3" for kid in shares})
            recorded[(bucket, "")] = (total, sum(s.waste for s in shares.values()))
    finally:
        ledger.close()
    return recorded
