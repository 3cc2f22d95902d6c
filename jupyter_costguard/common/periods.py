"""Periods in UTC: budget periods (calendar month, ISO week, day) and report bounds.

UTC, so a budget means the same on every node and in every user's browser; the admin page
says so next to the figures.
"""

from __future__ import annotations

import datetime as dt
from functools import lru_cache

PERIODS = ("month", "week", "day")


@lru_cache(maxsize=256)  # a page's rows ask it once per user for the same `now`
def period_start(period: str, now: float) -> float:
    """The start (epoch seconds) of the `period` that holds `now`."""
    t = dt.datetime.fromtimestamp(now, dt.timezone.utc)
    day = t.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        start = day
    elif period == "week":
        start = day - dt.timedelta(days=day.weekday())  # Monday
    elif period == "month":
        start = day.replace(day=1)
    else:
        raise ValueError(f"period must be one of {', '.join(PERIODS)}, not {period!r}")
    return start.timestamp()


@lru_cache(maxsize=256)
def period_end(period: str, now: float) -> float:
    start = dt.datetime.fromtimestamp(period_start(period, now), dt.timezone.utc)
    if period == "day":
        end = start + dt.timedelta(days=1)
    elif period == "week":
        end = start + dt.timedelta(days=7)
    else:
        end = (start + dt.timedelta(days=32)).replace(day=1)
    return end.timestamp()


def parse_time(value: str, name: str) -> float:
    """Epoch seconds, or an ISO 8601 date or date-time (UTC unless it says otherwise)."""
    text = value.strip()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"{name} must be epoch seconds or an ISO 8601 date, not {value!r}") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return t.timestamp()
