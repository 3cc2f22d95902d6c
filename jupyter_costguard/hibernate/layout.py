"""Where a server keeps its snapshots, their index and the MAC key, so that each Hub user's
are theirs alone.

Outside a hub: `<snapshot root>/` (`snapshot_dir`, or `snapshots` in the data folder beside
the ledger) and `<data>/hibernate.key`, as always. On a hub the server's owner is known
(`JUPYTERHUB_USER`), and an admin may point several users' ledgers at one folder: so each
user gets a folder of their own, `<snapshot root>/users/<user>/` for the snapshots and their
index and `<data>/snapshots/users/<user>/hibernate.key` for the key (the same folder when
`snapshot_dir` is not set), every folder made 0700. Two users never share an index or a key,
whatever the admin shares. A user's snapshots left in the shared layout of an earlier version
are moved into their own folder at start (`adopt`), checked with the old key first.

Every function here blocks (disk, SQLite): they run at the server's start, before it serves.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_costguard.common.files import PRIVATE_DIR
from jupyter_costguard.hibernate import mac
from jupyter_costguard.hibernate.store import INDEX, SnapshotStore
from jupyter_costguard.kernel.hibernate import read_manifest

#: the longest folder name a user gets before it is a digest instead (file systems allow 255
#: bytes; a percent-encoded e-mail address can come near)
MAX_NAME = 100


@dataclass(frozen=True)
class SnapshotPaths:
    """The snapshot root (folders and `index.sqlite`) and the key file of one server;
    `legacy` is the shared (root, key) of earlier versions a hub user's snapshots may still
    be in (None outside a hub)."""

    root: Path
    key: Path
    legacy: tuple[Path, Path] | None = None


def user_folder(user: str) -> str:
    """`user` as one folder name: percent-encoded (so distinct users get distinct names and
    none is `.`, `..` or holds a `/`), a digest when that is too long."""
    name = urllib.parse.quote(user, safe="@+-_").replace(".", "%2E").replace("~", "%7E")
    if len(name) > MAX_NAME:
        return "sha256-" + hashlib.sha256(user.encode()).hexdigest()
    return name


def snapshot_paths(data: Path, snapshot_dir: str | None, user: str | None) -> SnapshotPaths:
    """Where the snapshots of a server whose ledger is in `data` go: the owner's own folders
    when `user` (the Hub user) is known, else the single-user layout."""
    base = Path(snapshot_dir) if snapshot_dir else data / "snapshots"
    if user is None:
        return SnapshotPaths(base, data / "hibernate.key")
    own = data / "snapshots" / "users" / user_folder(user)
    root = own if not snapshot_dir else base / "users" / user_folder(user)
    return SnapshotPaths(root, own / "hibernate.key", legacy=(base, data / "hibernate.key"))


def make_private(folder: Path, top: Path) -> None:
    """`folder` and every folder between `top` (an existing folder above it) and it, made
    and 0700: parents made by `mkdir(parents=True)` would get the umask's mode."""
    path = top
    for part in folder.relative_to(top).parts:
        path = path / part
        path.mkdir(mode=PRIVATE_DIR, exist_ok=True)
        os.chmod(path, PRIVATE_DIR)


def prepare(paths: SnapshotPaths, data: Path) -> None:
    """Make the owner's folders (0700) before the store and the key are opened in them: the
    key's below the data folder, the root's below the snapshot root's parent."""
    if paths.legacy is None:
        return
    data.mkdir(parents=True, exist_ok=True)
    make_private(paths.key.parent.absolute(), data.absolute())
    root, base = paths.root.absolute(), paths.legacy[0].absolute()
    if root != paths.key.parent.absolute():
        base.parent.mkdir(parents=True, exist_ok=True)
        make_private(root, base.parent)


def adopt(paths: SnapshotPaths, user: str, log: Any = None) -> list[str]:
    """Move `user`'s snapshots from the shared index of earlier versions (`paths.legacy`)
    into their own root, each MAC checked with the old key and signed with their own;
    one that does not check, or is in an object store (not reached at start), is left where
    it is and logged. Returns the ids moved. Safe to run again after a crash part way: a
    snapshot already moved is only forgotten in the old index."""
    if paths.legacy is None:
        return []
    old_root, old_key_file = paths.legacy
    if not (old_root / INDEX).is_file() or not old_key_file.is_file() \
            or old_root.resolve() == paths.root.resolve():
        return []
    old = SnapshotStore(old_root)
    moved: list[str] = []
    try:
        mine = [r for r in old.list() if r.user == user]
        if not mine:
            return []
        old_key, key = mac.load_key(old_key_file), mac.load_key(paths.key)
        store = SnapshotStore(paths.root)
        for record in mine:
            try:
                if store.get(record.id) is None:
                    if record.location is not None:
                        _say(log, "left snapshot %s of %s in the shared index: it is in an "
                                  "object store (%s); restore it from a server of an earlier "
                                  "version, or delete it there", record.id, user, record.store)
                        continue
                    src, dst = old.folder(record.id), store.folder(record.id)
                    manifest = read_manifest(src if src.is_dir() else dst)
                    bound = mac.binding(record.id, record.notebook, record.user,
                                        record.kernel_name)
                    if not mac.verify(old_key, bound, manifest, record.mac):
                        _say(log, "left snapshot %s of %s in the shared index: its MAC does "
                                  "not check", record.id, user)
                        continue
                    if src.is_dir():
                        os.replace(src, dst)
                    store.add(dataclasses.replace(record, mac=mac.sign(key, bound, manifest)))
                old.forget(record.id)
                moved.append(record.id)
            except Exception as e:  # one snapshot's trouble is not the others'
                _say(log, "left snapshot %s of %s in the shared index: %s", record.id, user,
                     e)
        store.close()
    finally:
        old.close()
    if moved:
        _say(log, "moved %d snapshot(s) of %s from the shared %s into %s", len(moved), user,
             old_root, paths.root)
    return moved


def _say(log: Any, msg: str, *args: Any) -> None:
    if log is not None:
        log.warning("costguard: " + msg, *args)
