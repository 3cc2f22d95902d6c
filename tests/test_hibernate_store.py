"""Hibernate's server-side parts without a server (issue 37 item 6): the MAC key is private and
made once, the MAC binds a manifest to whose snapshot it is, and what no snapshot owns is
cleared at start while indexed snapshots stay."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_costguard.hibernate import mac
from jupyter_costguard.hibernate.store import SnapshotRecord, SnapshotStore, new_id
from jupyter_costguard.kernel.hibernate import Manifest


def manifest(created: float = 1.0) -> Manifest:
    return Manifest(entries=[], skipped=[], created=created, python="3.11", modules={})


def test_the_key_is_made_once_private_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "data" / "hibernate.key"
    key = mac.load_key(path)
    assert len(key) == mac.KEY_BYTES and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert mac.load_key(path) == key


def test_a_file_that_is_not_a_key_is_refused_not_replaced(tmp_path: Path) -> None:
    path = tmp_path / "hibernate.key"
    path.write_bytes(b"short")
    with pytest.raises(ValueError, match="not a costguard hibernate key"):
        mac.load_key(path)
    assert path.read_bytes() == b"short"


def test_the_mac_binds_the_manifest_to_its_snapshot_notebook_and_owner(tmp_path: Path) -> None:
    key = mac.load_key(tmp_path / "k")
    bound = mac.binding("a" * 32, "n.ipynb", "ann", "python3")
    tag = mac.sign(key, bound, manifest())
    assert mac.verify(key, bound, manifest(), tag)
    assert not mac.verify(key, bound, manifest(created=2.0), tag)
    for change in ({"id": "b" * 32}, {"notebook": "other.ipynb"}, {"user": "bob"}):
        assert not mac.verify(key, {**bound, **change}, manifest(), tag)
    assert not mac.verify(os.urandom(32), bound, manifest(), tag)


def test_leftovers_are_cleared_at_start_whatever_their_age_and_indexed_snapshots_stay(
        tmp_path: Path) -> None:
    root = tmp_path / "snapshots"
    store = SnapshotStore(root)
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    kept = new_id()
    store.add(SnapshotRecord(id=kept, notebook="n.ipynb", created=1.0, bytes=0, saved=["x"],
                             skipped=[], kernel_name="python3", user=None, gpus_held=0,
                             digest="d", mac="m"))
    store.folder(kept).mkdir()
    cut = new_id()  # a save of this (now stopped) server: noted, then cut off
    store.begin(cut, store.new_location(cut))
    orphan, partial, other = root / new_id(), root / f".{cut}.x1.partial", root / "notes"
    fetched = root / ".fetch.x2.partial"  # a restore's copy: whose, it does not say
    for folder in (orphan, partial, other, fetched):
        folder.mkdir()
    store.close()

    again = SnapshotStore(root)
    # just written, and still removed: no snapshot owns them (issue 44: they stayed until a
    # start 10 minutes later)
    now = fetched.stat().st_mtime
    assert sorted(again.clear_leftovers(older_than=60, now=now + 30)) == \
        sorted([orphan, partial])
    assert fetched.is_dir()  # another server's restore may be under way: only an old one goes
    # (and the marker that told the cut-off save's kernel to keep nothing goes at a start
    # after the one that made it)
    assert again.clear_leftovers(older_than=60, now=now + 61) == [
        fetched, Path(again.abandoned_marker(cut))]
    assert again.folder(kept).is_dir() and other.is_dir()
    assert [r.id for r in again.list()] == [kept] and again.list("elsewhere") == []
    assert again.remove(kept) and not again.folder(kept).exists() and not again.remove(kept)
    with pytest.raises(ValueError):
        again.folder("../x")


_KILLED_MID_SAVE = """
import os, signal, sys
from pathlib import Path
from jupyter_costguard.hibernate.store import SnapshotStore
store = SnapshotStore(Path(sys.argv[1]))
store.begin(sys.argv[2], store.new_location(sys.argv[2]))
partial = Path(sys.argv[1]) / f".{sys.argv[2]}.k1.partial"
partial.mkdir()
(partial / "0000.pkl").write_bytes(b"x" * 100_000)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_server_killed_mid_save_leaves_nothing_after_the_next_start_and_a_live_servers_save_stays(
        tmp_path: Path) -> None:
    """Servers sharing a snapshot folder: what a killed one's save left is removed at the
    next start, at any age; the save a live one has under way is left alone (its instance
    holds its lock)."""
    root = tmp_path / "snapshots"
    live = SnapshotStore(root)  # another server, alive, saving now
    theirs = new_id()
    live.begin(theirs, live.new_location(theirs))
    in_flight = root / f".{theirs}.k2.partial"
    in_flight.mkdir()
    killed = new_id()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH"))
        if p)}
    done = subprocess.run([sys.executable, "-c", _KILLED_MID_SAVE, str(root), killed],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == -9, done.stderr
    assert (root / f".{killed}.k1.partial").is_dir()

    elsewhere = SnapshotStore(root, str(tmp_path / "store"))  # a local snapshot_store_url
    cut = new_id()
    elsewhere.begin(cut, elsewhere.new_location(cut))
    Path(elsewhere.new_location(cut)).mkdir(parents=True)
    elsewhere.close()

    again = SnapshotStore(root)
    assert again.clear_leftovers() == [root / f".{killed}.k1.partial",
                                       Path(elsewhere.new_location(cut))]
    assert not Path(elsewhere.new_location(cut)).exists()
    assert in_flight.is_dir()
    # its kernel, should it outlive the server and finish, is told to keep nothing
    assert Path(again.abandoned_marker(killed)).exists()
    assert not Path(again.abandoned_marker(theirs)).exists()
    # the killed server's lock file is gone too; the live one's and ours stay
    locks = sorted(p.name for p in root.iterdir() if p.name.startswith(".server-"))
    assert locks == sorted([f".server-{live.instance}.lock", f".server-{again.instance}.lock"])
    live.close()
    again.close()
