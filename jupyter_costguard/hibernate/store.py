"""Where snapshots live and what the server knows of each: one folder per snapshot
(`<root>/<id>/`, written by the kernel) or one prefix in an object store (`<url>/<id>/`, when
`snapshot_store_url` says), and an index in SQLite (`<root>/index.sqlite`).

The root is 0700 and the index 0600 (`common/sqlite`). The index, not the folders, says which
snapshots exist: a folder the index does not name is never listed or loaded. Every method
blocks (disk, SQLite): the service calls them on its own worker thread, never on the IO loop.

Every save under way is noted in `pending` with the store instance that began it; each
instance holds an exclusive lock on its own file (`.server-<id>.lock`) while it lives. So at
the next start what a killed server's saves left is known to be no one's (its lock is free) and
removed whatever its age, while a save another live server sharing the folder has under way
is left alone.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import sqlite3
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from jupyter_costguard.common.files import PRIVATE_DIR
from jupyter_costguard.common.sqlite import Schema, open_db
from jupyter_costguard.cost.money import round_money
from jupyter_costguard.kernel.hibernate import partial_folders, where
from jupyter_costguard.kernel.hibernate.snapshot import PARTIAL

try:
    import fcntl
except ImportError:  # not POSIX: every other instance is taken to be alive
    fcntl = None  # type: ignore[assignment]

INDEX = "index.sqlite"
#: a snapshot id: what `new_id` makes, and the only names a folder of the root may have to
#: be one (an id from a URL is checked against it before it names a path)
ID_PATTERN = re.compile(r"\A[0-9a-f]{32}\Z")

SCHEMA = Schema("snapshots", (
    """
    CREATE TABLE IF NOT EXISTS snapshots (
        id TEXT PRIMARY KEY,
        notebook TEXT NOT NULL,
        created REAL NOT NULL,
        bytes INTEGER NOT NULL,
        saved TEXT NOT NULL,
        skipped TEXT NOT NULL,
        kernel_name TEXT NOT NULL,
        user TEXT,
        rate_per_hour_held REAL,
        gpus_held INTEGER NOT NULL,
        digest TEXT NOT NULL,
        mac TEXT NOT NULL
    );
    CREATE INDEX IF NOT EXISTS snapshots_notebook ON snapshots (notebook, created);
    """,
    # when it was first restored: the end of the time its kernel's GPUs were not paid for
    "ALTER TABLE snapshots ADD COLUMN restored REAL;",
    # where a snapshot in an object store is (NULL: its folder in the root); and the saves
    # under way, so that what a failed or cut-off save left in a store is found and removed
    """
    ALTER TABLE snapshots ADD COLUMN location TEXT;
    CREATE TABLE IF NOT EXISTS pending (
        id TEXT PRIMARY KEY,
        location TEXT NOT NULL,
        started REAL NOT NULL
    );
    """,
    # which store instance began each save (NULL: a version that did not say)
    "ALTER TABLE pending ADD COLUMN instance TEXT;",
))

#: an instance's lock file: `.server-<instance>.lock`, locked while that instance lives
_LOCK = re.compile(r"\A\.server-([0-9a-f]{32})\.lock\Z")
#: a save given up on: `.<id>.abandoned` tells a kernel still writing it to keep nothing
ABANDONED = ".abandoned"
#: the snapshot id in a name of the root: a snapshot's folder, a partial one, a marker
_OWN = re.compile(r"\A\.?([0-9a-f]{32})(\..*)?\Z")
#: the most hibernated time one snapshot's waste removed counts (12 h: a working day and the
#: evening). How long its kernel would have gone on holding its GPUs without costguard is
#: known only up to a restore; one never restored (abandoned, or its user would have shut the
#: kernel down anyway) would otherwise count for ever. On bench/waste.py's day the figure at
#: 12 h stays under the spend the ledgers say was removed (86% of it for the defaults; at 16 h
#: it is over): a conservative claim (docs/user/hibernate.md)
WASTE_REMOVED_HORIZON_SECONDS = 12 * 3600.0


@dataclass(frozen=True)
class SnapshotRecord:
    """One snapshot as the index holds it. `digest` is the manifest's `manifest_digest` and
    `mac` the server's MAC over it and the fields that say whose it is (`mac.py`);
    `rate_per_hour_held` and `gpus_held` are what the kernel held when it was hibernated (the
    waste a hibernation avoids)."""

    id: str
    notebook: str
    created: float
    bytes: int
    saved: list[str]
    skipped: list[dict[str, Any]]
    kernel_name: str
    user: str | None
    gpus_held: int
    digest: str
    mac: str
    rate_per_hour_held: float | None = None
    restored: float | None = None
    #: the fsspec URL of a snapshot in an object store (credentials and all, as configured);
    #: None for a folder in the root
    location: str | None = None

    def hibernated_seconds(self, now: float) -> float:
        """How long its kernel has been (or was, until the first restore) hibernated."""
        end = self.restored if self.restored is not None else now
        return max(0.0, end - self.created)

    def waste_avoided(self, now: float) -> float:
        """The waste removed: the rate its kernel held times the time it stayed hibernated
        (until its first restore, else until `now`), at most `WASTE_REMOVED_HORIZON_SECONDS`
        of it: what keeping it alive would have cost (0 when the kernel held nothing priced).
        The one rule every surface (REST, /metrics, the panel, the hub's page) shows."""
        held = min(self.hibernated_seconds(now), WASTE_REMOVED_HORIZON_SECONDS)
        return (self.rate_per_hour_held or 0.0) * held / 3600.0

    @property
    def store(self) -> str:
        """Where it is, as answers and logs show it: "local", or its URL without
        credentials."""
        return "local" if self.location is None else where.shown(self.location)

    def doc(self, now: float) -> dict[str, Any]:
        """What `GET snapshots` lists (the MAC, the digest and the raw location stay with the
        server)."""
        return {"id": self.id, "notebook": self.notebook, "created": self.created,
                "bytes": self.bytes, "saved": self.saved, "skipped": self.skipped,
                "store": self.store, "kernel_name": self.kernel_name,
                "gpus_held": self.gpus_held, "rate_per_hour_held": self.rate_per_hour_held,
                "restored": self.restored,
                "hibernated_seconds": round(self.hibernated_seconds(now), 3),
                "waste_avoided": round_money(self.waste_avoided(now))}

    def row(self) -> dict[str, Any]:
        d = asdict(self)
        d["saved"] = json.dumps(self.saved)
        d["skipped"] = json.dumps(self.skipped)
        return d


def waste_removed(records: list[SnapshotRecord], now: float) -> float:
    """The waste removed by `records` together (each one's `waste_avoided`), rounded as money:
    the one sum `GET snapshots`, `/metrics`, the panel and the hub report show."""
    return round_money(sum(r.waste_avoided(now) for r in records))


_COLUMNS = ("id", "notebook", "created", "bytes", "saved", "skipped", "kernel_name", "user",
            "rate_per_hour_held", "gpus_held", "digest", "mac", "restored", "location")


def _record(row: tuple[Any, ...]) -> SnapshotRecord:
    d = dict(zip(_COLUMNS, row))
    d["saved"] = json.loads(d["saved"])
    d["skipped"] = json.loads(d["skipped"])
    return SnapshotRecord(**d)


def new_id() -> str:
    return uuid.uuid4().hex


class SnapshotStore:
    """The snapshot root and its index; new snapshots go to `url` (an fsspec URL of an object
    store) when it is given, else to folders in the root."""

    def __init__(self, root: Path, url: str | None = None) -> None:
        self.url = url or None
        self.root = Path(root)
        if not self.root.exists():
            self.root.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
        os.chmod(self.root, PRIVATE_DIR)  # its snapshots are the user's variables
        self._db = open_db(self.root / INDEX, SCHEMA)
        self._lock = threading.Lock()
        #: this instance, and the lock that says it lives (held until the process ends)
        self.instance = uuid.uuid4().hex
        self._alive = _hold_lock(self.root, self.instance)

    def folder(self, snapshot_id: str) -> Path:
        """The folder of `snapshot_id` (which must be an id: nothing else names a path)."""
        if not ID_PATTERN.match(snapshot_id):
            raise ValueError(f"not a snapshot id: {snapshot_id!r}")
        return self.root / snapshot_id

    def new_location(self, snapshot_id: str) -> str:
        """Where a new snapshot `snapshot_id` is to be written (a folder or a URL)."""
        if self.url is None:
            return str(self.folder(snapshot_id))
        self.folder(snapshot_id)  # an id, nothing else
        return where.child(self.url, snapshot_id)

    def location(self, record: SnapshotRecord) -> str:
        """Where `record`'s snapshot is (a folder or a URL)."""
        return record.location or str(self.folder(record.id))

    def elsewhere(self, snapshot_id: str, location: str) -> str | None:
        """`location` as the index records it: None for the snapshot's folder in the root
        (which `location` finds from the id), else the folder or URL itself."""
        return None if location == str(self.folder(snapshot_id)) else location

    def in_store(self, record: SnapshotRecord) -> bool:
        """Whether `record` is in the store new snapshots go to now (the one a configured
        price is for)."""
        if record.location is None:
            return self.url is None
        return self.url is not None and record.location == where.child(self.url, record.id)

    def begin(self, snapshot_id: str, location: str, now: float | None = None) -> None:
        """Note a save under way: if it never reaches the index, what it left is removed."""
        with self._lock:
            self._db.execute("INSERT INTO pending (id, location, started, instance) VALUES "
                             "(?, ?, ?, ?)", (snapshot_id, location,
                                              time.time() if now is None else now,
                                              self.instance))

    def abandoned_marker(self, snapshot_id: str) -> str:
        """The file whose presence tells a kernel still writing `snapshot_id` to keep
        nothing (`snapshot.save`'s `abandoned`)."""
        self.folder(snapshot_id)  # an id, nothing else
        return str(self.root / f".{snapshot_id}{ABANDONED}")

    def abandon(self, snapshot_id: str, location: str) -> None:
        """A save given up on (its timeout, an error): mark it abandoned, so a kernel still
        writing it keeps nothing, and remove what it wrote so far. Its note in `pending`
        stays: what a kernel writes after this is removed at the next start."""
        marker = self.abandoned_marker(snapshot_id)
        with contextlib.suppress(FileExistsError):
            os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        self._remove_files(snapshot_id, location)

    def _claimed(self) -> set[str]:
        """The ids of saves a live instance (this one included) has under way."""
        with self._lock:
            rows = self._db.execute("SELECT id, instance FROM pending").fetchall()
        live = _live_instances(self.root) | {self.instance}
        return {snapshot_id for snapshot_id, instance in rows if instance in live}

    def clear_store_leftovers(self, older_than: float, now: float | None = None
                              ) -> list[str]:
        """Remove what saves to the snapshot store left unindexed (one that failed, or was
        cut off by a stop or a timeout: `pending` names it), begun `older_than` seconds ago
        or more. Only what this server began: a store shared with other servers keeps
        theirs. Returns what was removed, as logs may show it (no credentials)."""
        limit = (time.time() if now is None else now) - older_than
        gone: list[str] = []
        claimed = self._claimed()
        with self._lock:  # a save whose instance is known and gone is removed at any age
            rows = self._db.execute(
                "SELECT id, location FROM pending WHERE (started <= ? OR instance IS NOT "
                "NULL) AND location LIKE '%://%'", (limit,)).fetchall()
        for snapshot_id, location in rows:
            if snapshot_id in claimed or not where.is_remote(location):
                continue
            try:
                self._delete(snapshot_id, location)
            except Exception:  # the store is away: try again at the next start
                continue
            gone.append(where.shown(location))
        return gone

    def clear_leftovers(self, older_than: float = 600.0, now: float | None = None
                        ) -> list[Path]:
        """Remove, at start, what no snapshot owns, whatever its age: folders a kernel killed
        while saving left (`partial_folders`), snapshot folders the index does not name (a
        save that finished after its request gave up, or a server stopped between the save
        and the index) and the markers of abandoned saves. None of them could be loaded. A
        `snapshot_dir` shared by several servers may hold another live server's save under
        way: what its noted saves wrote stays. A partial folder that names no snapshot (a
        restore's fetched copy) cannot be told apart so: it goes once untouched for
        `older_than` seconds (the timeout). Returns what was removed."""
        limit = (time.time() if now is None else now) - older_than
        gone = []
        for path in partial_folders(self.root):
            if _OWN.match(path.name):
                continue
            try:
                if path.stat().st_mtime > limit:
                    continue
            except OSError:
                continue
            shutil.rmtree(path, ignore_errors=True)
            gone.append(path)
        # what is here first: a save begun after this look is not seen, and one seen was
        # noted in `pending` before its kernel wrote anything
        found = [p for p in sorted(self.root.iterdir()) if _OWN.match(p.name)]
        with self._lock:
            known = {row[0] for row in self._db.execute("SELECT id FROM snapshots")}
        claimed = self._claimed()
        for path in found:
            match = _OWN.match(path.name)
            assert match is not None
            snapshot_id, rest = match.group(1), match.group(2) or ""
            whose = path.name == snapshot_id or (path.name.startswith(".") and (
                rest.endswith(PARTIAL) or rest == ABANDONED))
            if not whose or snapshot_id in claimed or path.name in known:
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    path.unlink()
            gone.append(path)
        with self._lock:
            rows = self._db.execute("SELECT id, location FROM pending").fetchall()
        for snapshot_id, location in rows:  # the local saves of gone instances
            if snapshot_id in claimed or where.is_remote(location):
                continue
            # its kernel may outlive its server and still be writing: marked, it keeps
            # nothing (the marker goes at the start after this one)
            with contextlib.suppress(OSError):
                os.close(os.open(self.abandoned_marker(snapshot_id),
                                 os.O_WRONLY | os.O_CREAT, 0o600))
            folder = where.local_path(location)
            if folder.parent != self.root:  # a local snapshot_store_url: not scanned above
                existed = folder.exists()
                with contextlib.suppress(Exception):
                    self._remove_files(snapshot_id, location)
                if existed:
                    gone.append(folder)
            with self._lock:
                self._db.execute("DELETE FROM pending WHERE id = ?", (snapshot_id,))
        return gone

    def add(self, record: SnapshotRecord) -> None:
        row = record.row()
        with self._lock:
            self._db.execute("DELETE FROM pending WHERE id = ?", (record.id,))
            self._db.execute(
                f"INSERT INTO snapshots ({', '.join(_COLUMNS)}) VALUES "
                f"({', '.join('?' for _ in _COLUMNS)})", [row[c] for c in _COLUMNS])

    def get(self, snapshot_id: str) -> SnapshotRecord | None:
        with self._lock:
            row = self._db.execute(f"SELECT {', '.join(_COLUMNS)} FROM snapshots WHERE id = ?",
                                   (snapshot_id,)).fetchone()
        return _record(row) if row else None

    def list(self, notebook: str | None = None) -> list[SnapshotRecord]:
        """Newest first; only `notebook`'s when given."""
        query = f"SELECT {', '.join(_COLUMNS)} FROM snapshots"
        args: tuple[Any, ...] = ()
        if notebook is not None:
            query += " WHERE notebook = ?"
            args = (notebook,)
        with self._lock:
            rows = self._db.execute(query + " ORDER BY created DESC, id", args).fetchall()
        return [_record(r) for r in rows]

    def mark_restored(self, snapshot_id: str, when: float) -> None:
        """Record its first restore (later ones change nothing)."""
        with self._lock:
            self._db.execute("UPDATE snapshots SET restored = ? WHERE id = ? AND restored IS "
                             "NULL", (when, snapshot_id))

    def remove(self, snapshot_id: str) -> bool:
        """Forget the snapshot, then delete its folder or its objects; False when the index
        has no such one. An object store that refuses is an error (the snapshot is then
        forgotten but noted pending, so its objects are removed at a later start)."""
        record = self.get(snapshot_id)
        if record is None:
            return False
        with self._lock:
            cur = self._db.execute("DELETE FROM snapshots WHERE id = ?", (snapshot_id,))
            if cur.rowcount and record.location is not None:  # in case removing fails
                self._db.execute("INSERT OR REPLACE INTO pending (id, location, started) "
                                 "VALUES (?, ?, 0)", (snapshot_id, record.location))
        if not cur.rowcount:
            return False
        self._delete(snapshot_id, self.location(record))
        return True

    def forget(self, snapshot_id: str) -> None:
        """Drop the snapshot from the index and leave its files: they were moved into
        another store's root (`layout.adopt`)."""
        with self._lock:
            self._db.execute("DELETE FROM snapshots WHERE id = ?", (snapshot_id,))

    def discard(self, snapshot_id: str, location: str | None = None) -> None:
        """Delete what a save the index does not name wrote (one refused after the kernel
        wrote)."""
        self._delete(snapshot_id, location or str(self.folder(snapshot_id)))

    def _delete(self, snapshot_id: str, location: str) -> None:
        """Remove the snapshot at `location` (and, in a folder of the store, what a kernel
        killed while writing it left beside it), then its note in `pending`."""
        self._remove_files(snapshot_id, location)
        with self._lock:
            self._db.execute("DELETE FROM pending WHERE id = ?", (snapshot_id,))

    def _remove_files(self, snapshot_id: str, location: str) -> None:
        """Remove the snapshot's folder or objects at `location`, and, in a folder, what a
        kernel writing it left beside it (its partial folders: their names hold its id,
        which no other save has)."""
        self.folder(snapshot_id)  # an id, nothing else
        if where.is_remote(location):
            where.remove(location)
            return
        path = where.local_path(location)
        shutil.rmtree(path, ignore_errors=True)
        for partial in partial_folders(path.parent):
            if partial.name.startswith(f".{snapshot_id}."):
                shutil.rmtree(partial, ignore_errors=True)

    def close(self) -> None:
        with self._lock:
            try:
                self._db.close()
            except sqlite3.Error:
                pass
        if self._alive is not None:  # this instance is gone: its lock and its file
            with contextlib.suppress(OSError):
                os.unlink(self.root / f".server-{self.instance}.lock")
            os.close(self._alive)
            self._alive = None


def _hold_lock(root: Path, instance: str) -> int | None:
    """Lock `instance`'s file in `root` for as long as this process lives (the kernel drops
    the lock when it ends, however it ends). Made under another name and renamed into place
    once locked, so no one ever sees it unlocked."""
    if fcntl is None:
        return None
    tmp = root / f".server-{instance}.lock.new"
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0),
                 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                raise
            # a filesystem without flock: the file alone says this instance may live (the
            # others cannot lock it either, so they leave its saves alone)
        os.replace(tmp, root / f".server-{instance}.lock")
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return fd


def _live_instances(root: Path) -> set[str]:
    """The instances whose lock in `root` is held (they live); the files of those gone are
    removed. Without file locks (not POSIX) every instance with a file is taken to live."""
    live: set[str] = set()
    try:
        names = [p.name for p in root.iterdir()]
    except OSError:
        return live
    for name in names:
        match = _LOCK.match(name)
        if match is None:
            continue
        if fcntl is None:
            live.add(match.group(1))
            continue
        try:
            fd = os.open(root / name, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held (that instance lives), or no flock here: it may live
            live.add(match.group(1))
        else:
            with contextlib.suppress(OSError):
                os.unlink(root / name)
        finally:
            os.close(fd)
    return live
