"""Each hub user's snapshots are theirs alone even where an admin points every user's ledger
at one folder (issue 44 item 4): a real JupyterHub, its real proxy and real single-user
servers whose ledgers share `ledgers/` (tests/support/hub.py's layout), each user with their
own token on their own server; and a hub user's snapshots in the shared layout of earlier
versions, moved into their own folder when their server starts."""

from __future__ import annotations

import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_costguard.hibernate import mac
from jupyter_costguard.hibernate.store import SnapshotRecord, SnapshotStore, new_id
from jupyter_costguard.kernel.hibernate import Manifest, manifest_digest, read_manifest
from jupyter_costguard.kernel.hibernate.records import MANIFEST
from tests.support.hub import Hub, HubUser, gpu_trace
from tests.support.hubsnapshots import costguard, hibernate_notebook, listed
from tests.support.notebooks import code, write_notebook
from tests.support.server_proc import ServerProcess

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    d = tmp_path_factory.mktemp("hubsnap")
    h = Hub(d / "hub", [HubUser(name, gpu_trace(d / f"{name}.json", 0), ["team"])
                        for name in ("alice", "bob")])
    try:
        h.start()
        for name in ("alice", "bob"):
            h.start_server(name)
        for name in ("alice", "bob"):
            h.wait_ready(name)
        yield h
    finally:
        h.stop()


def test_a_shared_ledger_folder_shares_no_snapshot_index_or_key(hub: Hub) -> None:
    alice, bob = hub.token_for("alice"), hub.token_for("bob")
    for user in ("alice", "bob"):  # each server's root is its user's home
        write_notebook(hub.dir / "home" / user, "model.ipynb", [code("a", "x = 1")])
    hers = hibernate_notebook(hub, "alice", alice, "model.ipynb")["id"]
    his = hibernate_notebook(hub, "bob", bob, "model.ipynb")["id"]
    assert listed(hub, "alice", alice) == [hers] and listed(hub, "bob", bob) == [his]
    # bob, on his own server, cannot delete hers: 404 as an id never made
    status, doc = costguard(hub, "DELETE", "bob", f"snapshots/{hers}", bob)
    assert status == 404 and doc["message"] == f"no snapshot {hers}", (status, doc)
    assert listed(hub, "alice", alice) == [hers]
    # each user's own index and key, in private folders of the shared one
    users = hub.dir / "ledgers" / "snapshots" / "users"
    for user, sid in (("alice", hers), ("bob", his)):
        own = users / user
        assert (own / sid).is_dir() and (own / "index.sqlite").is_file()
        assert stat.S_IMODE(own.stat().st_mode) == 0o700
        assert stat.S_IMODE((own / "hibernate.key").stat().st_mode) == 0o600
    assert mac.load_key(users / "alice" / "hibernate.key") != \
        mac.load_key(users / "bob" / "hibernate.key")
    assert stat.S_IMODE(users.stat().st_mode) == 0o700
    assert not (hub.dir / "ledgers" / "snapshots" / "index.sqlite").exists()
    assert not (hub.dir / "ledgers" / "hibernate.key").exists()


def test_a_users_snapshots_in_the_shared_layout_are_theirs_after_an_upgrade(
        tmp_path: Path) -> None:
    """A hub server of an earlier version kept every user's snapshots in `snapshots/` beside
    the ledger with one key: alice's server, started now, lists hers (moved into her own
    folder and signed with her own key) and none of bob's, which stay where they were."""
    data = tmp_path / "ledgers"
    old_key = mac.load_key(data / "hibernate.key")
    shared = SnapshotStore(data / "snapshots")
    ids = {}
    for user in ("alice", "bob"):
        sid = ids[user] = new_id()
        shared.folder(sid).mkdir()
        made = Manifest(entries=[], skipped=[], created=time.time(), python="3.11",
                        modules={})
        (shared.folder(sid) / MANIFEST).write_text(made.to_json())
        made = read_manifest(shared.folder(sid))
        shared.add(SnapshotRecord(
            id=sid, notebook="n.ipynb", created=made.created, bytes=0, saved=[], skipped=[],
            kernel_name="python3", user=user, gpus_held=0, digest=manifest_digest(made),
            mac=mac.sign(old_key, mac.binding(sid, "n.ipynb", user, "python3"), made)))
    shared.close()
    server = ServerProcess(tmp_path / "s", {
        "db_path": str(data / "alice.sqlite"), "Offload.jobs_dir": str(tmp_path / "jobs"),
        "LocalBackend.warm_kernels": 0, "catalog_refresh_hours": 0},
        env={"JUPYTERHUB_USER": "alice", "JUPYTERHUB_SERVER_NAME": ""}).start()
    try:
        doc = server.get("costguard/api/snapshots")
        code_, gone = server.request(f"costguard/api/snapshots/{ids['bob']}", "DELETE")
    finally:
        server.stop()
    assert [s["id"] for s in doc["snapshots"]] == [ids["alice"]]
    assert code_ == 404, gone
    own = data / "snapshots" / "users" / "alice"
    assert (own / ids["alice"] / MANIFEST).is_file()
    assert (data / "snapshots" / ids["bob"] / MANIFEST).is_file()
    left = SnapshotStore(data / "snapshots")
    assert [r.id for r in left.list()] == [ids["bob"]]
    left.close()
