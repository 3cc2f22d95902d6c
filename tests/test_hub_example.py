"""examples/jupyterhub/jupyterhub_config.py runs: a real hub from it (ports and the state
folder moved for the test), the logins the docs give, a user's GPU server with the example
notebooks in their own home and their own jobs, and the costguard service adding it up.

Run as root (as CI runs), each user is their own Unix account (a prefix of the test's own,
removed when the hub stops), and code in one user's kernel reads nothing of another's."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.attach import KERNEL_CLIENT
from tests.support.examplehub import (
    ADMIN_PASSWORD,
    EXAMPLE,
    NOTEBOOKS,
    USER_PASSWORD,
    ExampleHub,
)
from tests.support.hub import Hub, wait_for
from tests.support.hubsnapshots import costguard, hibernate_notebook, listed

pytestmark = pytest.mark.timeout(300)
EDITED = {"cells": [], "metadata": {"edited": "by alice"}, "nbformat": 4,
          "nbformat_minor": 5}


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExampleHub]:
    h = ExampleHub(tmp_path_factory.mktemp("example"), [], accounts=True)
    try:
        # alice edited her copy of explore.ipynb on an earlier spawn: her edit stays
        h.home("alice").mkdir(parents=True)
        (h.home("alice") / "explore.ipynb").write_text(json.dumps(EDITED))
        h.start()
        h.start_server("alice", {"profile": "gpu"})
        yield h
    finally:
        h.stop()


def test_the_readme_logins_work_and_a_wrong_password_does_not(hub: ExampleHub) -> None:
    for user, password in (("alice", USER_PASSWORD), ("carol", USER_PASSWORD),
                           ("admin", ADMIN_PASSWORD)):
        status, where = hub.form_login(user, password)
        assert status == 302 and "/hub/login" not in where, (user, status, where, hub.log())
    for user, password in (("admin", USER_PASSWORD), ("alice", "wrong-password")):
        status, where = hub.form_login(user, password)
        assert status == 403, (user, status, where)
    assert "admin_password is not" not in hub.log_path.read_text(errors="replace")


def test_the_example_hub_adds_up_a_users_simulated_gpu_server(hub: Hub) -> None:
    hub.wait_ready("alice")
    status = hub.server_status("alice")
    assert status["simulated"] is True and status["user"] == "alice"
    assert status["instance"]["instance_type"] == "p4d.24xlarge"
    admin = hub.token_for("admin")
    # metered from the Hub's record as soon as her server starts; that it plays a recorded
    # trace only her server's report can say, so wait for one to be taken (last_ok)
    rows = wait_for(lambda: (lambda s: s[1]["rows"] if s[0] == 200 and s[1]["rows"]
                             and s[1]["rows"][0]["spend"] > 0
                             and s[1]["rows"][0]["last_ok"] is not None else None)(
        hub.service("api/spend?by=group", admin)), 60, "alice's report on the page")
    assert [r["key"] for r in rows] == ["ml"]
    assert rows[0]["simulated"] is True
    # bob's budget (20 a month) is not spent: a GPU server starts
    status, me = hub.service("api/me", hub.token_for("bob"))
    assert status == 200 and me["budgets"][0]["budget"] == 20.0
    # alice runs no kernel: what her server spent is unattributed, and the chart says so
    points = wait_for(lambda: [p for s in hub.service("api/series?by=user&key=alice", admin)[
        1]["series"] for p in s["points"] if p["unattributed"] > 0], 60,
        "alice's unattributed spend in the series")
    assert all(p["unattributed"] <= p["spend"] + 1e-9 for p in points)


def test_a_cpu_server_reports_cpu_figures_and_the_admin_rate_is_the_counted_one(
        hub: ExampleHub) -> None:
    """Carol's CPU profile: her server has no GPU and runs on the profile's m5.xlarge (it
    replayed the p4d's GPU trace, and the page showed waste at 710% of its spend)."""
    hub.start_server("carol", {"profile": "cpu"})
    hub.wait_ready("carol")
    status = hub.server_status("carol")
    assert status["simulated"] is False and status["instance"]["instance_type"] == "m5.xlarge"
    assert status["rate_per_hour"] == 0.192
    admin = hub.token_for("admin")
    row = wait_for(lambda: next((r for r in hub.service("api/spend?by=server", admin)[1][
        "rows"] if r["user"] == "carol" and r["last_ok"] is not None and r["spend"] > 0),
        None), 60, "carol's report on the page")
    assert row["rate_per_hour"] == 0.192 and row["metered_rate_per_hour"] == 0.192
    assert row["waste"] <= row["spend"] and row["gpus_held"] == 0, row
    hub.stop_server("carol")


def test_each_user_has_their_own_home_with_the_notebooks_and_own_jobs(
        hub: ExampleHub, tmp_path: Path) -> None:
    hub.wait_ready("alice")
    home = hub.home("alice")
    assert sorted(p.name for p in home.glob("*.ipynb")) == sorted(NOTEBOOKS)
    # copied from examples/, except what she had edited
    for name in ("train.ipynb", "offload.ipynb"):
        assert (home / name).read_bytes() == (EXAMPLE.parents[1] / name).read_bytes()
    assert json.loads((home / "explore.ipynb").read_text()) == EDITED
    # her server serves them (its root is her home)
    status, _, body = hub.request("GET", "/user/alice/api/contents", hub.tester_token)
    assert status == 200
    assert set(NOTEBOOKS) <= {c["name"] for c in json.loads(body)["content"]}
    # her jobs live in her own folder, not in one every user shares
    sections = json.loads((hub.state / "conf" / "alice" / "gpu" / "jupyter_server_config.json"
                           ).read_text())
    config = {**sections["CostGuard"], **sections["Offload"]}
    jobs = {(user, profile): json.loads((hub.state / "conf" / user / profile /
                                         "jupyter_server_config.json").read_text()
                                        )["Offload"]["jobs_dir"]
            for user in ("alice", "bob", "carol", "admin") for profile in ("gpu", "cpu")}
    assert len(set(jobs.values())) == 4 and config["jobs_dir"] == jobs["alice", "gpu"]
    assert all(jobs[u, "gpu"] == jobs[u, "cpu"] for u, _ in jobs)
    # loopback only: no cloud metadata lookups, no background price download
    assert config["cloud_metadata"] is False and config["catalog_refresh_hours"] == 0
    wait_for(lambda: (Path(jobs["alice", "gpu"]) / "jobs.sqlite").exists(), 30,
             "alice's job store")
    # her ledger and jobs are in a folder of her own, which only she (the server's account)
    # may open; no folder is shared between users
    own = hub.state / "users" / "alice"
    assert Path(config["db_path"]).parent == own and Path(jobs["alice", "gpu"]).parent == own
    assert stat.S_IMODE(own.stat().st_mode) == 0o700
    assert stat.S_IMODE(own.parent.stat().st_mode) == (0o700 if hub.no_accounts else 0o711)
    assert not (hub.state / "ledgers").exists()


def test_the_zero_to_jupyterhub_values_are_what_costguard_reads(tmp_path: Path) -> None:
    import yaml

    from jupyter_costguard.hub.cull import policies_from
    from jupyter_costguard.hub.spawn import load_settings

    values = yaml.safe_load(EXAMPLE.with_name("values.yaml").read_text())
    files = values["hub"]["extraFiles"]
    config = tmp_path / "costguard_hub_config.py"
    config.write_text(files["costguard-hub-config"]["stringData"])
    settings = load_settings(config)
    assert policies_from(settings.cull_policies)[0].profiles == {"a100", "h100-spot"}
    # every profile of the list is one the site lists (none would be refused), the GPU ones
    # by their GPUs, and each says what it runs on
    slugs = {p["slug"] for p in values["singleuser"]["profileList"]}
    assert set(settings.site.profiles) == slugs
    default = next(p["slug"] for p in values["singleuser"]["profileList"] if p.get("default"))
    assert settings.site.default == default
    assert {s for s in slugs if settings.site.of(s).gpu} == {"a100", "h100-spot"}
    for profile in values["singleuser"]["profileList"]:
        env = profile["kubespawner_override"].get("environment", {})
        if settings.site.of(profile["slug"]).gpu:
            assert set(env) == {"COSTGUARD_INSTANCE_TYPE", "COSTGUARD_REGION",
                                "COSTGUARD_MARKET"}
            assert profile["kubespawner_override"]["extra_resource_limits"]
    # the culler's config names the same hub config, and both services have a command
    assert files["costguard-hub-config"]["mountPath"] in \
        files["costguard-culler-config"]["stringData"]
    assert {"costguard", "idle-culler"} <= set(values["hub"]["services"])
    # the service's role is the one the example hub (which the tests run) grants
    example_roles = EXAMPLE.read_text()
    for scope in ("list:users", "read:users:name", "read:users:groups", "read:servers",
                  "delete:servers", "access:services!service=costguard"):
        assert f'"{scope}"' in values["hub"]["extraConfig"]["costguard"]
        assert f'"{scope}"' in example_roles
    # and nothing that reaches into a user's server
    for scope in ("access:servers", "admin:servers"):
        assert f'"{scope}"' not in values["hub"]["extraConfig"]["costguard"]
        assert f'"{scope}"' not in example_roles
    # every server knows where to report
    assert values["singleuser"]["extraEnv"]["COSTGUARD_HUB_URL"].endswith(
        "/services/costguard/")



def test_a_user_neither_sees_nor_deletes_another_users_snapshots(hub: ExampleHub) -> None:
    """Issue 44: alice hibernates her notebook's kernel; bob, with his own token on his own
    server, lists no snapshot of hers and deleting hers by its id is a 404; hers stays, in
    her own folder. (Their servers shared one snapshot index and key: bob listed hers, with
    her variables' names, and deleted it, 204.)"""
    hub.wait_ready("alice")
    alice, bob = hub.token_for("alice"), hub.token_for("bob")
    sid = hibernate_notebook(hub, "alice", alice, "train.ipynb")["id"]
    assert listed(hub, "alice", alice) == [sid]

    hub.start_server("bob", {"profile": "cpu"})
    hub.wait_ready("bob")
    try:
        assert listed(hub, "bob", bob) == []
        status, doc = costguard(hub, "DELETE", "bob", f"snapshots/{sid}", bob)
        assert status == 404 and doc["message"] == f"no snapshot {sid}", (status, doc)
        # nor does the Hub let him at alice's server
        status, _ = costguard(hub, "DELETE", "alice", f"snapshots/{sid}", bob)
        assert status in (403, 404), status
    finally:
        hub.stop_server("bob")
    assert listed(hub, "alice", alice) == [sid]
    # in her own data folder, private; bob's holds none of it
    own = hub.state / "users" / "alice"
    [folder] = [p for p in own.rglob(sid) if p.is_dir()]
    assert stat.S_IMODE(folder.parent.stat().st_mode) == 0o700
    assert not any(p.name == sid for p in (hub.state / "users" / "bob").rglob("*"))
    status, _ = costguard(hub, "DELETE", "alice", f"snapshots/{sid}", alice)
    assert status == 204 and not folder.exists()


#: run in alice's kernel: each path opened (a folder listed, a file read) as her server's
#: account; one JSON line of {path: "read" or the error's class name}, and her uid
PROBE = """
import json, os, sys
seen = {}
for path in %r:
    try:
        if os.path.isdir(path):
            os.listdir(path)
        else:
            with open(path, "rb") as f:
                f.read(1)
        seen[path] = "read"
    except OSError as e:
        seen[path] = type(e).__name__
print(json.dumps({"uid": os.getuid(), "seen": seen}))
"""


def servers(hub: ExampleHub) -> dict[str, tuple[int, int]]:
    """The process id and uid of each running single-user server of this hub, by hub
    user."""
    import psutil

    found: dict[str, tuple[int, int]] = {}
    for proc in psutil.process_iter(["cmdline", "uids"]):
        try:
            cmd = proc.info["cmdline"] or []
            if not any(c.endswith("jupyterhub-singleuser") for c in cmd):
                continue
            env = proc.environ()
        except psutil.Error:
            continue
        if env.get("COSTGUARD_DEMO_STATE", "") == str(hub.state) or str(hub.state) in \
                env.get("JUPYTER_CONFIG_DIR", ""):
            found[env["JUPYTERHUB_USER"]] = (proc.pid, proc.info["uids"].real)
    return found


def test_each_user_is_their_own_unix_account_and_reads_nothing_of_another(
        hub: ExampleHub) -> None:
    """Issue 46: alice's and bob's servers run as their own accounts (not root), and code in
    alice's kernel is refused bob's home, his ledger, his snapshots and key, his server's
    token (its environment) and the Hub's and the service's databases, while it reads her own.
    (Every server ran as root: any of them read all of these.)"""
    if hub.no_accounts:
        pytest.skip(f"no account per user here: {hub.no_accounts}")
    hub.wait_ready("alice")
    # bob left a link where a notebook of the example goes, to a file of root's: the spawn
    # hook (root) copies the notebooks in without following it
    planted = hub.state / "hub" / "planted"
    link = hub.home("bob") / "train.ipynb"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.unlink(missing_ok=True)
    link.symlink_to(planted)
    hub.start_server("bob", {"profile": "cpu"})
    try:
        hub.wait_ready("bob")
        assert link.is_symlink() and not planted.exists()
        alice, bob = hub.account("alice"), hub.account("bob")
        running = wait_for(lambda: (lambda u: u if {"alice", "bob"} <= set(u) else None)(
            servers(hub)), 30, "both servers' processes")
        assert running["alice"][1] == alice.pw_uid and running["bob"][1] == bob.pw_uid, running
        assert 0 not in (alice.pw_uid, bob.pw_uid)
        state = hub.state
        bob_data = state / "users" / "bob"
        bob_snapshots = bob_data / "snapshots" / "users" / "bob"
        wait_for(lambda: (bob_snapshots / "hibernate.key").exists()
                 and (bob_data / "ledger.sqlite").exists(), 60,
                 "bob's ledger, snapshot folder and key")
        bob_pid = running["bob"][0]
        theirs = [state / "home" / "bob", state / "home" / "bob" / "offload.ipynb",
                  bob_data, bob_data / "ledger.sqlite", bob_snapshots,
                  bob_snapshots / "hibernate.key",
                  Path(f"/proc/{bob_pid}/environ"),
                  hub.service_db, state / "hub" / "jupyterhub.sqlite",
                  state / "hub" / "jupyterhub_cookie_secret",
                  state / "users", state / "home", state / "conf" / "bob"]
        assert all(p.exists() for p in theirs), [p for p in theirs if not p.exists()]
        hers = [state / "users" / "alice" / "ledger.sqlite", hub.home("alice")]
        # bob's token is in his server's environment (root reads it; alice may not)
        assert "JUPYTERHUB_API_TOKEN=" in Path(f"/proc/{bob_pid}/environ").read_text()

        kernel = hub.start_kernel("alice")
        [connection] = list(hub.home("alice").rglob(f"kernel-{kernel}.json"))
        out = subprocess.run(
            [sys.executable, "-c", KERNEL_CLIENT, str(connection),
             PROBE % [str(p) for p in theirs + hers]],
            capture_output=True, text=True, timeout=120)
        hub.request("DELETE", f"/user/alice/api/kernels/{kernel}", hub.tester_token)
        doc = json.loads(out.stdout.splitlines()[0])
        assert doc["uid"] == alice.pw_uid, doc
        assert {p: doc["seen"][str(p)] for p in theirs} == {
            p: "PermissionError" for p in theirs}, doc
        assert all(doc["seen"][str(p)] == "read" for p in hers), doc
        # each home and data folder is its own account's, 0700
        for user, account in (("alice", alice), ("bob", bob)):
            for own in (hub.home(user), state / "users" / user):
                st = own.stat()
                assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (account.pw_uid, 0o700), own
        # his snapshots' folder and key (hibernate/layout.py) are his account's, 0700
        for own in (bob_snapshots, bob_snapshots / "hibernate.key"):
            st = own.stat()
            assert st.st_uid == bob.pw_uid and not st.st_mode & 0o077, own
        for private in (state / "hub", state / "service"):
            st = private.stat()
            assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o700), private
        # her JupyterLab keeps its workspace in her home (the configuration folder is root's)
        status, _, body = hub.request(
            "PUT", "/user/alice/lab/api/workspaces/probe", hub.tester_token,
            {"data": {}, "metadata": {"id": "probe"}})
        assert status == 204, (status, body)
        [saved] = list((hub.home("alice") / ".jupyter" / "lab" / "workspaces").iterdir())
        assert saved.stat().st_uid == alice.pw_uid
    finally:
        hub.stop_server("bob")
