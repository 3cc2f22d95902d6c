"""How costguard opens its SQLite files: private, WAL, a busy timeout, versioned migrations.

Every store (the ledger, the alerts, the jobs, the hub service) opens its file here, so the
rules are written once. The file is created 0600 whatever the umask (a link in its place is
refused), its folder 0700 when costguard makes it, and -wal and -shm files already there are
made 0600 too (SQLite gives new ones the database file's mode). Each store declares its tables
as a `Schema`: an ordered list of migrations, numbered from 1, whose count is kept in
`PRAGMA user_version`. A file written before versions existed reads as version 0, so each
store's first migration is its baseline: the tables as they are now, made from nothing or
from what an older release left (the columns it lacks, found by probing, are added).

Two stores can share one file (the ledger's file holds the alerts too): each then counts its
versions in its own byte of `user_version`, its `slot`. A file whose version is newer than
every migration a store knows is refused (`SchemaTooNew`) rather than written by code that
does not know its tables. Standard library only, like the rest of `common/`.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Union

from jupyter_costguard.common.files import PRIVATE_DIR, open_private

#: one migration: SQL statements, or a function given the connection (inside the migrating
#: transaction: it must not commit, so no `executescript`; use `run_script`)
Migration = Union[str, Callable[[sqlite3.Connection], None]]

#: how long a connection waits for another's write lock before it gives up (seconds)
BUSY_TIMEOUT = 30.0
#: how long a read-only reader in another process waits (seconds)
READ_TIMEOUT = 5.0
#: stores one file can hold: one byte of the 32-bit `user_version` each
SLOTS = 4
_MAX_VERSION = 0xFF


class SchemaTooNew(sqlite3.DatabaseError):
    """The file was written by a newer costguard than this one: its tables are not known here,
    so it is neither migrated nor written."""


@dataclass(frozen=True)
class Schema:
    """A store's tables: migration i (0-based) takes the store from version i to i + 1."""

    name: str
    migrations: tuple[Migration, ...]
    #: which byte of `user_version` counts this store's versions (0 unless it shares a file)
    slot: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.slot < SLOTS:
            raise ValueError(f"slot must be 0..{SLOTS - 1}, not {self.slot}")
        if not 0 < len(self.migrations) <= _MAX_VERSION:
            raise ValueError(f"a schema has 1..{_MAX_VERSION} migrations")

    @property
    def version(self) -> int:
        """The version this code writes: its number of migrations."""
        return len(self.migrations)


def private_file(path: Path) -> None:
    """Create `path` 0600 (an existing file is made 0600 too; a link there is refused), and its
    folder 0700 when it does not exist yet (an existing folder is the user's to set)."""
    if not path.parent.exists():
        path.parent.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
        os.chmod(path.parent, PRIVATE_DIR)  # mkdir's mode is masked by the umask
    os.close(open_private(path, os.O_RDWR | os.O_CREAT))


def _private_sides(path: Path) -> None:
    """-wal and -shm files left with another mode (by an older release, or by hand): 0600."""
    for suffix in ("-wal", "-shm"):
        try:
            os.close(open_private(path.with_name(path.name + suffix), os.O_RDONLY))
        except FileNotFoundError:
            pass


def open_db(path: str | Path, schema: Schema, timeout: float = BUSY_TIMEOUT,
            ) -> sqlite3.Connection:
    """A connection to `path` for a store's own use: private file, WAL, synchronous=NORMAL (a
    commit survives the process dying; a power cut may lose the last few), autocommit unless
    a transaction is begun, usable from any thread, and `schema` brought up to date.
    ``":memory:"`` opens a private in-memory database with the same schema."""
    memory = str(path) == ":memory:"
    if not memory:
        private_file(Path(path))
    db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None,
                         timeout=timeout)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        if not memory:
            _private_sides(Path(path))
        db.execute("PRAGMA synchronous=NORMAL")
        migrate(db, schema, where=str(path))
    except BaseException:
        db.close()
        raise
    return db


def open_read_only(path: str | Path, timeout: float = READ_TIMEOUT,
                   check_same_thread: bool = True) -> sqlite3.Connection:
    """A read-only connection to an existing file (another process's reads: a hook, the CLI,
    a kernel): it writes nothing, migrates nothing, and never waits on the writer under WAL.
    The path goes into the URI escaped, so a folder named with '#', '?' or '%' is that
    folder."""
    uri = f"{Path(path).resolve().as_uri()}?mode=ro"
    return sqlite3.connect(uri, uri=True, timeout=timeout, isolation_level=None,
                           check_same_thread=check_same_thread)


def user_version(db: sqlite3.Connection) -> int:
    """`PRAGMA user_version` as the unsigned 32 bits it is used as here."""
    return int(db.execute("PRAGMA user_version").fetchone()[0]) & 0xFFFFFFFF


def store_version(db: sqlite3.Connection, schema: Schema) -> int:
    """The version the file says `schema`'s store is at (0: never migrated)."""
    return (user_version(db) >> (8 * schema.slot)) & _MAX_VERSION


def migrate(db: sqlite3.Connection, schema: Schema, where: str = "the database") -> None:
    """Run the migrations `schema`'s store has not had, each once, in one transaction with the
    new version (a failure leaves the file as it was); `SchemaTooNew` when the file is ahead.
    A store already up to date takes no write lock."""
    if store_version(db, schema) == schema.version:
        return
    db.execute("BEGIN IMMEDIATE")  # another process opening the file waits, then sees it done
    try:
        have = store_version(db, schema)
        if have > schema.version:
            raise SchemaTooNew(
                f"{where}: the {schema.name} tables are at version {have}, written by a newer "
                f"costguard (this one knows up to {schema.version}); upgrade jupyter-costguard "
                "or use another file")
        for step in schema.migrations[have:]:
            if callable(step):
                step(db)
            else:
                run_script(db, step)
        if have != schema.version:
            shift = 8 * schema.slot
            word = (user_version(db) & ~(_MAX_VERSION << shift)) | (schema.version << shift)
            db.execute(f"PRAGMA user_version = {word - (1 << 32) if word >= 1 << 31 else word}")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def statements(script: str) -> Iterator[str]:
    """The complete SQL statements of `script`, in order (a ';' inside a string, a comment or a
    trigger's body does not end one)."""
    pending = ""
    for piece in script.split(";"):
        pending += piece + ";"
        if sqlite3.complete_statement(pending):
            if pending.strip(" \t\r\n;"):
                yield pending
            pending = ""
    if pending.strip(" \t\r\n;"):
        yield pending.rstrip(";")


def run_script(db: sqlite3.Connection, script: str) -> None:
    """`script`'s statements one by one, inside the caller's transaction (unlike
    `executescript`, which commits first)."""
    for statement in statements(script):
        db.execute(statement)


def add_columns(db: sqlite3.Connection, table: str, columns: Mapping[str, str]) -> None:
    """Add those of `columns` (name -> declaration) that `table` lacks: how a baseline
    migration brings a file from before versions up to date, as each store probed before."""
    have = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
    for name, declaration in columns.items():
        if name not in have:
            db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {declaration}")
