"""Hibernate's server-side parts without a server (issue 37 item 6): the MAC key is private and
made once, the MAC binds a manifest to whose snapshot it is, and what no snapshot owns is
cleared at start while indexed snapshots stay."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from dataclasses import replace as dataclasses_replace
from pathlib import Path

import pytest

from jupyter_costguard.hibernate import mac
from jupyter_costguard.hibernate.store import SnapshotRecord, SnapshotStore, new_id
from jupyter_costguard.kernel.hibernate import Manifest
from jupyter_costguard.kernel.hibernate.records import MANIFEST


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


def _record(snapshot_id: str, user: str | None, created: float = 1.0) -> SnapshotRecord:
    return SnapshotRecord(id=snapshot_id, notebook="n.ipynb", created=created, bytes=7,
                          saved=["secret_name"], skipped=[], kernel_name="python3", user=user,
                          gpus_held=1, digest="d", mac="m", rate_per_hour_held=3.6)


def test_a_service_lists_counts_and_deletes_only_its_owners_snapshots(tmp_path: Path) -> None:
    """An index several users' servers share (an admin pointed their ledgers at one folder):
    alice's server shows, counts and deletes only hers; bob's and one made outside a hub
    are 404 to her, as an id never made, and stay."""
    import asyncio

    from jupyter_costguard.hibernate.errors import HibernateError
    from jupyter_costguard.hibernate.service import HibernateService
    from jupyter_costguard.hibernate.settings import Hibernate

    root = tmp_path / "snapshots"
    shared = SnapshotStore(root)
    hers, his, nobodys = new_id(), new_id(), new_id()
    for sid, user in ((hers, "alice"), (his, "bob"), (nobodys, None)):
        shared.add(_record(sid, user))
        shared.folder(sid).mkdir()
    shared.close()

    service = HibernateService(root, tmp_path / "hibernate.key", None, None,
                               Hibernate().service_settings(90), owner="alice")

    async def scenario() -> None:
        listed = await service.listing()
        assert [d["id"] for d in listed["snapshots"]] == [hers]
        assert [d["id"] for d in (await service.listing("n.ipynb"))["snapshots"]] == [hers]
        for sid in (his, nobodys):
            for call in (service.get(sid), service.delete(sid)):
                with pytest.raises(HibernateError) as e:
                    await call
                assert e.value.status == 404 and str(e.value) == f"no snapshot {sid}"
        assert (await service.get(hers)).user == "alice"
        await service.delete(hers)
        assert (await service.listing())["snapshots"] == []

    def counted() -> tuple[float, float]:
        got = {m.name: m.samples[0].value for m in service.metrics()
               if m.name in ("costguard_snapshots", "costguard_snapshot_bytes")}
        return got["costguard_snapshots"], got["costguard_snapshot_bytes"]

    try:
        assert counted() == (1, 7)  # bob's and the other one are not hers to count
        asyncio.run(scenario())
        assert counted() == (0, 0)
    finally:
        service.close()
    kept = SnapshotStore(root)
    assert sorted(r.id for r in kept.list()) == sorted([his, nobodys])
    assert kept.folder(his).is_dir() and kept.folder(nobodys).is_dir()
    assert not kept.folder(hers).exists()
    kept.close()


def test_each_hub_user_gets_their_own_snapshot_folder_and_key(tmp_path: Path) -> None:
    """One data folder (an admin pointed every user's ledger at it): each user's root and
    key are their own, private, and no user name can climb out of its folder; a server
    outside a hub keeps the single-user layout."""
    from jupyter_costguard.hibernate.layout import prepare, snapshot_paths, user_folder

    data = tmp_path / "ledgers"
    single = snapshot_paths(data, "", None)
    assert (single.root, single.key, single.legacy) == \
        (data / "snapshots", data / "hibernate.key", None)
    names = ["alice", "bob", "..", ".", "a/b", "A.b", "a%2Eb", "x" * 300, "ünï@x.org"]
    seen = {user_folder(n) for n in names}
    assert len(seen) == len(names)
    assert all("/" not in f and not f.startswith(".") and len(f) <= 100 for f in seen)
    alice, bob = (snapshot_paths(data, "", u) for u in ("alice", "bob"))
    assert alice.root == data / "snapshots" / "users" / "alice" == alice.key.parent
    assert len({alice.root, bob.root}) == 2 and alice.key != bob.key
    for paths in (alice, bob):
        prepare(paths, data)
        mac.load_key(paths.key)
        SnapshotStore(paths.root).close()
    assert mac.load_key(alice.key) != mac.load_key(bob.key)
    for folder in (data / "snapshots", data / "snapshots" / "users", alice.root, bob.root):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    # snapshots elsewhere (snapshot_dir): the root there, per user; the key stays in data
    away = snapshot_paths(data, str(tmp_path / "away"), "alice")
    prepare(away, data)
    assert away.root == tmp_path / "away" / "users" / "alice"
    assert away.key == alice.key
    for folder in (tmp_path / "away", tmp_path / "away" / "users", away.root):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder


def test_a_users_snapshots_in_the_shared_layout_are_moved_into_their_own(
        tmp_path: Path) -> None:
    """Snapshots an earlier version kept in the one index every user's server shared: at
    start, alice's server moves hers (checked with the old key, signed with her own) and
    leaves bob's and any that does not check; run again after a crash, it finishes."""
    from jupyter_costguard.hibernate.layout import adopt, prepare, snapshot_paths
    from jupyter_costguard.kernel.hibernate import read_manifest

    data = tmp_path / "ledgers"
    single = snapshot_paths(data, "", None)
    old_key = mac.load_key(single.key)
    shared = SnapshotStore(single.root)
    ids = {}
    for name, user in (("hers", "alice"), ("his", "bob"), ("forged", "alice")):
        sid = ids[name] = new_id()
        folder = shared.folder(sid)
        folder.mkdir()
        (folder / MANIFEST).write_text(manifest().to_json())
        made = read_manifest(folder)
        bound = mac.binding(sid, "n.ipynb", user, "python3")
        tag = mac.sign(old_key if name != "forged" else os.urandom(32), bound, made)
        shared.add(dataclasses_replace(_record(sid, user), mac=tag))
    shared.close()

    alice = snapshot_paths(data, "", "alice")
    prepare(alice, data)
    assert adopt(alice, "alice") == [ids["hers"]]
    mine = SnapshotStore(alice.root)
    [record] = mine.list()
    assert record.id == ids["hers"] and mine.folder(record.id).is_dir()
    manifest_now = read_manifest(mine.folder(record.id))
    bound = mac.binding(record.id, record.notebook, "alice", record.kernel_name)
    assert mac.verify(mac.load_key(alice.key), bound, manifest_now, record.mac)
    assert not mac.verify(old_key, bound, manifest_now, record.mac)
    mine.close()
    left = SnapshotStore(single.root)
    assert sorted(r.id for r in left.list()) == sorted([ids["his"], ids["forged"]])
    assert left.folder(ids["his"]).is_dir() and not left.folder(ids["hers"]).exists()
    # a crash between moving the folder and indexing it: the next start finishes the move
    sid = new_id()
    left.folder(sid).mkdir()
    (left.folder(sid) / MANIFEST).write_text(manifest().to_json())
    made = read_manifest(left.folder(sid))
    left.add(dataclasses_replace(_record(sid, "alice"), mac=mac.sign(
        old_key, mac.binding(sid, "n.ipynb", "alice", "python3"), made)))
    os.replace(left.folder(sid), alice.root / sid)
    left.close()
    assert adopt(alice, "alice") == [sid]
    again = SnapshotStore(alice.root)
    assert sorted(r.id for r in again.list()) == sorted([ids["hers"], sid])
    again.close()
    assert adopt(alice, "alice") == []

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


def test_waste_removed_counts_a_snapshot_until_its_restore_and_never_past_the_horizon() -> None:
    """The waste a hibernation removed is the rate its kernel held times the time it stayed
    hibernated, until its first restore; one never restored (abandoned, or its user would
    have shut the kernel down anyway) stops counting at the horizon instead of for ever."""
    from dataclasses import replace

    from jupyter_costguard.hibernate import store

    horizon = 12 * 3600.0  # the documented figure (docs/user/hibernate.md)
    made = 1000.0
    snap = _record(new_id(), "alice", created=made)  # 3.6 an hour: 0.001 a second
    assert snap.waste_avoided(made + 600) == pytest.approx(0.6)
    restored = replace(snap, restored=made + 600)
    assert restored.waste_avoided(made + 10 * 86400) == pytest.approx(0.6)
    # abandoned: a day, a week, a month later it still claims only the horizon's worth
    for later in (86400.0, 7 * 86400.0, 30 * 86400.0):
        assert snap.waste_avoided(made + later) == pytest.approx(horizon / 1000)
    assert getattr(store, "WASTE_REMOVED_HORIZON_SECONDS", None) == horizon
    # the time it was hibernated is still shown as it is; only the money is capped
    assert snap.hibernated_seconds(made + 86400) == 86400
    assert replace(snap, rate_per_hour_held=None).waste_avoided(made + 600) == 0
