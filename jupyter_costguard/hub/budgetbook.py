"""What each budget has spent this period: one computation for the service (the budget hold,
the pages, api/me, metrics) and the spawn hook in the Hub's process, over the same SQL.

A group's spend is what every member of it spent this period, whether or not they run now:
the service records each user's groups as the Hub lists them, and keeps a membership for the
period in which it was last seen (`memberships.seen`), so members cannot beat a group budget
by not running at the same time, and Finance's group figures keep a stopped member's spend.
Which budgets apply to a user is their groups now (the Hub's).
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Iterable, Mapping
from pathlib import Path

from jupyter_costguard.common.sqlite import open_read_only
from jupyter_costguard.hub.budgets import Budgets, BudgetState, budget_states

HOUR = 3600


class BudgetUnreadable(Exception):
    """The service's database cannot be read: spend is unknown, not zero."""


def users_spend(db: sqlite3.Connection, counted: str, since: float) -> dict[str, float]:
    """Every user's counted spend (`counted`: the SQL of one hours row's figure, see
    hub/store.py) in the hours that start at or after `since` (a period starts on the
    hour)."""
    return {u: float(v) for u, v in db.execute(
        f"SELECT user, SUM({counted}) FROM hours WHERE hour >= ? GROUP BY user",
        (math.ceil(since / HOUR),))}


def memberships(db: sqlite3.Connection, since: float | None = None) -> dict[str, list[str]]:
    """user -> groups, of the memberships seen since `since` (None: the latest of each
    user's, the groups the Hub listed when it last listed the user)."""
    out: dict[str, list[str]] = {}
    if since is None:
        rows = db.execute(
            "SELECT m.user, m.grp FROM memberships m WHERE m.seen = (SELECT MAX(seen) FROM "
            "memberships n WHERE n.user = m.user) ORDER BY m.grp")
    else:
        rows = db.execute("SELECT user, grp FROM memberships WHERE seen >= ? ORDER BY grp",
                          (since,))
    for user, grp in rows:
        out.setdefault(user, []).append(grp)
    return out


def states(budgets: Budgets, spent: Mapping[str, float],
           members: Mapping[str, Iterable[str]], users: Mapping[str, Iterable[str]],
           now: float) -> dict[str, list[BudgetState]]:
    """The budgets of each of `users` (user -> their groups now): their own spend, and each
    group's as its period's members spent it (`members`: user -> groups this period)."""
    group_spend: dict[str, float] = {}
    count: dict[str, int] = {}
    for user, groups in members.items():
        for g in set(groups):
            group_spend[g] = group_spend.get(g, 0.0) + spent.get(user, 0.0)
            count[g] = count.get(g, 0) + 1
    for user, groups in users.items():  # a member the table has not seen yet
        for g in set(groups) - set(members.get(user, ())):
            group_spend[g] = group_spend.get(g, 0.0) + spent.get(user, 0.0)
            count[g] = count.get(g, 0) + 1
    return {u: budget_states(budgets, u, sorted(set(gs)), spent.get(u, 0.0), group_spend, now,
                             count) for u, gs in users.items()}


def read(db_path: str | Path, counted: str, since: float,
         ) -> tuple[dict[str, float], dict[str, list[str]]]:
    """From another process (the spawn hook), read-only: each user's spend and the period's
    memberships. BudgetUnreadable when the file is missing, unreadable or not the service's:
    only "no rows" means nothing was spent."""
    path = Path(db_path)
    if not path.is_file():
        raise BudgetUnreadable(f"{path} does not exist (has the costguard service run?)")
    try:
        db = open_read_only(path)
    except sqlite3.Error as e:
        raise BudgetUnreadable(f"{path}: {e}") from e
    try:
        hours = {r[1] for r in db.execute("PRAGMA table_info(hours)")}
        # a database the service has not yet upgraded (the Hub restarted first): no meter,
        # no membership times; what is there is all there is until the service runs
        if "priced" not in hours:
            counted = "spend"
        seen = "seen" in {r[1] for r in db.execute("PRAGMA table_info(memberships)")}
        spent = users_spend(db, counted, since)
        if seen:
            members = memberships(db, since)
        else:
            members = {}
            for user, grp in db.execute("SELECT user, grp FROM memberships"):
                members.setdefault(user, []).append(grp)
        return spent, members
    except sqlite3.Error as e:
        raise BudgetUnreadable(f"{path}: {e}") from e
    finally:
        db.close()


def for_user(db_path: str | Path, counted: str, budgets: Budgets, user: str,
             groups: Iterable[str], now: float) -> list[BudgetState]:
    """One user's budgets (the spawn hook): their groups now are the Hub's."""
    spent, members = read(db_path, counted, budgets.start(now))
    return states(budgets, spent, members, {user: list(groups)}, now)[user]


