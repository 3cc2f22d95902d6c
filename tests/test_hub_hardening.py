"""Issue 22, item 4: the hub service's security review, finding by finding.

No hub is started here: the spawn hook runs against a stand-in spawner and a real SQLite file
with the tables it reads; the service's handlers run in an in-process tornado server with a
stand-in for the Hub's OAuth (what the Hub would say of a token) and for the service's state.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import os
import re
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPResponse
from tornado.httpserver import HTTPServer
from tornado.testing import bind_unused_port

from jupyter_costguard.common.hubprotocol import Report
from jupyter_costguard.cost.hubbudget import ENV_BUDGET, budgets_doc, budgets_from_environ
from jupyter_costguard.hub import budgetbook, handlers, report
from jupyter_costguard.hub.budgets import Budgets
from jupyter_costguard.hub.profiles import profile_slug
from jupyter_costguard.hub.spawn import check_budget, is_gpu_spawn, name_profile
from jupyter_costguard.hub.store import HubStore
from jupyter_costguard.hub.storerows import hour_bounds

HOUR = 3600.0


# --- stand-ins ---------------------------------------------------------------------------


@dataclass
class Group:
    name: str


@dataclass
class User:
    name: str
    groups: list[Group] = field(default_factory=list)


class Log:
    def __init__(self) -> None:
        self.warnings: list[str] = []
        self.infos: list[str] = []

    def warning(self, msg: str, *args: Any) -> None:
        self.warnings.append(msg % args)

    def info(self, msg: str, *args: Any) -> None:
        self.infos.append(msg % args)


class Spawner:
    """A stand-in for a (Kube)Spawner at pre_spawn_hook time: the attributes the hook reads,
    named as KubeSpawner names them (`profile_list`, `user_options`, `extra_resource_limits`,
    `extra_resource_guarantees`), before KubeSpawner has applied any profile override."""

    def __init__(self, user: str = "ann", groups: tuple[str, ...] = (),
                 user_options: dict[str, Any] | None = None, profile_list: Any = None,
                 extra_resource_limits: dict[str, Any] | None = None) -> None:
        self.user = User(user, [Group(g) for g in groups])
        self.user_options = user_options or {}
        self.profile_list = profile_list
        self.extra_resource_limits = extra_resource_limits or {}
        self.extra_resource_guarantees: dict[str, Any] = {}
        self.environment: dict[str, str] = {}
        self.log = Log()


def service_db(path: Path, spend: dict[str, float] | None = None,
               members: dict[str, list[str]] | None = None,
               server_currency: str = "") -> Path:
    """The tables the spawn hook reads, as the service writes them: hourly spend per user,
    group memberships, and (what it must no longer read) a server's reported currency."""
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE hours (user TEXT, server TEXT, hour INTEGER, spend REAL)")
    db.execute("CREATE TABLE memberships (user TEXT, grp TEXT)")
    db.execute("CREATE TABLE servers (user TEXT, server TEXT, currency TEXT)")
    hour = hour_bounds(time.time(), None)[0]
    for user, amount in (spend or {}).items():
        db.execute("INSERT INTO hours VALUES (?, '', ?, ?)", (user, hour, amount))
    for user, groups in (members or {}).items():
        for g in groups:
            db.execute("INSERT INTO memberships VALUES (?, ?)", (user, g))
    if server_currency:
        db.execute("INSERT INTO servers VALUES ('mallory', '', ?)", (server_currency,))
    db.commit()
    db.close()
    return path


def settings_for(db: Path, **more: Any) -> dict[str, Any]:
    return {"db_path": str(db), "gpu_profiles": {"gpu"}, **more}


def hub_budget_env(spawner: Spawner) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = json.loads(spawner.environment[ENV_BUDGET])
    return docs


# --- 1. CSV formula injection ------------------------------------------------------------


def test_csv_text_cells_that_would_start_a_formula_are_inert() -> None:
    rows = [report.Row(key="@evil", user="@evil", spend=1.5,
                       currency='=HYPERLINK("http://x","y")'),
            report.Row(key="-cmd", user="-cmd", server="+x", group="\tg", spend=0.0,
                       currency="USD")]
    lines = list(csv.DictReader(io.StringIO(report.to_csv(rows))))
    assert lines[0]["currency"] == '\'=HYPERLINK("http://x","y")'
    assert lines[0]["user"] == "'@evil" and lines[0]["key"] == "'@evil"
    assert lines[1]["key"] == "'-cmd" and lines[1]["server"] == "'+x"
    assert lines[1]["group"] == "'\tg" and lines[1]["currency"] == "USD"
    # numbers stay numbers
    assert lines[0]["spend"] == "1.500000" and float(lines[1]["rate_per_hour"]) == 0.0


# --- 2. money in the site's currency -----------------------------------------------------


def test_the_refusal_names_the_sites_currency_never_a_servers(tmp_path: Path) -> None:
    db = service_db(tmp_path / "hub.sqlite", {"ann": 5.0},
                    server_currency="<b>BTC</b> send to x")
    for settings, unit in ((settings_for(db, user_budgets={"ann": 2.0}), "USD"),
                           (settings_for(db, user_budgets={"ann": 2.0}, currency="EUR"),
                            "EUR")):
        spawner = Spawner(user_options={"profile": "gpu"})
        with pytest.raises(web.HTTPError) as refused:
            asyncio.run(check_budget(spawner, settings))
        message = refused.value.jupyterhub_message  # type: ignore[attr-defined]
        assert refused.value.status_code == 403
        assert f"budget of 2.00 {unit} is spent (5.00 {unit} since" in message
        assert "BTC" not in message


@dataclass
class FakeServer:
    """A server row as report.rows reads it (the store's ServerRow fields it uses)."""

    user: str
    server: str
    currency: str | None
    state: str = "ok"
    detail: str | None = None
    rate_per_hour: float = 1.0
    gpu_count: int = 0
    gpus_held: int = 0
    gpus_busy: int = 0
    simulated: bool = False
    last_ok: float | None = None
    node_time: float | None = None  # no node GPU figures
    activity_source: str = "report"
    waste_removed: float = 0.0


class FakeStore:
    count = "reported"  # no meter here: what servers report is counted

    def __init__(self, servers: list[FakeServer], members: dict[str, list[str]],
                 spend: dict[str, float]) -> None:
        self._servers, self._members, self._spend = servers, members, spend

    def servers(self) -> list[FakeServer]:
        return self._servers

    def totals(self, since: float | None, until: float | None,
               ) -> dict[tuple[str, str], tuple[float, float, float]]:
        return {(s.user, s.server): (self._spend.get(s.user, 0.0), 0.0, 0.0)
                for s in self._servers}

    def memberships(self, since: float | None = None) -> dict[str, list[str]]:
        return self._members

    def budget_book(self, budgets: Budgets, now: float) -> budgetbook.BudgetBook:
        return budgetbook.BudgetBook(budgets, now, self._spend, self._members)

    def meter_rows(self) -> list[Any]:
        return []


def test_group_rows_carry_the_sites_currency_user_rows_their_own() -> None:
    store = FakeStore([FakeServer("mallory", "", "=1+1"), FakeServer("ann", "", "EUR")],
                      {"mallory": ["ml"], "ann": ["ml"]}, {"mallory": 3.0, "ann": 1.0})
    budgets = Budgets()
    groups = report.rows(store, budgets, "group", time.time(),  # type: ignore[arg-type]
                         currency="USD")
    assert [(r.key, r.currency) for r in groups] == [("ml", "USD")]
    users = report.rows(store, budgets, "user", time.time(),  # type: ignore[arg-type]
                        currency="USD")
    assert {r.key: r.currency for r in users} == {"mallory": "=1+1", "ann": "EUR"}


def test_the_gpus_beside_idle_gpu_hours_are_the_gpus_they_count(tmp_path: Path) -> None:
    """Issue 46: alice's profile pays for an 8-GPU instance and her kernel holds one, idle. A
    minute on, her idle GPU hours count the 8 GPUs, and so does the GPU figure beside them
    (`gpus_paid`), with the one her kernel holds: the page's columns count the same GPUs."""
    store = HubStore(tmp_path / "hub.sqlite")
    t0 = 1_800_000_000.0
    try:
        for t in (t0, t0 + 60):
            store.record_report("alice", "/user/alice/", "gpu", Report(
                server="", time=t, since=t0 - 1, spend=(t - t0 + 1) / 3600 * 40.0, waste=0.0,
                currency="USD", simulated=False, rate_per_hour=40.0, gpu_count=8, gpus_held=1,
                gpus_busy=0, gpu_idle_since=t0, active_jobs=0, kept=()))
        for by in ("user", "server"):
            (doc,) = [r.doc() for r in report.rows(store, Budgets(), by, t0 + 61)]
            assert (doc["gpus_paid"], doc["gpus_held"], doc["gpus_busy"]) == (8, 1, 0), doc
            # the idle hours are the paid GPUs not at work over the minute between reports
            assert doc["idle_gpu_hours"] == round(
                (doc["gpus_paid"] - doc["gpus_busy"]) * 60 / 3600, 4), doc
    finally:
        store.close()


# --- 3. what a member sees of a group's spend --------------------------------------------


def test_a_member_is_given_what_is_left_of_a_group_budget_by_default(tmp_path: Path) -> None:
    db = service_db(tmp_path / "hub.sqlite", {"ann": 1.0, "bob": 6.0},
                    {"ann": ["ml"], "bob": ["ml"]})
    base = settings_for(db, user_budgets={"ann": 5.0}, group_budgets={"ml": 10.0})
    seen = {}
    for view in (None, "remaining", "none", "full"):
        spawner = Spawner(groups=("ml",), user_options={"profile": "cpu"})
        settings = base if view is None else {**base, "member_group_view": view}
        asyncio.run(check_budget(spawner, settings))
        seen[view] = hub_budget_env(spawner)
    own = {"scope": "user", "name": "ann", "budget": 5.0, "spent": 1.0, "remaining": 4.0}
    for docs in seen.values():  # one's own budget is always shown whole
        assert docs[0].items() >= own.items()
    assert seen[None] == seen["remaining"]
    group = seen["remaining"][1]
    assert group["scope"] == "group" and group["name"] == "ml"
    assert group["remaining"] == 3.0
    assert group["budget"] is None and group["spent"] is None and group["used"] is None
    assert {"period", "period_start", "period_end"} <= set(group)
    assert [d["scope"] for d in seen["none"]] == ["user"]
    assert seen["full"][1]["spent"] == 7.0 and seen["full"][1]["budget"] == 10.0


@pytest.mark.parametrize("view", ["remaining", "none", "full"])
def test_a_spent_group_budget_refuses_the_gpu_and_says_only_what_members_may_see(
        tmp_path: Path, view: str) -> None:
    """Bob spent 12.00 of the two-member group's 10.00: ann's refusal must not tell her that
    (she knows her own 0.84, so the group's figure is bob's) unless the site shows members
    everything ("full")."""
    db = service_db(tmp_path / "hub.sqlite", {"bob": 12.0, "ann": 0.84},
                    {"ann": ["ml"], "bob": ["ml"]})
    spawner = Spawner(groups=("ml",), user_options={"profile": "gpu"})
    with pytest.raises(web.HTTPError) as refused:
        asyncio.run(check_budget(spawner, settings_for(
            db, group_budgets={"ml": 10.0}, member_group_view=view)))
    message = refused.value.jupyterhub_message  # type: ignore[attr-defined]
    assert refused.value.status_code == 403
    assert "GPU servers are refused: group ml's monthly budget" in message
    assert "a CPU profile can still be started" in message
    if view == "full":
        assert "budget of 10.00 USD is spent (12.84 USD since " in message
    else:
        assert "group ml's monthly budget is spent. It resets on " in message
        assert not any(figure in message for figure in ("10.00", "12.84", "12.00", "0.84"))
    # one's own budget is always told whole
    db2 = service_db(tmp_path / "own.sqlite", {"ann": 2.5})
    with pytest.raises(web.HTTPError) as own:
        asyncio.run(check_budget(Spawner(user_options={"profile": "gpu"}), settings_for(
            db2, user_budgets={"ann": 2.0}, member_group_view=view)))
    assert "your monthly budget of 2.00 USD is spent (2.50 USD since " in \
        own.value.jupyterhub_message  # type: ignore[attr-defined]


# --- 3b. a budget holds when members start GPU servers at the same moment ----------------

#: the gpu profile's price: a 30 s look at the Hub's worth of it is 0.30
RESERVE_RATE = 36.0


def group_store(path: Path, names: list[str], spent: float) -> tuple[HubStore, float]:
    """The service's real store: `names` members of group ml this period, `spent` of its
    budget metered on the first member's (stopped) GPU server."""
    store = HubStore(path)
    now = time.time()
    store.record_cycle({}, {n: ["ml"] for n in names}, now, 120.0)
    store.record_meter({(names[0], "old"): (now - spent / RESERVE_RATE * 3600, "gpu")},
                       {"gpu": RESERVE_RATE}, now)
    return store, now


def reserving_settings(db: Path, **more: Any) -> dict[str, Any]:
    return settings_for(db, profile_prices={"gpu": {"hourly_rate": RESERVE_RATE, "gpus": 1},
                                                  "cpu": {"hourly_rate": 0.1, "gpus": 0}},
                        group_budgets={"ml": 1.0}, poll_interval=30.0, **more)


def spawn_at_once(spawners: list[Spawner], settings: dict[str, Any],
                  ) -> tuple[list[Spawner], list[str]]:
    """Every spawner's check at the same moment, each on a thread (and a connection) of its
    own, as the Hub runs concurrent spawns: those admitted, and the refusals."""
    import threading

    start = threading.Barrier(len(spawners))
    admitted: list[Spawner] = []
    refused: list[str] = []

    def one(spawner: Spawner) -> None:
        start.wait()
        try:
            asyncio.run(check_budget(spawner, settings))
        except web.HTTPError as e:
            refused.append(e.jupyterhub_message)  # type: ignore[attr-defined]
        else:
            admitted.append(spawner)

    threads = [threading.Thread(target=one, args=(s,)) for s in spawners]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return admitted, refused


def test_ten_gpu_spawns_at_once_against_room_for_one_admit_exactly_one(tmp_path: Path) -> None:
    """Two members with 0.25 USD left in their group's budget both got a GPU server at the
    same moment, and the group reached 0.84 before the hold stopped them: each check read
    the same spend and nothing was held. Now each admitted spawn reserves what it can spend
    until the service meters it (0.30: 30 s at 36/h), in one transaction with its check."""
    names = [f"m{i}" for i in range(10)]
    db = tmp_path / "hub.sqlite"
    store, _ = group_store(db, names, 0.75)
    settings = reserving_settings(db)
    spawners = [Spawner(n, ("ml",), {"profile": "gpu"}) for n in names]
    admitted, refused = spawn_at_once(spawners, settings)
    assert len(admitted) == 1 and len(refused) == 9, refused
    for message in refused:
        assert "GPU servers are refused for now: what is left of group ml's monthly budget " \
               "is held by GPU servers starting at this moment" in message, message
        assert "a CPU profile can still be started" in message
        # what the others hold is theirs: no figure of the group's under "remaining"
        assert not any(f in message for f in ("0.75", "0.25", "0.30", "1.00")), message
    (winner,) = admitted
    assert winner.log.infos == [f"costguard: {winner.user.name}'s GPU server reserves 0.3000 "
                                "USD of its budgets until the service counts it"]
    (held,) = store.budget_book(Budgets(group_budgets={"ml": 1.0}), time.time()).reservations
    assert (held.user, held.server, held.groups) == (winner.user.name, "", ("ml",))
    assert held.amount == pytest.approx(0.30)
    # a site that shows members everything tells the figures
    full = Spawner(names[-1] if winner.user.name != names[-1] else names[0], ("ml",),
                   {"profile": "gpu"})
    with pytest.raises(web.HTTPError) as told:
        asyncio.run(check_budget(full, {**settings, "member_group_view": "full"}))
    assert "budget (0.75 of 1.00 USD spent, 0.30 USD held) is held by GPU servers" in \
        told.value.jupyterhub_message  # type: ignore[attr-defined]
    # a CPU server is never held up by reservations
    cpu = Spawner(names[1], ("ml",), {"profile": "cpu"})
    assert [s.scope for s in asyncio.run(check_budget(cpu, settings))] == ["group"]
    store.close()


def test_a_reservation_gives_way_to_the_servers_own_spend_and_never_outlives_its_spawn(
        tmp_path: Path) -> None:
    names = ["ann", "bob"]
    db = tmp_path / "hub.sqlite"
    store, now = group_store(db, names, 0.5)
    budgets = Budgets(group_budgets={"ml": 1.0})
    settings = reserving_settings(db)

    def held() -> list[tuple[str, str]]:
        return [(r.user, r.server) for r in
                store.budget_book(budgets, time.time()).reservations]

    asyncio.run(check_budget(Spawner("ann", ("ml",), {"profile": "gpu"}), settings))
    assert held() == [("ann", "")]
    # ann's spawn again (a retry): one reservation, not two
    asyncio.run(check_budget(Spawner("ann", ("ml",), {"profile": "gpu"}), settings))
    assert held() == [("ann", "")]
    # the meter counts her server at the next look at the Hub: its reservation is released
    later = time.time() + 1
    store.record_cycle({("ann", ""): ("/user/ann/", "gpu")}, {n: ["ml"] for n in names},
                       later, 120.0)
    assert held() == [("ann", "")]  # listed as running: still held until counted
    store.record_meter({("ann", ""): (now, "gpu")}, {"gpu": RESERVE_RATE}, later)
    assert held() == []
    # bob's spawn fails (or he stops it before it is counted): the next look releases it
    asyncio.run(check_budget(Spawner("bob", ("ml",), {"profile": "gpu"}), settings))
    assert held() == [("bob", "")]
    store.record_cycle({}, {n: ["ml"] for n in names}, time.time() + 1, 120.0)
    assert held() == []
    # an unpriced profile's server (or one the meter has not reached yet): its first report
    asyncio.run(check_budget(Spawner("bob", ("ml",), {"profile": "gpu"}), settings))
    assert held() == [("bob", "")]
    at = time.time() + 1
    store.record_report("bob", "/user/bob/", "gpu", Report(
        server="", time=at, since=at - 5, spend=0.01, waste=0.0, currency="USD",
        simulated=False, rate_per_hour=RESERVE_RATE, gpu_count=1, gpus_held=1, gpus_busy=1,
        gpu_idle_since=None, active_jobs=0, kept=()), at - 5, at)
    assert held() == []
    # and a reservation nobody releases expires (the spawn's start timeout and two looks)
    asyncio.run(check_budget(Spawner("bob", ("ml",), {"profile": "gpu"}), settings))
    (r,) = store.budget_book(budgets, time.time()).reservations
    assert r.expires - r.made == pytest.approx(60.0 + 2 * 30.0)
    book = store.budget_book(budgets, r.expires + 1)
    assert book.reserved("group", "ml") == 0.0
    store.close()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes a read-only file")
def test_a_database_the_hub_cannot_write_is_checked_unreserved_and_the_log_says_so(
        tmp_path: Path) -> None:
    db = tmp_path / "hub.sqlite"
    store, _ = group_store(db, ["ann", "bob"], 0.5)
    store.close()
    db.chmod(0o400)
    spawner = Spawner("ann", ("ml",), {"profile": "gpu"})
    states = asyncio.run(check_budget(spawner, reserving_settings(db)))
    assert [(s.scope, round(s.spent, 6)) for s in states] == [("group", 0.5)]
    assert any("reserves nothing" in w and "cannot be written" in w
               for w in spawner.log.warnings), spawner.log.warnings


def test_a_check_that_cannot_take_the_write_lock_is_not_made(tmp_path: Path) -> None:
    """Unreserved, the check would let simultaneous spawns through again: a lock held past
    the timeout is an unreadable budget (503, or `budget_check_on_error`)."""
    from jupyter_costguard.hub.store import counted_sql

    db = tmp_path / "hub.sqlite"
    store, now = group_store(db, ["ann"], 0.5)
    store.db.execute("BEGIN IMMEDIATE")  # the service in a write that does not end
    try:
        with pytest.raises(budgetbook.BudgetUnreadable, match="locked"):
            budgetbook.admit(db, counted_sql("metered"), Budgets(group_budgets={"ml": 1.0}),
                             "ann", "", ["ml"], now, 0.3, 60.0, timeout=0.2)
    finally:
        store.db.execute("ROLLBACK")
    store.close()


def test_the_server_reads_a_remaining_only_budget_and_shrinks_it_by_its_own_spend() -> None:
    now = time.time()
    env = {ENV_BUDGET: json.dumps([
        {"scope": "user", "name": "ann", "budget": 5.0, "spent": 1.0, "remaining": 4.0,
         "used": 0.2, "period": "month", "period_start": now - 10, "period_end": now + 99},
        {"scope": "group", "name": "ml", "budget": None, "spent": None, "used": None,
         "remaining": 3.0, "period": "month", "period_start": now - 10,
         "period_end": now + 99}])}
    budgets = budgets_from_environ(env)
    assert len(budgets) == 2
    own, group = budgets_doc(budgets, 1.25, now)
    assert (own["spent"], own["remaining"], own["used"]) == (2.25, 2.75, 0.45)
    assert group == {**group, "budget": None, "spent": None, "used": None, "remaining": 1.75}
    assert budgets_doc(budgets, 10.0, now)[1]["remaining"] == 0.0
    # a budget with neither figures nor what is left is not a budget
    bad = {ENV_BUDGET: json.dumps([{"scope": "group", "name": "ml", "budget": None,
                                    "spent": None, "period": "month", "period_start": 0,
                                    "period_end": now + 99}])}
    assert budgets_from_environ(bad) == []


# --- 5. the spawn check fails closed when the database cannot be read --------------------


@pytest.mark.parametrize("broken, why", [
    ("missing", "does not exist"),
    ("garbage", "file is not a database"),
    ("no tables", "no such table"),
])
def test_a_gpu_spawn_is_refused_when_the_budget_cannot_be_read(
        tmp_path: Path, broken: str, why: str) -> None:
    db = tmp_path / "hub.sqlite"
    if broken == "garbage":
        db.write_bytes(b"this is not sqlite" * 100)
    elif broken == "no tables":
        sqlite3.connect(db).close()  # an empty database: the service never wrote it
    spawner = Spawner(user_options={"profile": "gpu"})
    with pytest.raises(web.HTTPError) as refused:
        asyncio.run(check_budget(spawner, settings_for(db, user_budgets={"ann": 5.0})))
    message = refused.value.jupyterhub_message  # type: ignore[attr-defined]
    assert refused.value.status_code == 503
    assert "budget cannot be checked" in message and str(db) in message and why in message
    assert ENV_BUDGET not in spawner.environment


def test_allow_starts_it_with_a_warning_and_cpu_or_unbudgeted_spawns_never_fail(
        tmp_path: Path) -> None:
    db = tmp_path / "absent.sqlite"
    budgeted = settings_for(db, user_budgets={"ann": 5.0})
    spawner = Spawner(user_options={"profile": "gpu"})
    assert asyncio.run(check_budget(spawner, {**budgeted,
                                              "budget_check_on_error": "allow"})) == []
    assert any("unchecked" in w and str(db) in w for w in spawner.log.warnings)
    cpu = Spawner(user_options={"profile": "cpu"})
    assert asyncio.run(check_budget(cpu, budgeted)) == []
    unbudgeted = Spawner(user_options={"profile": "gpu"})
    assert asyncio.run(check_budget(unbudgeted, settings_for(db))) == []
    # a readable database with nothing spent yet is no error
    fresh = service_db(tmp_path / "fresh.sqlite")
    ok = Spawner(user_options={"profile": "gpu"})
    states = asyncio.run(check_budget(ok, settings_for(fresh, user_budgets={"ann": 5.0})))
    assert [(s.scope, s.spent) for s in states] == [("user", 0.0)]


# --- 6. GPU servers recognised by the profile they will really run -----------------------

GPU_LIMIT = {"extra_resource_limits": {"nvidia.com/gpu": 1}}
PROFILES: list[dict[str, Any]] = [
    {"display_name": "Small CPU", "slug": "cpu"},
    {"display_name": "A100 (1 GPU)", "kubespawner_override": GPU_LIMIT},
    {"display_name": "Flexible", "slug": "flex", "profile_options": {
        "accelerator": {"display_name": "Accelerator", "choices": {
            "none": {"display_name": "None", "default": True},
            "a100": {"display_name": "A100", "kubespawner_override": GPU_LIMIT}}},
        "gpus": {"display_name": "GPUs", "choices": {"zero": {"display_name": "0"}},
                 "unlisted_choice": {"enabled": True, "kubespawner_override": {
                     "extra_resource_guarantees": {"amd.com/gpu": "{value}"}}}}}},
    {"display_name": "Training", "slug": "gpu", "default": True},
]


def gpu(spawner: Spawner, gpu_profiles: frozenset[str] = frozenset({"gpu"})) -> bool:
    return asyncio.run(is_gpu_spawn(spawner, set(gpu_profiles)))


def test_the_default_profile_is_recognised_by_its_slug_with_no_user_options() -> None:
    assert gpu(Spawner(profile_list=PROFILES))
    assert not gpu(Spawner(profile_list=PROFILES, user_options={"profile": "cpu"}))
    assert profile_slug({}, PROFILES) == "gpu"
    assert profile_slug({}, None) == "" and profile_slug({"profile": "x"}, None) == "x"
    assert profile_slug({}, PROFILES[:3]) == "cpu"  # no default: the first
    assert profile_slug({}, {"b": PROFILES[2], "a": PROFILES[0]}) == "cpu"  # dict: by key


def test_the_hook_names_the_default_profile_where_the_hubs_api_shows_it() -> None:
    """Culling matches policies on the profile the Hub's API reports; a spawn left at the
    default profile sent none, so the service saw "" and no GPU policy applied."""

    class Orm:
        user_options: dict[str, Any] = {}

    class Db:
        commits = 0

        def commit(self) -> None:
            self.commits += 1

    spawner = Spawner(profile_list=PROFILES)
    spawner.orm_spawner = Orm()  # type: ignore[attr-defined]
    spawner.db = Db()  # type: ignore[attr-defined]
    assert asyncio.run(name_profile(spawner)) == "gpu"
    assert spawner.orm_spawner.user_options == {"profile": "gpu"}  # type: ignore[attr-defined]
    assert spawner.db.commits == 1  # type: ignore[attr-defined]
    chosen = Spawner(profile_list=PROFILES, user_options={"profile": "cpu"})
    assert asyncio.run(name_profile(chosen)) == "cpu" and chosen.user_options == {
        "profile": "cpu"}
    assert asyncio.run(name_profile(Spawner())) == ""  # no profile list: nothing to name


def test_a_profile_or_option_that_requests_a_gpu_is_a_gpu_spawn() -> None:
    # the override of a profile known by its display name's slug
    assert profile_slug({"profile": "a100-1-gpu"}, PROFILES) == "a100-1-gpu"
    assert gpu(Spawner(profile_list=PROFILES, user_options={"profile": "a100-1-gpu"}))
    # a profile option's choice, its default, and a typed (unlisted) value
    assert not gpu(Spawner(profile_list=PROFILES, user_options={"profile": "flex"}))
    assert gpu(Spawner(profile_list=PROFILES,
                       user_options={"profile": "flex", "accelerator": "a100"}))
    assert gpu(Spawner(profile_list=PROFILES,
                       user_options={"profile": "flex", "gpus--unlisted-choice": "2"}))
    assert not gpu(Spawner(profile_list=PROFILES,
                           user_options={"profile": "flex", "gpus--unlisted-choice": "0"}))
    # the spawner's own request, with no profile list
    assert gpu(Spawner(extra_resource_limits={"amd.com/gpu": "1"}))
    assert not gpu(Spawner(extra_resource_limits={"nvidia.com/gpu": 0}))


def test_a_callable_profile_list_is_called_with_the_spawner() -> None:
    seen: list[Any] = []

    async def profiles(spawner: Any) -> list[dict[str, Any]]:
        seen.append(spawner)
        return PROFILES

    spawner = Spawner(profile_list=profiles)
    assert gpu(spawner) and seen == [spawner]
    assert not gpu(Spawner(profile_list=lambda s: PROFILES, user_options={"profile": "cpu"}))


def test_a_default_gpu_profile_over_budget_is_refused(tmp_path: Path) -> None:
    db = service_db(tmp_path / "hub.sqlite", {"ann": 9.0})
    spawner = Spawner(profile_list=PROFILES)  # the form left at its default: no options
    with pytest.raises(web.HTTPError) as refused:
        asyncio.run(check_budget(spawner, settings_for(db, user_budgets={"ann": 5.0})))
    assert refused.value.status_code == 403


# --- 4. no framing; 3. api/me as the site says -------------------------------------------


class FakeHubAuth:
    """What the Hub would say of a token: `Authorization: token <name>` is that user."""

    access_scopes = None
    login_url = "/hub/login"
    base_url = "/services/costguard/"

    def __init__(self, users: dict[str, dict[str, Any]]) -> None:
        self.users = users

    async def get_user(self, handler: web.RequestHandler, sync: bool = True,
                       ) -> dict[str, Any] | None:
        token = handler.request.headers.get("Authorization", "").removeprefix("token ")
        return self.users.get(token)


class FakeService:
    """The service's state the handlers read (the app, in the running service)."""

    prefix = "/services/costguard/"
    currency = "USD"
    reconcile = report.Reconcile()
    admin_users = {"root"}
    admin_groups: set[str] = set()

    def __init__(self, store: FakeStore, budgets: Budgets, view: str) -> None:
        self.store, self.budgets, self.member_group_view = store, budgets, view

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)

    async def report(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)

    def poll_doc(self) -> None:
        return None


def serve(monkeypatch: pytest.MonkeyPatch, service: FakeService,
          requests: list[tuple[str, str | None]]) -> list[HTTPResponse]:
    """The service's routes in-process, the Hub's word on tokens from `FakeHubAuth`; each
    (path, token) fetched in turn."""
    users = {"ann": {"name": "ann", "kind": "user", "groups": ["ml"], "scopes": []},
             "root": {"name": "root", "kind": "user", "groups": [], "scopes": [],
                      "admin": True}}

    monkeypatch.setattr(handlers.BaseHandler, "_hub_auth", FakeHubAuth(users))

    async def main() -> list[HTTPResponse]:
        p = service.prefix
        app = web.Application([
            (p, handlers.PageHandler), (p + "api/me", handlers.MeHandler),
            (p + "api/spend", handlers.SpendHandler),
            (p + "api/events", handlers.EventsHandler),
            (p + "static/(?P<path>[^/]+)", handlers.StaticHandler)],
            costguard=service, cookie_secret="x" * 32)
        sock, port = bind_unused_port()
        server = HTTPServer(app)
        server.add_sockets([sock])
        client = AsyncHTTPClient()
        out = []
        try:
            for path, token in requests:
                out.append(await client.fetch(
                    f"http://127.0.0.1:{port}{p}{path}", raise_error=False,
                    follow_redirects=False,
                    headers={"Authorization": f"token {token}"} if token else {}))
        finally:
            server.stop()
        return out

    return asyncio.run(main())


def member_service(view: str) -> FakeService:
    store = FakeStore([FakeServer("ann", "", "USD"), FakeServer("bob", "", "USD")],
                      {"ann": ["ml"], "bob": ["ml"]}, {"ann": 1.0, "bob": 6.0})
    return FakeService(store, Budgets(group_budgets={"ml": 10.0}), view)


def test_no_answer_of_the_service_may_be_framed(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = serve(monkeypatch, member_service("remaining"), [
        ("", None), ("", "ann"), ("api/me", "ann"), ("api/me", None), ("api/spend", "ann"),
        ("api/events", "ann"), ("api/spend?by=nope", "ann")])
    assert [a.code for a in answers] == [302, 200, 200, 403, 200, 403, 400]
    for a in answers:
        assert a.headers["Content-Security-Policy"].split("; ")[0] == "frame-ancestors 'none'"
        assert a.headers["X-Frame-Options"] == "DENY"
    # the page (its script is the service's own file) runs no inline script
    assert "script-src 'self'" in answers[1].headers["Content-Security-Policy"]


def test_the_page_loads_its_typed_script_from_the_service_cached_by_its_hash(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The page's shell names the script built from labextension/src/hub with its hash; the
    service serves it as JavaScript (a module script needs a JavaScript type), cached for
    good at that hash and revalidated without it, framed by no one, and nothing outside the
    static folder."""
    built = handlers.read_static()
    assert handlers.SCRIPT in built, "build the labextension (npm run build) first"
    script = built[handlers.SCRIPT]
    page, versioned, bare, missing, outside = serve(monkeypatch, member_service("remaining"), [
        ("", "ann"), (f"static/{handlers.SCRIPT}?v={script.version}", None),
        (f"static/{handlers.SCRIPT}", None), ("static/nothing.js", None),
        ("static/..%2fpage.html", None)])
    html = page.body.decode()
    src = re.search(r'<script type="module" src="([^"]+)"></script>', html)
    assert src and src.group(1) == f"/services/costguard/static/{handlers.SCRIPT}?v=" \
        f"{script.version}", html[-400:]
    assert "<script>" not in html and "__COSTGUARD" not in html
    for answer in (versioned, bare):
        assert answer.code == 200 and answer.body == script.body
        assert answer.headers["Content-Type"] == "text/javascript; charset=UTF-8"
        assert answer.headers["Content-Security-Policy"] == "frame-ancestors 'none'"
        assert answer.headers["X-Content-Type-Options"] == "nosniff"
    assert "max-age=31536000" in versioned.headers["Cache-Control"]
    assert bare.headers["Cache-Control"] == "no-cache" and bare.headers["Etag"]
    assert [missing.code, outside.code] == [404, 404]
    assert json.loads(missing.body)["message"] == "not found"


@pytest.mark.parametrize("view", ["remaining", "none", "full"])
def test_api_me_shows_a_member_the_group_budget_as_the_site_says(
        monkeypatch: pytest.MonkeyPatch, view: str) -> None:
    member, admin = (json.loads(a.body)["budgets"] for a in serve(
        monkeypatch, member_service(view), [("api/me", "ann"), ("api/me", "root")]))
    if view == "none":
        assert member == []
    elif view == "remaining":
        assert len(member) == 1 and member[0]["remaining"] == 3.0
        assert (member[0]["budget"], member[0]["spent"], member[0]["used"]) == (None,) * 3
    else:
        assert member[0]["spent"] == 7.0
    assert admin == []  # root is in no group: nothing of ml's is his


def test_an_admin_sees_group_budgets_whole_in_api_me(monkeypatch: pytest.MonkeyPatch,
                                                    ) -> None:
    service = member_service("none")
    service.store._members["root"] = ["ml"]
    (me,) = serve(monkeypatch, service, [("api/me", "root")])
    assert json.loads(me.body)["budgets"][0]["spent"] == 7.0


# --- 7. the service without the [hub] extra ----------------------------------------------


def test_the_service_without_jupyterhub_says_what_to_install() -> None:
    code = textwrap.dedent("""
        import runpy, sys
        class NoHub:
            def find_spec(self, name, path=None, target=None):
                if name == "jupyterhub" or name.startswith("jupyterhub."):
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
                return None
        sys.meta_path.insert(0, NoHub())
        runpy.run_module("jupyter_costguard.hub", run_name="__main__")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=Path(__file__).parents[1],
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and 'pip install ".[hub]"' in lines[0]
    assert "Traceback" not in done.stderr and done.stdout == ""

