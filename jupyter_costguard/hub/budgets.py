"""Budgets per user and per group, with a period: what the admin page shows as "budget used"
and what the spawn hook refuses a GPU profile on.

A user's own budget is `user_budgets[name]`, else `default_user_budget`; each group in
`group_budgets` has one budget that all its members' spend counts against. A user may start a
GPU server only while their own budget and every budget of a group they belong to has
something left in the current period.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jupyter_costguard.common.periods import PERIODS, period_end, period_start

#: what a member (not a costguard admin) sees of a group's budget: what is left of it (not what
#: the group spent, which would tell each member what the others spend), everything, or nothing
MEMBER_GROUP_VIEWS = ("remaining", "full", "none")
#: a group with fewer members than this shows them what is left of its budget only coarsely
PRIVATE_GROUP_MEMBERS = 3
#: how a period's budget is named in messages
ADJECTIVE = {"month": "monthly", "week": "weekly", "day": "daily"}


@dataclass(frozen=True)
class Budgets:
    period: str = "month"
    user_budgets: Mapping[str, float] | None = None
    group_budgets: Mapping[str, float] | None = None
    default_user_budget: float | None = None

    def __post_init__(self) -> None:
        if self.period not in PERIODS:
            raise ValueError(f"budget period must be one of {', '.join(PERIODS)}, "
                             f"not {self.period!r}")

    def for_user(self, user: str) -> float | None:
        value = (self.user_budgets or {}).get(user, self.default_user_budget)
        return value if value is not None and value > 0 else None

    def for_group(self, group: str) -> float | None:
        value = (self.group_budgets or {}).get(group)
        return value if value is not None and value > 0 else None

    def start(self, now: float) -> float:
        return period_start(self.period, now)

    def end(self, now: float) -> float:
        return period_end(self.period, now)


@dataclass(frozen=True)
class BudgetState:
    """One budget in the current period."""

    scope: str  # "user" or "group"
    name: str
    budget: float
    spent: float
    period: str
    period_start: float
    period_end: float
    #: a group's members this period (0: not counted, or a user's own budget)
    members: int = 0
    #: what other GPU spawns hold of it until their spend counts (the spawn check's figure,
    #: hub/budgetbook.py; 0 elsewhere)
    reserved: float = 0.0

    @property
    def remaining(self) -> float:
        return max(0.0, self.budget - self.spent)

    @property
    def used(self) -> float:
        return self.spent / self.budget

    @property
    def exhausted(self) -> bool:
        return self.spent >= self.budget

    @property
    def full(self) -> bool:
        """Nothing left once what other spawns hold is counted: a GPU spawn waits."""
        return self.spent + self.reserved >= self.budget

    def doc(self) -> dict[str, object]:
        return {"scope": self.scope, "name": self.name, "budget": round(self.budget, 6),
                "spent": round(self.spent, 6), "remaining": round(self.remaining, 6),
                "used": round(self.used, 6), "period": self.period,
                "period_start": self.period_start, "period_end": self.period_end}


def budget_states(budgets: Budgets, user: str, groups: list[str],
                  user_spend: float, group_spend: Mapping[str, float], now: float,
                  group_members: Mapping[str, int] | None = None) -> list[BudgetState]:
    """Every budget that applies to `user`, with what the period has spent of it."""
    start, end = budgets.start(now), budgets.end(now)
    out = []
    own = budgets.for_user(user)
    if own is not None:
        out.append(BudgetState("user", user, own, user_spend, budgets.period, start, end))
    for g in groups:
        b = budgets.for_group(g)
        if b is not None:
            out.append(BudgetState("group", g, b, group_spend.get(g, 0.0), budgets.period,
                                   start, end, (group_members or {}).get(g, 0)))
    return out


def shown(state: BudgetState, view: str = "remaining") -> dict[str, Any] | None:
    """One budget as a member (not a costguard admin) may see it, by the site's
    `member_group_view`: the user's own budget whole; a group's whole ("full"), as what is
    left of it ("remaining"; in tenths of it in a small group), or not at all ("none", and an
    unknown view: never read as "full"). The one rule for every page, answer, server
    environment, refusal and warning a member reads (`spent_words`)."""
    if state.scope != "group" or view == "full":
        return state.doc()
    if view != "remaining":
        return None
    remaining = state.remaining
    if state.members < PRIVATE_GROUP_MEMBERS and remaining > 0:
        # in a group this small what is left moves by the others' spend alone: each member
        # would read the others' from it; shown in tenths of the budget
        step = state.budget / 10
        remaining = max(step, (remaining // step) * step)
    return {**state.doc(), "budget": None, "spent": None, "used": None,
            "remaining": round(remaining, 6)}


def shown_to_member(states: list[BudgetState], view: str = "remaining",
                    ) -> list[dict[str, Any]]:
    """The budget documents a member is shown (`shown`)."""
    return [d for d in (shown(s, view) for s in states) if d is not None]


def day(t: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(t))


def spent_words(state: BudgetState, currency: str, view: str = "remaining",
                whose: str | None = None) -> str:
    """A spent budget in words, with the figures `view` lets a member see of it (`shown`):
    a group's budget and spend only under "full" (anything else would tell a member what the
    others spent). `view="full"` is the admins' record."""
    doc = shown(state, view)
    if whose is None:
        whose = "the user's" if state.scope == "user" else f"group {state.name}'s"
    period = ADJECTIVE.get(state.period, state.period)
    if doc is None or doc["budget"] is None:
        return f"{whose} {period} budget is spent"
    unit = f" {currency}" if currency else ""
    return (f"{whose} {period} budget of {doc['budget']:.2f}{unit} is spent "
            f"({doc['spent']:.2f}{unit} since {day(state.period_start)} UTC)")
