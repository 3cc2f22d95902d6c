"""The one SQLite opener (`common/sqlite.py`): private files, WAL, versioned migrations."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_costguard.common.sqlite import (
    BUSY_TIMEOUT,
    Schema,
    SchemaTooNew,
    open_db,
    open_read_only,
    statements,
    store_version,
    user_version,
)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def permissive_umask() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def test_files_are_private_whatever_the_umask(tmp_path: Path, permissive_umask: None) -> None:
    path = tmp_path / "made" / "deeper" / "x.sqlite"
    db = open_db(path, Schema("t", ("CREATE TABLE t (a)",)))
    db.execute("INSERT INTO t VALUES (1)")  # the -wal and -shm exist while it is open
    try:
        assert mode(path) == 0o600 and mode(path.parent) == 0o700
        for side in ("-wal", "-shm"):
            assert mode(path.with_name(path.name + side)) == 0o600, side
    finally:
        db.close()


def test_an_existing_folder_keeps_its_mode_and_loose_files_are_tightened(
        tmp_path: Path, permissive_umask: None) -> None:
    tmp_path.chmod(0o755)
    path = tmp_path / "x.sqlite"
    # an older release's file, 0644, and its -wal and -shm left by a crash
    crashed = ("import os, sqlite3, sys; db = sqlite3.connect(sys.argv[1]); "
               "db.execute('PRAGMA journal_mode=WAL'); db.execute('CREATE TABLE t (a)'); "
               "db.commit(); os._exit(0)")
    subprocess.run([sys.executable, "-c", crashed, str(path)], check=True)
    sides = [path.with_name(path.name + s) for s in ("-wal", "-shm")]
    assert [mode(p) for p in (path, *sides)] == [0o644] * 3
    db = open_db(path, Schema("t", ("CREATE TABLE IF NOT EXISTS t (a)",)))
    try:
        assert mode(tmp_path) == 0o755
        assert [mode(p) for p in (path, *sides)] == [0o600] * 3
    finally:
        db.close()


def test_a_link_in_the_database_s_place_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(b"")
    elsewhere.chmod(0o644)
    (tmp_path / "x.sqlite").symlink_to(elsewhere)
    with pytest.raises(OSError):
        open_db(tmp_path / "x.sqlite", Schema("t", ("CREATE TABLE t (a)",)))
    assert mode(elsewhere) == 0o644


def test_wal_and_a_busy_timeout(tmp_path: Path) -> None:
    db = open_db(tmp_path / "x.sqlite", Schema("t", ("CREATE TABLE t (a)",)))
    try:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert db.execute("PRAGMA busy_timeout").fetchone() == (int(BUSY_TIMEOUT * 1000),)
        assert db.execute("PRAGMA synchronous").fetchone() == (1,)  # NORMAL
    finally:
        db.close()


class Recorder:
    """Migrations that note each run: SQL, a callable, SQL."""

    def __init__(self) -> None:
        self.ran: list[int] = []

    def steps(self, n: int) -> tuple[str | object, ...]:
        def two(db: sqlite3.Connection) -> None:
            self.ran.append(2)
            db.execute("ALTER TABLE t ADD COLUMN b")

        def numbered(i: int) -> object:
            def step(db: sqlite3.Connection) -> None:
                self.ran.append(i)
                db.execute(f"ALTER TABLE t ADD COLUMN c{i}")
            return step

        all_steps: list[str | object] = [
            "CREATE TABLE t (a TEXT DEFAULT ';');  -- version 1; two statements\n"
            "CREATE TABLE log (n INTEGER);", two]
        all_steps += [numbered(i) for i in range(3, n + 1)]
        return tuple(all_steps[:n])


def schema(steps: tuple[object, ...], slot: int = 0) -> Schema:
    return Schema("test", steps, slot=slot)  # type: ignore[arg-type]


def test_user_version_steps_through_each_migration_once(tmp_path: Path) -> None:
    path = tmp_path / "x.sqlite"
    r = Recorder()
    db = open_db(path, schema(r.steps(2)))
    assert user_version(db) == 2 and r.ran == [2]
    db.close()
    db = open_db(path, schema(r.steps(2)))  # up to date: nothing runs again
    assert user_version(db) == 2 and r.ran == [2]
    db.close()
    db = open_db(path, schema(r.steps(4)))  # a later release adds two: only those run
    try:
        assert user_version(db) == 4 and r.ran == [2, 3, 4]
        columns = [row[1] for row in db.execute("PRAGMA table_info(t)")]
        assert columns == ["a", "b", "c3", "c4"]
    finally:
        db.close()


def test_a_file_from_before_versions_runs_the_baseline(tmp_path: Path) -> None:
    path = tmp_path / "x.sqlite"
    with sqlite3.connect(path) as old:
        old.execute("CREATE TABLE t (a)")
        old.execute("INSERT INTO t VALUES ('kept')")

    def baseline(db: sqlite3.Connection) -> None:
        db.execute("CREATE TABLE IF NOT EXISTS t (a)")
        if "b" not in {row[1] for row in db.execute("PRAGMA table_info(t)")}:
            db.execute("ALTER TABLE t ADD COLUMN b DEFAULT 0")

    db = open_db(path, schema((baseline,)))
    try:
        assert user_version(db) == 1
        assert db.execute("SELECT a, b FROM t").fetchall() == [("kept", 0)]
    finally:
        db.close()


def test_a_newer_file_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "x.sqlite"
    with sqlite3.connect(path) as newer:
        newer.execute("PRAGMA user_version = 7")
    with pytest.raises(SchemaTooNew, match=r"test tables are at version 7.*knows up to 2"):
        open_db(path, schema(Recorder().steps(2)))
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (7,)
        assert db.execute("SELECT name FROM sqlite_master").fetchall() == []


def test_a_failing_migration_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "x.sqlite"

    def broken(db: sqlite3.Connection) -> None:
        raise RuntimeError("half way")

    with pytest.raises(RuntimeError, match="half way"):
        open_db(path, schema(("CREATE TABLE t (a)", broken)))
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (0,)
        assert db.execute("SELECT name FROM sqlite_master").fetchall() == []


def test_two_stores_in_one_file_count_their_versions_apart(tmp_path: Path) -> None:
    path = tmp_path / "x.sqlite"
    first = schema(("CREATE TABLE one (a)",), slot=0)
    second = schema(("CREATE TABLE two (a)", "ALTER TABLE two ADD COLUMN b"), slot=1)
    open_db(path, first).close()
    db = open_db(path, second)
    assert (store_version(db, first), store_version(db, second)) == (1, 2)
    assert user_version(db) == 1 + (2 << 8)
    db.close()
    open_db(path, first).close()  # the other's versions do not read as this one's
    ahead = schema(("CREATE TABLE two (a)",), slot=1)
    with pytest.raises(SchemaTooNew):
        open_db(path, ahead)
    high = schema(("CREATE TABLE three (a)",), slot=3)  # the sign bit's byte
    db = open_db(path, high)
    try:
        assert store_version(db, high) == 1 and store_version(db, second) == 2
    finally:
        db.close()


def test_memory_databases_are_migrated_too() -> None:
    db = open_db(":memory:", schema(("CREATE TABLE t (a)",)))
    try:
        assert db.execute("SELECT count(*) FROM t").fetchone() == (0,)
    finally:
        db.close()


def test_statements_split_where_sqlite_would() -> None:
    script = ("CREATE TABLE a (x TEXT DEFAULT ';'); -- a comment; with a semicolon\n"
              "CREATE TRIGGER t AFTER INSERT ON a BEGIN SELECT 1; SELECT 2; END;\n")
    found = list(statements(script))
    assert len(found) == 2 and found[1].strip().endswith("END;")
    db = sqlite3.connect(":memory:")
    for s in found:
        db.execute(s)


def test_read_only_readers_find_a_folder_named_with_uri_characters(tmp_path: Path) -> None:
    folder = tmp_path / "a#b?c%20d"
    path = folder / "x.sqlite"
    db = open_db(path, schema(("CREATE TABLE t (a)", "INSERT INTO t VALUES (1)")))
    db.close()
    reader = open_read_only(path)
    try:
        assert reader.execute("SELECT a FROM t").fetchall() == [(1,)]
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            reader.execute("INSERT INTO t VALUES (2)")
    finally:
        reader.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == [folder.name]
