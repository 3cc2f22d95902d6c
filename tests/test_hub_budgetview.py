"""What a member is told of a group budget: never enough to read another member's spend."""

from __future__ import annotations

import asyncio
import logging
import time

from jupyter_costguard.hub.budgethold import BudgetHold
from jupyter_costguard.hub.budgets import Budgets, BudgetState, budget_states, shown_to_member
from jupyter_costguard.hub.storerows import ServerRow

NOW = 1_800_000_000.0


def group(spent: float, members: int, budget: float = 100.0) -> BudgetState:
    (state,) = budget_states(Budgets("month", {}, {"ml": budget}), "ann", ["ml"], 0.0,
                             {"ml": spent}, NOW, {"ml": members})
    return state


def test_a_two_member_group_shows_what_is_left_in_tenths_only() -> None:
    """Ann knows her own spend; with one other member, each change of the exact remaining
    amount that is not hers is bob's: she read bob's spend from api/me."""
    for spent, shown in ((12.3, 80.0), (19.9, 80.0), (20.0, 80.0), (20.1, 70.0),
                         (99.5, 10.0), (100.0, 0.0), (150.0, 0.0)):
        (doc,) = shown_to_member([group(spent, 2)], "remaining")
        assert doc["remaining"] == shown, (spent, doc)
        assert doc["budget"] is None and doc["spent"] is None and doc["used"] is None
    # a larger group: the exact amount left (no member's spend stands out of it)
    (doc,) = shown_to_member([group(12.3, 5)], "remaining")
    assert doc["remaining"] == 87.7
    # "full" shows everything, as the site chose
    (doc,) = shown_to_member([group(12.3, 2)], "full")
    assert doc["spent"] == 12.3 and doc["remaining"] == 87.7


def test_the_budget_stop_warning_tells_a_member_no_group_figures() -> None:
    records: list[tuple[str, str]] = []
    hold = BudgetHold("on", 600, {"gpu"}, stop_server=lambda u, s: asyncio.sleep(0),
                      record=lambda t, u, s, k, d: records.append((k, d)),
                      log=logging.getLogger("test"), currency="USD", view="remaining")
    row = ServerRow(user="ann", server="", url="/user/ann/", state="ok", detail="",
                    last_ok=NOW, last_try=NOW, currency="USD", simulated=False,
                    rate_per_hour=1.0, gpu_count=1, gpus_held=1, gpus_busy=1,
                    gpu_idle_since=None, profile="gpu", spend=0.0, waste=0.0)
    asyncio.run(hold.run([row], {"ann": [group(123.45, 2)]}, time.time()))
    (warning,) = hold.warnings_for(("ann", ""), time.time())
    assert "123.45" not in warning["message"] and "100.00" not in warning["message"]
    assert warning["message"].startswith("Group ml's monthly budget is spent.")
    assert "spent" not in warning["details"] and "budget" not in warning["details"]
    # the admins' record keeps the figures that decided it
    assert records and "123.45" in records[0][1] and "100.00" in records[0][1]
