"""The hub service's SQLite: what every user server has spent, kept so that nothing counts twice.

A server reports what it has spent since this run of it started (`since`, checked against
the Hub's own record of the start). The store keeps one *epoch* per (user, server, since)
holding the latest cumulative figures reported: another report of the same run only moves
that epoch forward, and a restarted server starts a new epoch beside the old one. A
server's spend is the sum of its epochs, a user's the sum of their servers'. What an epoch
gained between two reports is also spread evenly over the hours between them, for periods
and charts.

Each report is written in a transaction of its own, so a bad one can roll back nothing but
itself. All methods run on the service's worker threads; one connection, one writer in this
process. The one other writer is the spawn hook in the Hub's process, which adds a GPU
spawn's reservation in one transaction with its budget check (hub/budgetbook.py `admit`); the
store releases reservations as the meter, a report or a look at the Hub replaces them.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar, cast

from jupyter_costguard.common.hubprotocol import Report
from jupyter_costguard.common.sqlite import open_db, open_read_only
from jupyter_costguard.hub import budgetbook
from jupyter_costguard.hub.budgets import Budgets, BudgetState
from jupyter_costguard.hub.storerows import (
    HOUR,
    MAX_SPREAD_HOURS,
    OK,
    REFUSED,
    STALE,
    STOPPED,
    MeterRow,
    ServerRow,
    hour_bounds,
    server_row,
    spread,
)
from jupyter_costguard.hub.storeschema import (  # noqa: F401 - the store's names, kept here
    COUNTED_SQL,
    COUNTS,
    SCHEMA,
    counted_sql,
    counted_value,
)

T = TypeVar("T")



def read_only(db_path: str | Path, *queries: tuple[str, Sequence[Any]],
              ) -> list[list[tuple[Any, ...]]] | None:
    """Each query's rows from the service's SQLite, opened read-only (the spawn hook and the
    idle-culler hook, in other processes); None before the service has written it."""
    path = Path(db_path)
    if not path.exists():
        return None
    db = open_read_only(path)
    try:
        return [db.execute(sql, tuple(params)).fetchall() for sql, params in queries]
    except sqlite3.OperationalError:  # no tables yet
        return None
    finally:
        db.close()


def reserved(db: sqlite3.Connection) -> set[tuple[str, str]]:
    """The servers whose spawn holds a reservation (a handful: spawns under way)."""
    return {(u, s) for u, s in db.execute("SELECT user, server FROM reservations")}


def release(db: sqlite3.Connection, user: str, server: str, made_by: float) -> None:
    """A server's spawn's reservation, made by `made_by`, holds nothing from now on: its own
    spend counts (hub/budgetbook.py). One made later is a newer spawn's, kept."""
    db.execute("DELETE FROM reservations WHERE user = ? AND server = ? AND made <= ?",
               (user, server, made_by))


#: how long the pages' process reuses one read of the servers, the meter, the totals and the
#: memberships, at most: the three views of a page (by user, group and server), computed back
#: to back, then read them once, not three times (never longer than a page's figures may be
#: old, `page_max_age`; with 0, never)
REUSE_SECONDS = 2.0
#: the read-only stores this process opened for another's pickled one (the pages' process)
_READERS: dict[tuple[str, str, bool], HubStore] = {}


def reader_of(path: str, count: str, idle_from_reports: bool,
              reuse_seconds: float = 0.0) -> HubStore:
    """This process's read-only store of the file at `path` (one per file, kept open): what a
    `HubStore` becomes when pickled to another process, reusing a read for as long as the
    pickled one said (`pages_reuse_seconds`)."""
    key = (path, count, idle_from_reports)
    store = _READERS.get(key)
    if store is None:
        store = _READERS[key] = HubStore(path, count, read_only=True)
        store.idle_from_reports = idle_from_reports
    store.reuse_seconds = reuse_seconds
    return store


class HubStore:
    def __init__(self, path: str | Path, count: str = "metered", *,
                 read_only: bool = False) -> None:
        self.count = count
        #: False where the node's GPU metrics are read: idle GPU hours come from them, not
        #: from what servers report
        self.idle_from_reports = True
        self._counted = counted_sql(count)
        self.path = Path(path)
        # 0600 from the start, WAL; synchronous=NORMAL: a commit survives the process dying at
        # once, a power cut may lose the last few, which the next report restores (reports
        # carry their run's cumulative figures). Read-only (the pages' process): its writes
        # fail, it migrates nothing
        self.db = open_read_only(self.path, check_same_thread=False) if read_only \
            else open_db(self.path, SCHEMA)
        #: a view of a file another process writes (the pages' process): its `version` never
        #: moves, so nothing built from it is kept by version
        self.read_only = read_only
        self._lock = threading.Lock()
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        #: bumped by every write, so readers can cache what they built from the store
        self.version = 0
        #: the last budget book built (store version, budgets, book)
        self._book: tuple[int, Budgets, budgetbook.BudgetBook] | None = None
        #: how long a read may be reused (0: never, as in the service itself; the pages'
        #: process: what the service's store said when pickled there)
        self.reuse_seconds = 0.0
        #: how long the pages' process may reuse a read of this store (the service sets it
        #: from `page_max_age`; 0: never)
        self.pages_reuse_seconds = 0.0
        self._reused: dict[tuple[Any, ...], tuple[float, Any]] = {}

    def _reuse(self, key: tuple[Any, ...], read: Callable[[], T]) -> T:
        """`read()`, or its value of less than `reuse_seconds` ago."""
        if self.reuse_seconds <= 0:
            return read()
        now = time.monotonic()
        hit = self._reused.get(key)
        if hit is not None and now - hit[0] < self.reuse_seconds:
            return cast(T, hit[1])
        if len(self._reused) > 64:
            self._reused.clear()
        value = read()
        self._reused[key] = (now, value)
        return value

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled (to the pages' process), a store is a read-only view of the same file:
        the figures are read there, by that process's own connection."""
        return (reader_of, (str(self.path), self.count, self.idle_from_reports,
                            self.pages_reuse_seconds))

    def close(self) -> None:
        self.db.close()
        with self._readers_lock:
            for reader in self._readers:
                reader.close()
            self._readers.clear()

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """A read-only connection of this thread's own: under WAL, reads see the last commit
        and neither wait for the writer nor hold it up (a page's figures at 10,000 servers
        take most of a second to read, while reports commit many times a second)."""
        reader: sqlite3.Connection | None = getattr(self._local, "reader", None)
        if reader is None:
            reader = open_read_only(self.path, check_same_thread=False)
            self._local.reader = reader
            with self._readers_lock:
                self._readers.append(reader)
        yield reader

    # --- writes (each report its own transaction) -----------------------------------------

    def _write(self, fn: Callable[[sqlite3.Connection], Any]) -> None:
        """`fn` in one transaction of its own: nothing it does can roll back another's."""
        with self._lock:
            db = self.db
            db.execute("BEGIN IMMEDIATE")
            try:
                fn(db)
                db.execute("COMMIT")
                self.version += 1
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def record_report(self, user: str, url: str, profile: str, r: Report,
                      run: float | None = None, received: float | None = None) -> None:
        """One checked report of one server (hub.protocol.check_report): the epoch of its
        `run` (the Hub's start time of this run; the report's `since` when not known) moves
        forward, what it gained is spread over the hours since its last report. Its time
        counts as no later than `received` (the service's clock), so a report dated ahead
        keeps a server fresh no longer than one dated now."""
        error = self.record_reports([(user, url, profile, r, run, received)])[0]
        if error is not None:
            raise error

    def record_reports(self, reports: Sequence[tuple[str, str, str, Report, float | None,
                                                     float | None]],
                       ) -> list[Exception | None]:
        """Several reports (user, url, profile, report, run, received) in one transaction,
        each in a savepoint of its own: one that fails is rolled back alone (its error in
        its place of the answer), the others are kept."""
        errors: list[Exception | None] = []
        if not reports:
            return errors

        def write(db: sqlite3.Connection) -> None:
            held = reserved(db)
            for user, url, profile, r, run, received in reports:
                seen = r.time if received is None else min(r.time, received)
                db.execute("SAVEPOINT report")
                try:
                    self._record_one(db, user, url, profile, r,
                                     r.since if run is None else run, seen)
                    if (user, r.server) in held:  # the server's own figures count from now
                        release(db, user, r.server, seen)
                except Exception as e:  # one report's failure is its own
                    db.execute("ROLLBACK TO report")
                    errors.append(e)
                else:
                    errors.append(None)
                db.execute("RELEASE report")
        self._write(write)
        return errors

    def record_refused(self, user: str, server: str, url: str, why: str, now: float) -> None:
        """A report the service refused: the server shows the reason on the admin page; its
        figures stay as last accepted."""
        self._write(lambda db: db.execute(
            "INSERT INTO servers (user, server, url, state, detail, last_try) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (user, server) DO UPDATE SET "
            "state = excluded.state, detail = excluded.detail, last_try = excluded.last_try",
            (user, server, url, REFUSED, f"report refused: {why}"[:500], now)))

    def record_cycle(self, running: Mapping[tuple[str, str], tuple[str, str]],
                     memberships: Mapping[str, list[str]], now: float,
                     stale_after: float) -> None:
        """What the Hub says now: every running server ((user, server) -> (url, profile)),
        each user's groups. A running server without a report for `stale_after` seconds is
        stale (its figures kept), one the Hub no longer lists is stopped."""
        def write(db: sqlite3.Connection) -> None:
            known = {(u, s): (state, last_ok, was) for u, s, state, last_ok, *was in db.execute(
                "SELECT user, server, state, last_ok, url, profile FROM servers")}
            for (user, server), (url, profile) in running.items():
                state, last_ok, was = known.get((user, server), (None, None, None))
                if state is None or state == STOPPED:
                    db.execute(
                        "INSERT INTO servers (user, server, url, state, detail, last_try, "
                        "profile) VALUES (?, ?, ?, ?, 'no report yet', ?, ?) ON CONFLICT "
                        "(user, server) DO UPDATE SET url = excluded.url, state = "
                        "excluded.state, detail = excluded.detail, profile = excluded.profile,"
                        " last_ok = NULL, node_gpus = NULL, node_busy = NULL, node_time = NULL, "
                        "node_idle_since = NULL, node_unknown = NULL",
                        (user, server, url, STALE, now, profile))
                    continue
                if was != [url, profile]:  # unchanged, as nearly always: no write
                    db.execute("UPDATE servers SET url = ?, profile = ? WHERE user = ? AND "
                               "server = ?", (url, profile, user, server))
                if state == OK and (last_ok is None or now - last_ok > stale_after):
                    db.execute("UPDATE servers SET state = ?, detail = ? WHERE user = ? AND "
                               "server = ?", (STALE, f"no report for {now - (last_ok or now):.0f}"
                                              " s", user, server))
            for (user, server), (state, _, _) in known.items():
                if state != STOPPED and (user, server) not in running:
                    db.execute(
                        "UPDATE servers SET state = ?, detail = 'not running', "
                        "rate_per_hour = 0, gpus_held = 0, gpus_busy = 0, active_jobs = 0, "
                        "gpu_idle_since = NULL, node_gpus = NULL, node_busy = NULL, "
                        "node_time = NULL, node_idle_since = NULL, node_unknown = NULL "
                        "WHERE user = ? AND server = ?",
                        (STOPPED, user, server))
            # a reservation of a spawn that began before this look at the Hub, of a server
            # it does not list (the spawn failed, or the server stopped), holds nothing
            for user, server in reserved(db) - set(running):
                release(db, user, server, now - 1e-6)  # made before `now` only
            db.execute("DELETE FROM reservations WHERE expires <= ?", (now,))
            # each listed user's groups now; a membership no longer listed is kept, with
            # when it was last seen, for the period it counts in
            db.executemany(
                "INSERT INTO memberships (user, grp, seen) VALUES (?, ?, ?) ON CONFLICT "
                "(user, grp) DO UPDATE SET seen = excluded.seen",
                [(u, g, now) for u, gs in memberships.items() for g in gs])
        self._write(write)

    def record_meter(self, running: Mapping[tuple[str, str], tuple[float | None, str]],
                     rates: Mapping[str, float], now: float) -> None:
        """The meter moves to `now`: each running server ((user, server) -> (the Hub's
        `started`, profile)) whose profile has a rate accrues rate x the time since the
        meter last moved (or since it started), spread over the hours it covers. Persisted,
        so a restart of the service picks up where it left: the time it was down is
        counted at its next cycle, as long as the Hub says the same run is still up."""
        def write(db: sqlite3.Connection) -> None:
            held = reserved(db)
            for (user, server), (run, profile) in running.items():
                rate = rates.get(profile)
                if run is None or rate is None:
                    continue
                if (user, server) in held:  # the meter counts this server's spend from now
                    release(db, user, server, now)
                found = db.execute("SELECT spend, last FROM meter WHERE user = ? AND "
                                   "server = ? AND run = ?", (user, server, run)).fetchone()
                spend, last = (0.0, run) if found is None else found
                start = max(last, run, now - MAX_SPREAD_HOURS * HOUR)
                if now <= start:
                    if found is None:
                        db.execute("INSERT INTO meter VALUES (?, ?, ?, ?, ?, ?, ?)",
                                   (user, server, run, profile, rate, 0.0, run))
                    continue
                gained = rate * (now - start) / HOUR
                db.execute(
                    "INSERT INTO meter VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (user, server,"
                    " run) DO UPDATE SET profile = excluded.profile, rate_per_hour = "
                    "excluded.rate_per_hour, spend = excluded.spend, last = excluded.last",
                    (user, server, run, profile, rate, spend + gained, now))
                # every hour covered is marked priced, even at a rate of 0
                db.executemany(
                    "INSERT INTO hours (user, server, hour, metered, priced) VALUES "
                    "(?, ?, ?, ?, 1) ON CONFLICT (user, server, hour) DO UPDATE SET "
                    "metered = metered + excluded.metered, priced = 1",
                    [(user, server, hour, gained * part)
                     for hour, part in spread(start, now, 1.0).items()])
        self._write(write)

    def record_node(self, readings: Mapping[tuple[str, str], tuple[int, int, int]],
                    now: float, max_gap: float = 300.0) -> None:
        """What the node said of each running server's pod ((user, server) -> (GPUs held,
        GPUs busy, GPUs of unknown activity); a pod without GPU series holds none): kept on
        the server's row with the time all its GPUs went idle (never while one's activity is
        unknown), and the idle GPU-seconds since the last reading added to its hours (the
        last reading held until this one, for at most `max_gap` s: a longer silence of
        Prometheus counts nothing)."""
        def write(db: sqlite3.Connection) -> None:
            for (user, server), (gpus, busy, unknown) in readings.items():
                prev = db.execute("SELECT node_gpus, node_busy, node_time, node_idle_since, "
                                  "node_unknown FROM servers WHERE user = ? AND server = ?",
                                  (user, server)).fetchone()
                if prev is None:
                    continue  # not yet listed by record_cycle
                p_gpus, p_busy, p_time, p_since, p_unknown = prev
                idle = gpus > 0 and busy == 0 and unknown == 0
                was_idle = p_time is not None and (p_gpus or 0) > 0 and not p_busy \
                    and not p_unknown
                since = (p_since if was_idle and p_since is not None else now) if idle else None
                db.execute("UPDATE servers SET node_gpus = ?, node_busy = ?, node_time = ?, "
                           "node_idle_since = ?, node_unknown = ? WHERE user = ? AND server = ?",
                           (gpus, busy, now, since, unknown, user, server))
                idle_gpus = max(0, (p_gpus or 0) - (p_busy or 0) - (p_unknown or 0))
                if p_time is not None and 0 < now - p_time <= max_gap and idle_gpus:
                    db.executemany(
                        "INSERT INTO hours (user, server, hour, idle_gpu_seconds) VALUES "
                        "(?, ?, ?, ?) ON CONFLICT (user, server, hour) DO UPDATE SET "
                        "idle_gpu_seconds = idle_gpu_seconds + excluded.idle_gpu_seconds",
                        [(user, server, hour, seconds) for hour, seconds in
                         spread(p_time, now, idle_gpus * (now - p_time)).items()])
        self._write(write)

    def _record_one(self, db: sqlite3.Connection, user: str, url: str, profile: str,
                    r: Report, epoch: float, seen: float) -> None:
        prev = db.execute(
            "SELECT spend, waste, last_seen, unattributed FROM epochs WHERE user = ? AND "
            "server = ? AND since = ?", (user, r.server, epoch)).fetchone()
        old = db.execute("SELECT last_ok, gpu_count, gpus_busy, state FROM servers "
                         "WHERE user = ? AND server = ?", (user, r.server)).fetchone()
        if prev is None:
            d_spend, d_waste, d_unattr = r.spend, r.waste, r.unattributed
            start = min(r.since, seen)
            db.execute("INSERT INTO epochs (user, server, since, spend, waste, first_seen, "
                       "last_seen, reported_since, unattributed) VALUES "
                       "(?, ?, ?, ?, ?, ?, ?, ?, ?)", (user, r.server, epoch, r.spend, r.waste,
                                                      seen, seen, r.since, r.unattributed))
        else:
            spend0, waste0, last_seen, unattr0 = prev
            # a figure that went backwards (a ledger edited in place) moves the baseline only
            d_spend, d_waste = max(0.0, r.spend - spend0), max(0.0, r.waste - waste0)
            d_unattr = max(0.0, r.unattributed - unattr0)
            start = last_seen
            if seen >= last_seen:
                db.execute("UPDATE epochs SET spend = ?, waste = ?, unattributed = ?, "
                           "last_seen = ?, reported_since = ? WHERE user = ? AND server = ? "
                           "AND since = ?", (max(spend0, r.spend), max(waste0, r.waste),
                                             max(unattr0, r.unattributed), seen, r.since,
                                             user, r.server, epoch))
            else:  # an older document than one already read: nothing new
                d_spend = d_waste = d_unattr = 0.0
        spend_h = spread(start, seen, d_spend)
        waste_h = spread(start, seen, d_waste)
        unattr_h = spread(start, seen, d_unattr)
        idle_h: dict[int, float] = {}
        if self.idle_from_reports and old is not None and old[0] is not None \
                and old[3] == OK and seen > old[0]:
            # GPU-seconds below the idle threshold between two answers
            idle = max(0, old[1] - old[2]) * (seen - old[0])
            idle_h = spread(old[0], seen, idle)
        db.executemany(
            "INSERT INTO hours (user, server, hour, spend, waste, idle_gpu_seconds, "
            "unattributed) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (user, server, hour) "
            "DO UPDATE SET spend = spend + excluded.spend, waste = waste + excluded.waste, "
            "idle_gpu_seconds = idle_gpu_seconds + excluded.idle_gpu_seconds, "
            "unattributed = unattributed + excluded.unattributed",
            [(user, r.server, hour, spend_h.get(hour, 0.0), waste_h.get(hour, 0.0),
              idle_h.get(hour, 0.0), unattr_h.get(hour, 0.0))
             for hour in set(spend_h) | set(waste_h) | set(idle_h) | set(unattr_h)])
        db.execute(
            "INSERT INTO servers (user, server, url, state, detail, last_ok, last_try, currency,"
            " simulated, rate_per_hour, gpu_count, gpus_held, gpus_busy, gpu_idle_since, profile,"
            " active_jobs, waste_removed) VALUES (?, ?, ?, ?, '', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,"
            " ?, ?) "
            "ON CONFLICT (user, server) DO UPDATE SET url = excluded.url, state = excluded.state,"
            " detail = '', last_ok = excluded.last_ok, last_try = excluded.last_try,"
            " currency = excluded.currency, simulated = excluded.simulated,"
            " rate_per_hour = excluded.rate_per_hour, gpu_count = excluded.gpu_count,"
            " gpus_held = excluded.gpus_held, gpus_busy = excluded.gpus_busy,"
            " gpu_idle_since = excluded.gpu_idle_since, profile = excluded.profile,"
            " active_jobs = excluded.active_jobs, waste_removed = excluded.waste_removed",
            (user, r.server, url, OK, seen, seen, r.currency, int(r.simulated),
             r.rate_per_hour, r.gpu_count, r.gpus_held, r.gpus_busy, r.gpu_idle_since,
             profile, r.active_jobs, r.waste_removed))

    def add_event(self, time: float, user: str, server: str, kind: str, detail: str) -> None:
        """Something the service did to a server (a cull warning, a stop), and why."""
        with self._lock:
            self.db.execute("INSERT INTO events (time, user, server, kind, detail) "
                            "VALUES (?, ?, ?, ?, ?)", (time, user, server, kind, detail))
            self.version += 1

    # --- reads -----------------------------------------------------------------------------

    def servers(self) -> list[ServerRow]:
        return list(self._reuse(("servers",), self._servers))

    def _servers(self) -> list[ServerRow]:
        with self._reading() as db:
            rows = db.execute(
                "SELECT s.user, s.server, url, state, detail, last_ok, last_try, currency, "
                "simulated, rate_per_hour, gpu_count, gpus_held, gpus_busy, gpu_idle_since, "
                "profile, active_jobs, node_gpus, node_busy, node_time, node_idle_since, "
                "node_unknown, waste_removed, COALESCE(SUM(e.spend), 0), "
                "COALESCE(SUM(e.waste), 0) "
                "FROM servers s LEFT JOIN epochs e ON e.user = s.user AND e.server = s.server "
                "GROUP BY s.user, s.server ORDER BY s.user, s.server").fetchall()
        return [server_row(r[:22], r[22], r[23]) for r in rows]

    def totals(self, since: float | None = None, until: float | None = None,
               ) -> dict[tuple[str, str], tuple[float, float, float]]:
        """(user, server) -> (counted spend, waste, idle GPU seconds) over whole hours in
        [since, until); all time when both are None (counting what servers report, spend
        and waste then come from the epochs, exact to the last reading)."""
        return dict(self._reuse(("totals", since, until), lambda: self._totals(since, until)))

    def _totals(self, since: float | None, until: float | None,
                ) -> dict[tuple[str, str], tuple[float, float, float]]:
        with self._reading() as db:
            out: dict[tuple[str, str], tuple[float, float, float]] = {}
            lo, hi = hour_bounds(since, until)
            for user, server, spend, waste, idle in db.execute(
                    f"SELECT user, server, SUM({self._counted}), SUM(waste), "
                    "SUM(idle_gpu_seconds) FROM hours WHERE hour >= ? AND hour < ? "
                    "GROUP BY user, server", (lo, hi)):
                out[(user, server)] = (spend, waste, idle)
            if since is None and until is None and self.count == "reported":
                for user, server, spend, waste in db.execute(
                        "SELECT user, server, SUM(spend), SUM(waste) FROM epochs "
                        "GROUP BY user, server"):
                    idle = out.get((user, server), (0.0, 0.0, 0.0))[2]
                    out[(user, server)] = (spend, waste, idle)
            return out

    def series(self, since: float, until: float) -> list[tuple[str, str, int, float, float]]:
        """(user, server, hour, counted spend, waste) for the hours in [since, until)."""
        return [r[:5] for r in self.series_bands(since, until)]

    def series_bands(self, since: float, until: float,
                     ) -> list[tuple[str, str, int, float, float, float]]:
        """(user, server, hour, counted spend, waste, unattributed) for the hours in
        [since, until): the chart's bands."""
        with self._reading() as db:
            return db.execute(
                f"SELECT user, server, hour, {self._counted}, waste, unattributed FROM hours "
                "WHERE hour >= ? AND hour < ? ORDER BY hour",
                hour_bounds(since, until)).fetchall()

    def memberships(self, since: float | None = None) -> dict[str, list[str]]:
        """user -> groups: as the Hub last listed each user (None), or every membership seen
        since `since` (a period's members, hub/budgetbook.py)."""
        def read() -> dict[str, list[str]]:
            with self._reading() as db:
                return budgetbook.memberships(db, since)
        return dict(self._reuse(("memberships", since), read))

    def events(self, limit: int = 200) -> list[tuple[float, str, str, str, str]]:
        with self._reading() as db:
            return db.execute(
                "SELECT time, user, server, kind, detail FROM events ORDER BY id DESC LIMIT ?",
                (limit,)).fetchall()

    def kept(self) -> dict[tuple[str, str], float]:
        """When each server's user last chose "Keep running" (the culler's idle clock)."""
        with self._reading() as db:
            return {(u, s): t for u, s, t in db.execute(
                "SELECT user, server, MAX(time) FROM events WHERE kind = 'kept' "
                "GROUP BY user, server")}

    def keeps(self, since: float) -> dict[tuple[str, str], list[float]]:
        """When each server's user chose Keep running, since `since` (the culler's limit)."""
        out: dict[tuple[str, str], list[float]] = {}
        with self._reading() as db:
            for u, s, t in db.execute("SELECT user, server, time FROM events WHERE kind = "
                                      "'kept' AND time >= ? ORDER BY time", (since,)):
                out.setdefault((u, s), []).append(t)
        return out

    def budget_book(self, budgets: Budgets, now: float) -> budgetbook.BudgetBook:
        """The budget book of the period of `now` (hub/budgetbook.py, as the spawn hook
        reads it): built once per state of the store and period, so the budget hold, the
        pages, the CSV, the metrics and api/me read the same figures."""
        if self.read_only:  # written elsewhere: reused only as any read here (`_reuse`)
            return self._reuse(("budget_book", id(budgets), budgets.start(now)),
                               lambda: self._build_book(budgets, now))
        version = self.version
        held = self._book
        if held is not None and held[0] == version and held[1] == budgets \
                and held[2].budgets.start(held[2].now) == budgets.start(now):
            # the spawn hook writes reservations from the Hub's process: read afresh
            with self._reading() as db:
                fresh = budgetbook.reservations(db, now)
            return replace(held[2], now=now, reservations=fresh)
        found = self._build_book(budgets, now)
        self._book = (version, budgets, found)
        return found

    def _build_book(self, budgets: Budgets, now: float) -> budgetbook.BudgetBook:
        with self._reading() as db:
            db.execute("BEGIN")  # one snapshot: spend, memberships and reservations agree
            try:
                return budgetbook.book(db, self._counted, budgets, now)
            finally:
                db.execute("COMMIT")

    def budget_states(self, budgets: Budgets, users: Mapping[str, Sequence[str]], now: float,
                      ) -> dict[str, list[BudgetState]]:
        """The budgets of each of `users` (user -> their groups now), from the book."""
        return self.budget_book(budgets, now).of_users(users)

    def meter_rows(self) -> list[MeterRow]:
        """Each server's latest metered run, with the server's own figures for that run."""
        return list(self._reuse(("meter_rows",), self._meter_rows))

    def _meter_rows(self) -> list[MeterRow]:
        with self._reading() as db:
            rows = db.execute(
                "SELECT m.user, m.server, m.run, m.profile, m.rate_per_hour, m.spend, m.last, "
                "e.spend, e.last_seen, e.reported_since FROM meter m LEFT JOIN epochs e ON "
                "e.user = m.user "
                "AND e.server = m.server AND e.since = m.run WHERE m.run = (SELECT MAX(run) "
                "FROM meter n WHERE n.user = m.user AND n.server = m.server) "
                "ORDER BY m.user, m.server").fetchall()
        return [MeterRow(*r) for r in rows]

    def metered_total(self) -> dict[tuple[str, str], float]:
        """(user, server) -> everything the meter has counted, all runs."""
        with self._reading() as db:
            return {(u, s): v for u, s, v in db.execute(
                "SELECT user, server, SUM(spend) FROM meter GROUP BY user, server")}
