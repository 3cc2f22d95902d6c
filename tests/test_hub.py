"""The hub service against a real JupyterHub, its real proxy and real single-user servers with
costguard (three users in two groups, each playing their own GPU trace), each pushing its
report with its own token: totals add up to the servers' own figures, a silent server is
marked stale without holding up the rest, restarts count nothing twice, and nobody reads what
they may not."""

from __future__ import annotations

import csv
import io
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_costguard.hub import report
from tests.support.hub import Hub, HubUser, gpu_trace, wait_for

pytestmark = pytest.mark.timeout(600)

USERS = {"alice": (["ml"], 36.0, 90), "bob": (["ml", "research"], 12.0, 0),
         "carol": (["research"], 3.0, 40)}


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    d = tmp_path_factory.mktemp("hub")
    users = [HubUser(name, gpu_trace(d / f"{name}.json", util), groups, rate)
             for name, (groups, rate, util) in USERS.items()]
    users.append(HubUser("admin", gpu_trace(d / "admin.json", 0), []))
    h = Hub(d / "hub", users).start()
    try:
        for name in USERS:
            h.start_server(name)
        for name in USERS:
            h.wait_ready(name)
        for name, (_, _, util) in USERS.items():
            if util:  # the kernel that holds GPU 0 in the trace; it runs nothing
                h.start_kernel(name)
        h.admin_token = h.token_for("admin")  # type: ignore[attr-defined]
        yield h
    finally:
        h.stop()


def spend_rows(hub: Hub, by: str = "server", **query: str) -> dict[str, dict[str, Any]]:
    q = "&".join(f"{k}={v}" for k, v in {"by": by, **query}.items())
    status, doc = hub.service(f"api/spend?{q}", hub.admin_token)  # type: ignore[attr-defined]
    assert status == 200, doc
    return {r["key"]: r for r in doc["rows"]}


def snapshot(hub: Hub) -> tuple[dict[str, Any], ...]:
    """By server, user and group, of one state of the store: the reads of one poll, with no
    report taken between them. Servers report every second, between polls too, so reads of
    one poll straddled a report now and then (a user's row one report ahead of the server
    row read just before it); the server rows are read again after the others, and the
    reads are taken only if nothing moved in between."""
    def read(by: str) -> dict[str, Any]:
        status, doc = hub.service(f"api/spend?by={by}",
                                  hub.admin_token)  # type: ignore[attr-defined]
        assert status == 200, doc
        return dict(doc)

    def one() -> tuple[dict[str, Any], ...] | None:
        docs = [read(by) for by in ("server", "user", "group", "server")]
        if len({d["poll"]["time"] for d in docs}) != 1 or docs[0]["rows"] != docs[3]["rows"]:
            return None
        return tuple({r["key"]: r for r in d["rows"]} for d in docs[:3])
    return wait_for(one, 30, "three reads of one state")


def polled(hub: Hub) -> dict[str, dict[str, Any]]:
    return wait_for(lambda: (lambda rows: rows if all(
        f"{u}/" in rows and rows[f"{u}/"]["spend"] > 0 and rows[f"{u}/"]["state"] == "ok"
        for u in USERS) else None)(spend_rows(hub)), 60, "every server polled")


def test_totals_per_user_and_group_add_up_to_the_servers_own_figures(hub: Hub) -> None:
    polled(hub)
    # each server's own status, read at the sample the service last read (sampled every
    # 0.5 s, polled every 1 s: try until the two are of the same sample)
    own: dict[str, float] = {}
    for user in USERS:
        def same_sample(user: str = user) -> float | None:
            doc = hub.server_status(user)
            row = spend_rows(hub)[f"{user}/"]
            return doc["totals"]["spend"] if row["last_ok"] == doc["time"] else None
        own[user] = wait_for(same_sample, 30, f"{user}'s sample")
    # each server against its own moment, then the aggregation over reads of one poll
    servers, users, groups = snapshot(hub)
    for user in USERS:
        assert servers[f"{user}/"]["spend"] >= own[user] > 0
        assert users[user]["spend"] == pytest.approx(servers[f"{user}/"]["spend"], abs=1e-6)
        assert users[user]["rate_per_hour"] > 0
    for group in ("ml", "research"):
        members = [u for u, (gs, _, _) in USERS.items() if group in gs]
        assert groups[group]["spend"] == pytest.approx(
            sum(users[u]["spend"] for u in members), abs=1e-6)
    # conservation across the hub: the users' totals are the servers' totals, and the
    # hourly record the periods use holds the same money
    assert sum(r["spend"] for r in users.values()) == pytest.approx(
        sum(r["spend"] for r in servers.values()), abs=1e-6)
    hourly = spend_rows(hub, "user", since="0")
    for user in USERS:
        assert hourly[user]["spend"] == pytest.approx(users[user]["spend"], rel=1e-6,
                                                      abs=1e-6)
    # a pricier server costs more: alice 36/h, bob 12/h, carol 3/h
    assert users["alice"]["spend"] > users["bob"]["spend"] > users["carol"]["spend"]
    # alice's kernel holds a busy GPU once it is up and sampled (on a loaded machine, after
    # the figures above were first reported); bob's never does
    busy = wait_for(lambda: (lambda r: r if r["alice"]["gpus_busy"] == 1 else None)(
        spend_rows(hub, "user")), 30, "alice's busy GPU reported")
    assert busy["bob"]["gpus_busy"] == 0


def test_exact_to_the_sample_when_the_service_read_it(hub: Hub) -> None:
    """The service keeps exactly what the server said, not an estimate."""
    polled(hub)

    def same() -> tuple[float, float] | None:
        doc = hub.server_status("bob")
        row = spend_rows(hub)["bob/"]
        return (row["spend"], doc["totals"]["spend"]) if row["last_ok"] == doc["time"] \
            else None
    mine, theirs = wait_for(same, 30, "the same sample")
    assert mine == pytest.approx(theirs, abs=1e-6)


def test_csv_for_a_period_has_a_line_per_user(hub: Hub) -> None:
    polled(hub)
    status, body = hub.service("api/spend.csv?by=user&since=2020-01-01",
                               hub.admin_token)  # type: ignore[attr-defined]
    assert status == 200
    lines = list(csv.reader(io.StringIO(body)))
    assert tuple(lines[0]) == report.CSV_COLUMNS
    assert {line[0] for line in lines[1:]} == set(USERS)
    status, doc = hub.service("api/spend?by=user&since=yesterday",
                              hub.admin_token)  # type: ignore[attr-defined]
    assert status == 400 and "since" in doc["message"]


def test_a_server_that_stops_reporting_is_stale_and_the_rest_keep_updating(hub: Hub) -> None:
    polled(hub)
    model = hub.api("GET", "/users/carol")
    pid = model["servers"][""]["state"]["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        before = spend_rows(hub)
        rows = wait_for(lambda: (lambda r: r if r["carol/"]["state"] == "stale" else None)(
            spend_rows(hub)), 30, "carol marked stale")
        assert "no report for" in rows["carol/"]["detail"]
        # the others were read in the same cycles
        after = wait_for(lambda: (lambda r: r if all(
            r[f"{u}/"]["last_ok"] > before[f"{u}/"]["last_ok"] for u in ("alice", "bob"))
            else None)(spend_rows(hub)), 30, "alice and bob updated")
        assert after["alice/"]["state"] == "ok"
        # carol's spend so far is kept, and counted
        assert after["carol/"]["spend"] >= before["carol/"]["spend"] > 0
        assert spend_rows(hub, "user")["carol"]["servers_stale"] == 1
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_for(lambda: spend_rows(hub)["carol/"]["state"] == "ok", 30, "carol reporting again")


def test_a_restarted_service_counts_nothing_twice(hub: Hub) -> None:
    polled(hub)
    before = spend_rows(hub)
    t0 = time.time()
    pids = [p for p in hub.service_pids()]
    assert pids, "the managed service's process"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    # JupyterHub restarts a managed service that dies
    after = wait_for(lambda: _try_rows(hub), 60, "the service back")
    after = wait_for(lambda: (lambda r: r if r and all(
        r[f"{u}/"]["last_ok"] > t0 for u in USERS) else None)(_try_rows(hub)), 60,
        "every server polled again")
    for user in USERS:
        # what the server itself has counted by now (its ledger is new with this hub, so its
        # whole total is this run's): the service holds no more than that, and lost nothing
        own = hub.server_status(user)["totals"]["spend"]
        assert before[f"{user}/"]["spend"] <= after[f"{user}/"]["spend"] <= own + 1e-6, user


def test_a_restarted_server_on_the_same_ledger_continues_and_a_new_ledger_adds(
        hub: Hub) -> None:
    polled(hub)
    hub.stop_server("bob")
    stopped = wait_for(lambda: (lambda r: r if r["bob/"]["state"] == "stopped" else None)(
        spend_rows(hub)), 30, "bob stopped")
    kept = stopped["bob/"]["spend"]
    assert kept > 0 and stopped["bob/"]["rate_per_hour"] == 0
    hub.start_server("bob")
    hub.wait_ready("bob")
    t0 = time.time()
    again = wait_for(lambda: (lambda r: r if r["bob/"]["state"] == "ok"
                              and r["bob/"]["last_ok"] > t0 else None)(spend_rows(hub)),
                     30, "bob polled again")
    own = hub.server_status("bob")["totals"]["spend"]
    # the same ledger: the server's own total already holds what was kept
    assert own >= kept
    assert again["bob/"]["spend"] <= own + 12.0 * 5 / 3600
    assert again["bob/"]["spend"] >= kept
    # a new ledger (a pod without its volume): a second epoch beside the first
    hub.stop_server("bob")
    wait_for(lambda: spend_rows(hub)["bob/"]["state"] == "stopped", 30, "bob stopped")
    kept = spend_rows(hub)["bob/"]["spend"]
    ledger = hub.dir / "ledgers" / "bob.sqlite"
    for suffix in ("", "-wal", "-shm"):
        Path(str(ledger) + suffix).unlink(missing_ok=True)
    hub.start_server("bob")
    hub.wait_ready("bob")
    wait_for(lambda: hub.server_status("bob")["totals"]["spend"] > 0, 30, "bob spending")

    def both() -> tuple[float, float] | None:
        doc = hub.server_status("bob")
        row = spend_rows(hub)["bob/"]
        return (row["spend"], doc["totals"]["spend"]) if row["last_ok"] == doc["time"] \
            else None
    total, fresh = wait_for(both, 30, "the same sample")
    assert fresh < kept
    assert total == pytest.approx(kept + fresh, abs=1e-6)


def test_nobody_reads_what_they_may_not(hub: Hub) -> None:
    polled(hub)
    alice = hub.token_for("alice")
    status, doc = hub.service("api/spend?by=user", alice)
    assert status == 200 and [r["key"] for r in doc["rows"]] == ["alice"]
    status, doc = hub.service("api/spend?by=server", alice)
    assert status == 200 and [r["key"] for r in doc["rows"]] == ["alice/"]
    for path in ("api/spend?user=bob", "api/spend?by=group", "api/series?by=group",
                 "api/series?user=bob", "api/events", "metrics"):
        status, doc = hub.service(path, alice)
        assert status == 403, (path, doc)
        assert doc["message"]
    status, doc = hub.service("api/me", alice)
    assert status == 200 and doc["user"] == "alice" and doc["admin"] is False
    assert [s["key"] for s in doc["servers"]] == ["alice/"]
    # no token, a made-up token, a token of a user without access to the service
    for token in (None, "not-a-token"):
        status, doc = hub.service("api/spend", token)
        assert status == 403 and "token" in doc["message"]
    narrow = hub.api("POST", "/users/alice/tokens", {"scopes": ["read:users:name!user=alice"],
                                                     "expires_in": 600})["token"]
    status, doc = hub.service("api/spend", narrow)  # alice's, but not for this service
    assert status == 403 and "token" in doc["message"]
    # the page sends a browser to the Hub's login
    status, headers, _ = hub.request("GET", "/services/costguard/")
    location = {k.lower(): v for k, v in headers.items()}.get("location", "")
    assert status == 302 and "/hub/api/oauth2/authorize" in location, (status, headers)
    # no answer of the service may be framed (user servers share the Hub's origin): the
    # pages, the API, the OAuth callback and a path it does not serve
    for path in ("", "api/spend", "oauth_callback", "no/such/path", "static/costguard-hub.js"):
        status, headers, _ = hub.request("GET", "/services/costguard/" + path, alice)
        lower = {k.lower(): v for k, v in headers.items()}
        policy = lower.get("content-security-policy", "").split("; ")
        assert policy[0] == "frame-ancestors 'none'", (path, status)
        assert lower.get("x-frame-options") == "DENY", path
    # bad input: 400 with a message
    for path in ("api/spend?by=planet", "api/spend?since=5&until=4",
                 "api/series?step=minute", "api/series?since=0&until=1e12"):
        status, doc = hub.service(path, alice)
        assert status == 400 and doc["message"], path


def test_metrics_carry_users_and_groups(hub: Hub) -> None:
    polled(hub)
    status, body = hub.service("metrics", hub.admin_token)  # type: ignore[attr-defined]
    assert status == 200
    for user in USERS:
        assert f'costguard_hub_user_spend_total{{currency="USD",user="{user}"}}' in body
        assert f'costguard_hub_server_up{{server="",user="{user}"}} 1.0' in body
    assert 'costguard_hub_group_spend_total{currency="USD",group="ml"}' in body
    assert "costguard_hub_poll_duration_seconds" in body


def _try_rows(hub: Hub) -> dict[str, dict[str, Any]] | None:
    try:
        return spend_rows(hub)
    except (AssertionError, OSError):
        return None


