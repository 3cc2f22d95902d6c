"""Hibernate's server-side parts without a server (issue 37 item 6): the MAC key is private and
made once, the MAC binds a manifest to whose snapshot it is, and what no snapshot owns is
cleared at start while indexed snapshots stay."""

from __future__ import annotations

import os
import stat
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


def test_leftovers_are_cleared_at_start_and_indexed_snapshots_stay(tmp_path: Path) -> None:
    root = tmp_path / "snapshots"
    store = SnapshotStore(root)
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    kept = new_id()
    store.add(SnapshotRecord(id=kept, notebook="n.ipynb", created=1.0, bytes=0, saved=["x"],
                             skipped=[], kernel_name="python3", user=None, gpus_held=0,
                             digest="d", mac="m"))
    store.folder(kept).mkdir()
    orphan, partial, other = root / new_id(), root / ".x.partial", root / "notes"
    for folder in (orphan, partial, other):
        folder.mkdir()
    store.close()

    again = SnapshotStore(root)
    now = orphan.stat().st_mtime
    # another server's save may be under way in a shared folder: only old leftovers go
    assert again.clear_leftovers(older_than=60, now=now + 30) == []
    assert sorted(again.clear_leftovers(older_than=60, now=now + 61)) == \
        sorted([orphan, partial])
    assert again.folder(kept).is_dir() and other.is_dir()
    assert [r.id for r in again.list()] == [kept] and again.list("elsewhere") == []
    assert again.remove(kept) and not again.folder(kept).exists() and not again.remove(kept)
    with pytest.raises(ValueError):
        again.folder("../x")
