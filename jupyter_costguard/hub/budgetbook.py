"""The budget book: what each budget has spent this period, and what GPU spawns hold of it,
read once from the service's SQLite. Every figure of spend against a budget reads a book: the
spawn hook (in the Hub's process), the budget hold, `api/me`, the page's rows, the CSV and
the metrics (hub/report.py), so no two of them can disagree for the same state of the store.

A group's spend is what every member of it spent this period, whether or not they run now:
the service records each user's groups as the Hub lists them, and keeps a membership for the
period in which it was last seen (`memberships.seen`), so members cannot beat a group budget
by not running at the same time, and Finance's group figures keep a stopped member's spend.
Which budgets apply to a user is their groups now (the Hub's).

**Reservations.** A GPU spawn admitted by the hook holds what its server can spend before the
service next looks at the Hub and meters it (its profile's rate x `poll_interval`): the check
and the reservation are one write transaction (`admit`, BEGIN IMMEDIATE), so spawns at the
same moment are decided one after another, each seeing the others' reservations. A spawn is
admitted while every budget of the user has something left after what is spent and what the
other spawns hold; the service releases a reservation once the server's own spend counts (the
meter accrues for it, or its report is accepted), once the Hub no longer lists a server whose
spawn began before a look at the Hub, and every reservation expires (`expires`).
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from jupyter_costguard.common.sqlite import BUSY_TIMEOUT, open_read_only
from jupyter_costguard.hub.budgets import Budgets, BudgetState, budget_states

HOUR = 3600


class BudgetUnreadable(Exception):
    """The service's database cannot be read: spend is unknown, not zero."""


@dataclass(frozen=True)
class Reservation:
    """What one admitted GPU spawn holds of its user's budgets until its spend counts."""

    user: str
    server: str
    #: the user's groups at the spawn (the Hub's): the group budgets it holds against
    groups: tuple[str, ...]
    amount: float
    made: float
    expires: float


@dataclass(frozen=True)
class BudgetBook:
    """Each user's counted spend this period, the period's memberships and the live
    reservations, with the group sums built once."""

    budgets: Budgets
    now: float
    #: user -> counted spend this period
    spent: Mapping[str, float]
    #: user -> the groups they were listed in this period
    members: Mapping[str, list[str]]
    reservations: tuple[Reservation, ...] = ()
    group_spend: dict[str, float] = field(init=False, repr=False, compare=False)
    group_members: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        spend: dict[str, float] = {}
        count: dict[str, int] = {}
        for user, groups in self.members.items():
            for g in set(groups):
                spend[g] = spend.get(g, 0.0) + self.spent.get(user, 0.0)
                count[g] = count.get(g, 0) + 1
        object.__setattr__(self, "group_spend", spend)
        object.__setattr__(self, "group_members", count)

    def reserved(self, scope: str, name: str, but: tuple[str, str] | None = None) -> float:
        """What the live reservations hold of a user's own (`scope` "user") or a group's
        budget, leaving out the one of server `but` (user, server)."""
        return sum(r.amount for r in self.reservations
                   if (r.user, r.server) != but and r.expires > self.now
                   and (r.user == name if scope == "user" else name in r.groups))

    def states(self, user: str, groups: Iterable[str],
               reserving: tuple[str, str] | None = None) -> list[BudgetState]:
        """The budgets of `user` (their groups now: the Hub's): their own spend, and each
        group's as its period's members spent it; a member the memberships have not listed
        yet counts in the groups they are in now. `reserving` (user, server): with what the
        other spawns hold of each budget (the spawn check)."""
        groups = sorted(set(groups))
        listed = set(self.members.get(user, ()))
        mine = self.spent.get(user, 0.0)
        spend = dict(self.group_spend)
        count = dict(self.group_members)
        for g in set(groups) - listed:
            spend[g] = spend.get(g, 0.0) + mine
            count[g] = count.get(g, 0) + 1
        out = budget_states(self.budgets, user, groups, mine, spend, self.now, count)
        if reserving is None:
            return out
        return [replace(s, reserved=self.reserved(s.scope, s.name, reserving)) for s in out]

    def of_users(self, users: Mapping[str, Iterable[str]]) -> dict[str, list[BudgetState]]:
        """`states` of each of `users` (user -> their groups now)."""
        return {u: self.states(u, gs) for u, gs in users.items()}

    def user_state(self, user: str) -> BudgetState | None:
        """The user's own budget (the page's and the metrics' user rows)."""
        own = self.states(user, ())
        return own[0] if own else None

    def group_state(self, group: str) -> BudgetState | None:
        """A group's budget as its period's members spent it (the group rows)."""
        b = self.budgets.for_group(group)
        if b is None:
            return None
        return BudgetState("group", group, b, self.group_spend.get(group, 0.0),
                           self.budgets.period, self.budgets.start(self.now),
                           self.budgets.end(self.now), self.group_members.get(group, 0))


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


def columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in db.execute(f"PRAGMA table_info({table})")}


def reservations(db: sqlite3.Connection, now: float) -> tuple[Reservation, ...]:
    """The reservations not yet expired at `now` (none in a file from before them)."""
    if not columns(db, "reservations"):
        return ()
    return tuple(Reservation(u, s, tuple(json.loads(g)), a, m, e) for u, s, g, a, m, e in
                 db.execute("SELECT user, server, groups, amount, made, expires FROM "
                            "reservations WHERE expires > ? ORDER BY made", (now,)))


def book(db: sqlite3.Connection, counted: str, budgets: Budgets, now: float) -> BudgetBook:
    """The book of the period of `now`, from one connection (one snapshot under WAL, inside
    a transaction). A file the service has not yet upgraded (the Hub restarted first) is read
    as far as it goes: no meter, no membership times, no reservations."""
    since = budgets.start(now)
    if "priced" not in columns(db, "hours"):
        counted = "spend"
    spent = users_spend(db, counted, since)
    if "seen" in columns(db, "memberships"):
        members = memberships(db, since)
    else:
        members = {}
        for user, grp in db.execute("SELECT user, grp FROM memberships"):
            members.setdefault(user, []).append(grp)
    return BudgetBook(budgets, now, spent, members, reservations(db, now))


def _exists(db_path: str | Path) -> Path:
    path = Path(db_path)
    if not path.is_file():
        raise BudgetUnreadable(f"{path} does not exist (has the costguard service run?)")
    return path


def read(db_path: str | Path, counted: str, budgets: Budgets, now: float) -> BudgetBook:
    """From another process, read-only: the book. BudgetUnreadable when the file is missing,
    unreadable or not the service's: only "no rows" means nothing was spent."""
    path = _exists(db_path)
    try:
        db = open_read_only(path)
    except sqlite3.Error as e:
        raise BudgetUnreadable(f"{path}: {e}") from e
    try:
        return book(db, counted, budgets, now)
    except sqlite3.Error as e:
        raise BudgetUnreadable(f"{path}: {e}") from e
    finally:
        db.close()


@dataclass(frozen=True)
class Admission:
    """The spawn check's answer: the user's budgets (each with what the other spawns hold of
    it), whether a reservation was made, and why none could be (the site's log)."""

    states: list[BudgetState]
    reserved: float = 0.0
    unreserved: str = ""

    @property
    def refused(self) -> bool:
        return any(s.full for s in self.states)


def admit(db_path: str | Path, counted: str, budgets: Budgets, user: str, server: str,
          groups: Iterable[str], now: float, amount: float, ttl: float,
          timeout: float = BUSY_TIMEOUT) -> Admission:
    """The spawn check of a GPU server (the hook, in the Hub's process): in one write
    transaction, the user's budgets with what other spawns hold, and, when every one has
    something left after that, a reservation of `amount` for `ttl` seconds (replacing this
    server's earlier one). A file the hook cannot write (or from before reservations) is
    checked read-only, unreserved, and `unreserved` says why; one whose write lock another
    holds past `timeout` is BudgetUnreadable (the check cannot be made)."""
    path = _exists(db_path)
    groups = sorted(set(groups))
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=rw", uri=True,
                             timeout=timeout, isolation_level=None)
    except sqlite3.Error as e:
        found = read(path, counted, budgets, now)
        return Admission(found.states(user, groups, (user, server)),
                         unreserved=f"{path} cannot be opened for writing ({e})")
    try:
        if not columns(db, "reservations"):
            found = book(db, counted, budgets, now)
            return Admission(found.states(user, groups, (user, server)),
                             unreserved=f"{path} has no reservations yet (upgrade the service)")
        db.execute("BEGIN IMMEDIATE")  # every other spawn check waits for this one
        try:
            found = book(db, counted, budgets, now)
            states = found.states(user, groups, (user, server))
            admission = Admission(states)
            db.execute("DELETE FROM reservations WHERE (user = ? AND server = ?) OR "
                       "expires <= ?", (user, server, now))
            if not admission.refused and amount > 0:
                db.execute("INSERT INTO reservations (user, server, groups, amount, made, "
                           "expires) VALUES (?, ?, ?, ?, ?, ?)",
                           (user, server, json.dumps(groups), amount, now, now + ttl))
                admission = replace(admission, reserved=amount)
            db.execute("COMMIT")
            return admission
        except BaseException:
            db.execute("ROLLBACK")
            raise
    except sqlite3.Error as e:
        if "locked" in str(e):  # held past the timeout: the check cannot be made now
            raise BudgetUnreadable(f"{path}: {e}") from e
        # not writable here (the Hub runs as another account than the service, the folder
        # is not the Hub's): checked as before, unreserved; a file that cannot be read at
        # all is BudgetUnreadable from `read`
        found = read(path, counted, budgets, now)
        return Admission(found.states(user, groups, (user, server)),
                         unreserved=f"{path} cannot be written ({e})")
    finally:
        db.close()
