"""Each hub user's snapshots are theirs alone even where an admin points every user's ledger
at one folder (issue 44 item 4): a real JupyterHub, its real proxy and real single-user
servers whose ledgers share `ledgers/` (tests/support/hub.py's layout), each user with their
own token on their own server."""

from __future__ import annotations

import stat
from collections.abc import Iterator

import pytest

from jupyter_costguard.hibernate import mac
from tests.support.hub import Hub, HubUser, gpu_trace
from tests.support.hubsnapshots import costguard, hibernate_notebook, listed
from tests.support.notebooks import code, write_notebook

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
