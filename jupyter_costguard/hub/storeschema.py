"""The hub service's tables and their migrations, and which figure is counted: the schema
the service writes and the hooks in other processes read (hub/store.py, hub/budgetbook.py),
and where the spawn hook writes its reservations."""

from __future__ import annotations

import sqlite3
import time

from jupyter_costguard.common.sqlite import Schema, add_columns, run_script

#: the tables of version 1; `_baseline` also brings a file from before versions up to date
TABLES = """
CREATE TABLE IF NOT EXISTS epochs (
    user TEXT NOT NULL, server TEXT NOT NULL, since REAL NOT NULL,
    spend REAL NOT NULL, waste REAL NOT NULL, first_seen REAL NOT NULL, last_seen REAL NOT NULL,
    reported_since REAL,
    PRIMARY KEY (user, server, since));
CREATE TABLE IF NOT EXISTS hours (
    user TEXT NOT NULL, server TEXT NOT NULL, hour INTEGER NOT NULL,
    spend REAL NOT NULL DEFAULT 0, waste REAL NOT NULL DEFAULT 0,
    idle_gpu_seconds REAL NOT NULL DEFAULT 0,
    metered REAL NOT NULL DEFAULT 0, priced INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (user, server, hour));
CREATE INDEX IF NOT EXISTS hours_by_hour ON hours (hour);
CREATE TABLE IF NOT EXISTS servers (
    user TEXT NOT NULL, server TEXT NOT NULL, url TEXT NOT NULL,
    state TEXT NOT NULL, detail TEXT NOT NULL DEFAULT '',
    last_ok REAL, last_try REAL, currency TEXT, simulated INTEGER NOT NULL DEFAULT 0,
    rate_per_hour REAL NOT NULL DEFAULT 0, gpu_count INTEGER NOT NULL DEFAULT 0,
    gpus_held INTEGER NOT NULL DEFAULT 0, gpus_busy INTEGER NOT NULL DEFAULT 0,
    gpu_idle_since REAL, profile TEXT NOT NULL DEFAULT '',
    active_jobs INTEGER NOT NULL DEFAULT 0,
    node_gpus INTEGER, node_busy INTEGER, node_time REAL, node_idle_since REAL,
    PRIMARY KEY (user, server));
CREATE TABLE IF NOT EXISTS memberships (
    user TEXT NOT NULL, grp TEXT NOT NULL, PRIMARY KEY (user, grp));
CREATE TABLE IF NOT EXISTS meter (
    user TEXT NOT NULL, server TEXT NOT NULL, run REAL NOT NULL, profile TEXT NOT NULL,
    rate_per_hour REAL NOT NULL, spend REAL NOT NULL, last REAL NOT NULL,
    PRIMARY KEY (user, server, run));
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL, user TEXT NOT NULL,
    server TEXT NOT NULL, kind TEXT NOT NULL, detail TEXT NOT NULL);
"""


def _baseline(db: sqlite3.Connection) -> None:
    """Version 1: the tables, with the columns a database of an earlier release lacks (found
    by probing, as the service did on every start before versions)."""
    run_script(db, TABLES)
    add_columns(db, "servers", {
        "active_jobs": "INTEGER NOT NULL DEFAULT 0",
        # from before node GPU metrics
        "node_gpus": "INTEGER", "node_busy": "INTEGER", "node_time": "REAL",
        "node_idle_since": "REAL",
    })
    add_columns(db, "epochs", {"reported_since": "REAL"})
    # from before the meter
    add_columns(db, "hours", {"metered": "REAL NOT NULL DEFAULT 0",
                              "priced": "INTEGER NOT NULL DEFAULT 0"})


def _unattributed(db: sqlite3.Connection) -> None:
    """Version 2: what no kernel spent (a report's `unattributed`), per run and per hour, so
    that the charts draw it apart from active spend; 0 for what was recorded before."""
    db.execute("ALTER TABLE epochs ADD COLUMN unattributed REAL NOT NULL DEFAULT 0")
    db.execute("ALTER TABLE hours ADD COLUMN unattributed REAL NOT NULL DEFAULT 0")


def _membership_seen(db: sqlite3.Connection) -> None:
    """Version 3: when each membership was last listed by the Hub, so a group's members are
    those of the period, not those running now (hub/budgetbook.py)."""
    db.execute("ALTER TABLE memberships ADD COLUMN seen REAL NOT NULL DEFAULT 0")
    db.execute("UPDATE memberships SET seen = ?", (time.time(),))


def _node_unknown(db: sqlite3.Connection) -> None:
    """Version 4: how many of a pod's GPUs the node reports of unknown activity (a series
    without a number: never idle, `common/gpuactivity.py`); NULL for what came before."""
    db.execute("ALTER TABLE servers ADD COLUMN node_unknown INTEGER")


def _waste_removed(db: sqlite3.Connection) -> None:
    """Version 5: the waste each server's hibernations removed, as its last report said (a
    display figure); 0 for what came before."""
    db.execute("ALTER TABLE servers ADD COLUMN waste_removed REAL NOT NULL DEFAULT 0")


def _reservations(db: sqlite3.Connection) -> None:
    """Version 6: what admitted GPU spawns hold of their budgets until their spend counts,
    written by the spawn hook in the Hub's process in one transaction with its check
    (hub/budgetbook.py `admit`); `groups` is the JSON list of the user's groups at the
    spawn."""
    db.execute("CREATE TABLE reservations (user TEXT NOT NULL, server TEXT NOT NULL, "
               "groups TEXT NOT NULL, amount REAL NOT NULL, made REAL NOT NULL, "
               "expires REAL NOT NULL, PRIMARY KEY (user, server))")


#: the service's tables, each migration run once (`common/sqlite.py`). The spawn and
#: idle-culler hooks read them read-only from other processes (`read_only`)
SCHEMA = Schema("hub", (_baseline, _unattributed, _membership_seen, _node_unknown,
                      _waste_removed, _reservations))

#: which figure budgets, pages, exports and metrics count (c.CostGuardHub.count), as the SQL
#: of one `hours` row: the service's meter where the server's profile is priced (`priced`),
#: what the server reported otherwise; "larger" takes the larger of the two, hour by hour
COUNTED_SQL = {
    "metered": "(CASE WHEN priced THEN metered ELSE spend END)",
    "reported": "spend",
    "larger": "(CASE WHEN priced THEN MAX(metered, spend) ELSE spend END)",
}
COUNTS = tuple(COUNTED_SQL)


def counted_value(count: str, metered: float | None, reported: float) -> float:
    """COUNTED_SQL's rule for one figure (a rate now): the meter's where the server's profile
    is priced (`metered` not None), what the server reports otherwise."""
    if metered is None or count == "reported":
        return reported
    return max(metered, reported) if count == "larger" else metered


def counted_sql(count: str) -> str:
    """The SQL of the counted spend of an `hours` row (ValueError for an unknown mode)."""
    try:
        return COUNTED_SQL[count]
    except KeyError:
        raise ValueError(f"count must be one of {', '.join(COUNTS)}, not {count!r}") from None
