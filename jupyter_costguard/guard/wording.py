"""How the guard's alerts write sizes, lengths of time and money, so every rule says them
the same way.

Alerts are sentences: an amount comes before its currency code ("1.50 USD", "2.34 USD/h"),
as the hub service's messages write it too.
"""

from __future__ import annotations

import math
import time

#: bytes in a GiB
GiB = 1 << 30


def gib(nbytes: float) -> str:
    """A size in GiB with one decimal: "4.0 GiB"."""
    return f"{nbytes / GiB:.1f} GiB"


def duration(seconds: float, round_up: bool = False) -> str:
    """A short length of time: "45 s" below 2 min, "12 min" below 2 h, then "2 h" or
    "2 h 5 min". Rounded down (never overstate how long something was idle), or up with
    `round_up` (never understate how long a countdown has left)."""
    seconds = max(0.0, seconds)
    rnd = math.ceil if round_up else math.floor
    if seconds < 120:
        return f"{rnd(seconds)} s"
    minutes = rnd(seconds / 60)
    if minutes < 120:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60} min" if minutes % 60 else f"{minutes // 60} h"


def money(amount: float, currency: str) -> str:
    """An amount with its currency code after it: "1,234.50 USD"."""
    return f"{amount:,.2f} {currency}"


def clock_time(epoch: float) -> str:
    """HH:MM in the server's local time."""
    return time.strftime("%H:%M", time.localtime(epoch))
