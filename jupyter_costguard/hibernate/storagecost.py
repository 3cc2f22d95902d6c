"""What keeping a snapshot costs where its store has a price: the admin's price per GiB-month
(with where it came from and when), the cost of each snapshot so far and per month.

One price, for the store new snapshots go to (`snapshot_store_url`, or the local folder); a
snapshot kept elsewhere (written before the store changed), or any snapshot when no price is
configured, has no price: the answers say null ("no price"), never 0.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from jupyter_costguard.cost.money import round_money

GIB = 1 << 30
#: hours in the month a GiB-month is billed over (365 × 24 / 12, as the clouds count it)
HOURS_PER_MONTH = 730.0


@dataclass(frozen=True)
class StoragePrice:
    """The snapshot store's price: `per_gib_month` in the server's currency, `source` (a URL
    or the admin's words) and `as_of` (the date it was read, YYYY-MM-DD) as configured."""

    per_gib_month: float
    source: str
    as_of: str | None
    stale_after_days: int = 90

    def per_month(self, size: int) -> float:
        """What `size` bytes cost for a month."""
        return self.per_gib_month * size / GIB

    def so_far(self, size: int, seconds: float) -> float:
        """What `size` bytes kept for `seconds` cost."""
        return self.per_month(size) * max(0.0, seconds) / 3600.0 / HOURS_PER_MONTH

    def age_days(self, now: float) -> int | None:
        if not self.as_of:
            return None
        today = dt.datetime.fromtimestamp(now, dt.timezone.utc).date()
        return max(0, (today - dt.date.fromisoformat(self.as_of)).days)

    def doc(self, now: float, currency: str) -> dict[str, Any]:
        """The price as `GET snapshots` shows it: the figure, its currency, where it came
        from and how old it is."""
        age = self.age_days(now)
        return {"per_gib_month": self.per_gib_month, "currency": currency,
                "source": self.source, "as_of": self.as_of, "age_days": age,
                "stale": age is not None and age > self.stale_after_days}


def cost_doc(price: StoragePrice | None, size: int, stored_seconds: float
             ) -> dict[str, Any]:
    """A snapshot's `storage_cost` (so far) and `storage_cost_per_month`: null without a
    price."""
    if price is None:
        return {"storage_cost": None, "storage_cost_per_month": None}
    return {"storage_cost": round_money(price.so_far(size, stored_seconds)),
            "storage_cost_per_month": round_money(price.per_month(size))}
