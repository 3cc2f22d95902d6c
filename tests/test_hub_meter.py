"""The hub service's own meter (hub/meter.py, the meter in hub/store.py, the reconciliation in
hub/report.py): the price of a profile comes from the code the servers price themselves with,
the meter accrues from the Hub's record alone, survives restarts, and decides what is counted.
The real hub and the hostile user are in tests/test_hub_meter_hostile.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_costguard.cloud.container import CgroupLimits
from jupyter_costguard.common.hubprotocol import Report
from jupyter_costguard.cost.config import PricingConfig
from jupyter_costguard.cost.pricing import ContainerFacts, resolve_pricing
from jupyter_costguard.cost.service import decide_pricing, load_catalog
from jupyter_costguard.hub.budgets import Budgets, BudgetState
from jupyter_costguard.hub.meter import MeterConfigError, parse_bytes, price_profiles
from jupyter_costguard.hub.report import Reconcile, flags_of, rows, to_csv
from jupyter_costguard.hub.store import HubStore
from jupyter_costguard.sampling.records import GpuReading, GpuSample, HostSample

GiB = 2 ** 30
HOUR = 3600.0
T0 = 1_780_000_000.0 // HOUR * HOUR  # an hour boundary
#: budgets whose period (a day) starts at or before T0 and holds the hours after it
BOOK = Budgets("day")


def report(server: str = "", *, since: float, time: float, spend: float, rate: float,
           currency: str = "USD") -> Report:
    return Report(server=server, time=time, since=since, spend=spend, waste=0.0,
                  currency=currency, simulated=False, rate_per_hour=rate, gpu_count=1,
                  gpus_held=1, gpus_busy=1, gpu_idle_since=None, active_jobs=0, kept=())


# --- one price engine -------------------------------------------------------------------

@pytest.mark.parametrize("name", ["p4d.24xlarge", "aws/g5.xlarge", "g2-standard-4"])
def test_a_whole_instance_profile_is_priced_as_the_server_prices_itself(name: str) -> None:
    """The server configured with the same instance type (COSTGUARD_INSTANCE_TYPE, as a
    profile's environment sets it) arrives at the same rate, to the cent and beyond."""
    config = PricingConfig(instance_type=None)
    server = decide_pricing(config, load_catalog(config), None,
                            environ={"COSTGUARD_INSTANCE_TYPE": name})
    meter = price_profiles({"gpu": {"instance_type": name}}, currency="USD")["gpu"]
    assert server.rate_per_hour is not None and server.rate_per_hour > 0
    assert meter.rate_per_hour == server.rate_per_hour
    assert meter.source == "catalog" and meter.retrieved == server.instance.retrieved  # type: ignore[union-attr]
    assert "profile_prices['gpu']" in meter.detail and "list price of" in meter.detail


def test_a_share_of_an_instance_is_priced_as_the_pod_holding_it_prices_itself() -> None:
    """A profile of 2 of a p4d's 8 GPUs, 24 CPUs and 288Gi: the same rate a server in a pod
    with those cgroup limits, on that node, holding 2 GPUs, computes (cost.pricing)."""
    catalog = load_catalog(PricingConfig())
    row = catalog.get("p4d.24xlarge")
    assert row is not None
    gpus = tuple(GpuSample(i, f"GPU-{i}", "NVIDIA A100-SXM4-40GB", 40 * GiB, 0, 50.0, 100.0)
                 for i in range(2))
    server = resolve_pricing(
        catalog, instance_type="p4d.24xlarge", environ={}, gpu=GpuReading("ok", gpus=gpus),
        host=HostSample(row.vcpus, 1.0, int(row.memory_gib * GiB), GiB), hourly_rate=None,
        container=ContainerFacts(CgroupLimits(24.0, 288 * GiB, "/kubepods/pod1", "cgroup"),
                                 mode="on"))
    meter = price_profiles({"a100x2": {"instance_type": "p4d.24xlarge", "gpus": 2,
                                       "cpus": 24, "memory": "288Gi"}},
                           currency="USD")["a100x2"]
    assert server.rate_per_hour is not None
    assert server.rate_per_hour < row.on_demand_per_hour / 3  # a share, not the instance
    assert round(meter.rate_per_hour, 2) == round(server.rate_per_hour, 2)
    assert meter.rate_per_hour == pytest.approx(server.rate_per_hour, rel=1e-12)
    assert "2 of 8 GPUs" in meter.detail


def test_spot_and_a_plain_rate() -> None:
    prices = price_profiles({
        "spot": {"instance_type": "g5.xlarge", "market": "spot"},
        "cpu": {"hourly_rate": 0.05}}, currency="USD")
    catalog = load_catalog(PricingConfig())
    row = catalog.get("g5.xlarge")
    assert row is not None and row.spot_per_hour is not None
    assert prices["spot"].rate_per_hour == row.spot_per_hour
    assert prices["spot"].market == "spot"
    assert prices["cpu"].rate_per_hour == 0.05 and prices["cpu"].source == "hourly_rate"


def test_a_price_in_another_currency_is_converted_as_the_servers_convert_it() -> None:
    eur = price_profiles({"gpu": {"instance_type": "p4d.24xlarge"}}, currency="EUR",
                         exchange_rates={"USD": 0.5})["gpu"]
    usd = price_profiles({"gpu": {"instance_type": "p4d.24xlarge"}}, currency="USD")["gpu"]
    assert eur.currency == "EUR" and eur.rate_per_hour == pytest.approx(usd.rate_per_hour / 2)
    with pytest.raises(MeterConfigError, match="exchange_rates"):
        price_profiles({"gpu": {"instance_type": "p4d.24xlarge"}}, currency="EUR")


@pytest.mark.parametrize("spec, says", [
    ({"instance_type": "nope.large"}, "not in the price catalog"),
    ({"instance_type": "p4d.24xlarge", "hourly_rate": 3}, "an instance_type or an hourly_rate"),
    ({}, "an instance_type or an hourly_rate"),
    ({"hourly_rate": -1}, "hourly_rate must be a number >= 0"),
    ({"hourly_rate": float("nan")}, "hourly_rate must be a number >= 0"),
    ({"instance_type": "p4d.24xlarge", "gpus": 9}, "9 GPUs, but aws/p4d.24xlarge has 8"),
    ({"instance_type": "p4d.24xlarge", "gpus": 1.5}, "gpus must be a whole number"),
    ({"instance_type": "p4d.24xlarge", "memory": "lots"}, "not a memory size"),
    ({"instance_type": "p4d.24xlarge", "market": "cheap"}, "market"),
    ({"instance_type": "p4d.24xlarge", "gpu": 1}, "unknown keys ['gpu']"),
    ("p4d.24xlarge", "must be a dict"),
])
def test_a_profile_that_cannot_be_priced_stops_the_service_saying_why(spec: object,
                                                                      says: str) -> None:
    with pytest.raises(MeterConfigError) as e:
        price_profiles({"gpu": spec}, currency="USD")
    assert says in str(e.value) and "profile_prices['gpu']" in str(e.value)


def test_memory_as_kubespawner_reads_mem_limit() -> None:
    """JupyterHub's ByteSpecification (KubeSpawner's mem_limit) reads G as 2**30: a
    profile's limit copied as written prices the same share."""
    assert parse_bytes("16G") == 16 * GiB
    assert parse_bytes("16Gi") == 16 * GiB
    assert parse_bytes("512Mi") == 512 * 2 ** 20
    assert parse_bytes(1024) == 1024
    for bad in ("", "16GB", "-1G", 0, True, float("inf")):
        with pytest.raises(ValueError):
            parse_bytes(bad)


# --- the meter in the store ----------------------------------------------------------------

def test_the_meter_accrues_from_the_hubs_start_and_survives_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "hub.sqlite"
    store = HubStore(db)
    running = {("alice", ""): (T0, "gpu"), ("bob", ""): (T0 + 600, "cpu"),
               ("carol", ""): (T0, "unpriced-profile"), ("dan", ""): (None, "gpu")}
    rates = {"gpu": 10.0, "cpu": 1.0}
    store.record_meter(running, rates, T0 + 1800)
    store.record_meter(running, rates, T0 + 3600)
    store.close()
    # the service was down for an hour; the Hub says the same runs are still up
    store = HubStore(db)
    store.record_meter(running, rates, T0 + 3 * HOUR)
    metered = store.metered_total()
    assert metered[("alice", "")] == pytest.approx(30.0)  # 3 h at 10/h since the Hub's start
    assert metered[("bob", "")] == pytest.approx((3 * HOUR - 600) / HOUR)
    assert ("carol", "") not in metered and ("dan", "") not in metered
    # spread by the hour, for periods and charts
    series = {(u, h): v for u, _, h, v, _ in store.series(T0, T0 + 3 * HOUR)}
    assert series[("alice", int(T0 // HOUR))] == pytest.approx(10.0)
    assert series[("alice", int(T0 // HOUR) + 2)] == pytest.approx(10.0)
    # a restart of the server is a new run, metered from its own start
    store.record_meter({("alice", ""): (T0 + 3 * HOUR + 60, "gpu")}, rates, T0 + 4 * HOUR)
    assert store.metered_total()[("alice", "")] == pytest.approx(30.0 + 10 * 3540 / HOUR)
    rows_ = store.meter_rows()
    assert [(m.user, m.run) for m in rows_ if m.user == "alice"] == [("alice", T0 + 3 * HOUR + 60)]


def test_what_is_counted(tmp_path: Path) -> None:
    """metered (default): the meter where the profile is priced, else the report; reported;
    larger. Budgets (the budget book) and pages (totals) count the same figure."""
    figures = {}
    for count in ("metered", "reported", "larger"):
        store = HubStore(tmp_path / f"{count}.sqlite", count=count)
        running = {("alice", ""): (T0, "gpu"), ("bob", ""): (T0, "nope")}
        store.record_meter(running, {"gpu": 10.0}, T0 + HOUR)
        # alice says she spent 1, bob (unpriced profile) 4
        store.record_report("alice", "/user/alice/", "gpu",
                            report(since=T0 + 10, time=T0 + HOUR, spend=1.0, rate=1.0), T0,
                            T0 + HOUR)
        store.record_report("bob", "/user/bob/", "nope",
                            report(since=T0 + 10, time=T0 + HOUR, spend=4.0, rate=4.0), T0,
                            T0 + HOUR)
        totals = store.totals()
        figures[count] = (totals[("alice", "")][0], totals[("bob", "")][0],
                          *(lambda b: (b.spent["alice"], b.spent["bob"]))(
                              store.budget_book(BOOK, T0 + HOUR)))
    assert figures["metered"] == pytest.approx((10.0, 4.0, 10.0, 4.0))
    assert figures["reported"] == pytest.approx((1.0, 4.0, 1.0, 4.0))
    assert figures["larger"] == pytest.approx((10.0, 4.0, 10.0, 4.0))
    with pytest.raises(ValueError, match="count must be one of"):
        HubStore(tmp_path / "x.sqlite", count="whatever")


def test_a_profile_priced_at_zero_counts_zero_whatever_the_server_says(tmp_path: Path) -> None:
    store = HubStore(tmp_path / "hub.sqlite")
    store.record_meter({("alice", ""): (T0, "free")}, {"free": 0.0}, T0 + HOUR)
    store.record_report("alice", "/user/alice/", "free",
                        report(since=T0, time=T0 + HOUR, spend=3.0, rate=3.0), T0, T0 + HOUR)
    assert store.totals()[("alice", "")][0] == 0.0
    assert store.budget_book(BOOK, T0 + HOUR).spent["alice"] == 0.0


def test_an_older_database_gains_the_meter(tmp_path: Path) -> None:
    import sqlite3
    db = tmp_path / "old.sqlite"
    old = sqlite3.connect(db)
    old.executescript(
        "CREATE TABLE hours (user TEXT NOT NULL, server TEXT NOT NULL, hour INTEGER NOT NULL,"
        " spend REAL NOT NULL DEFAULT 0, waste REAL NOT NULL DEFAULT 0, idle_gpu_seconds REAL"
        " NOT NULL DEFAULT 0, PRIMARY KEY (user, server, hour));"
        f"INSERT INTO hours VALUES ('alice', '', {int(T0 // HOUR)}, 2.5, 0, 0);"
        "CREATE TABLE epochs (user TEXT NOT NULL, server TEXT NOT NULL, since REAL NOT NULL, "
        "spend REAL NOT NULL, waste REAL NOT NULL, first_seen REAL NOT NULL, last_seen REAL "
        "NOT NULL, PRIMARY KEY (user, server, since));")
    old.commit()
    old.close()
    store = HubStore(db)
    assert store.budget_book(BOOK, T0 + HOUR).spent == {"alice": 2.5}  # from before the meter
    store.record_meter({("alice", ""): (T0, "gpu")}, {"gpu": 1.0}, T0 + HOUR)
    assert store.budget_book(BOOK, T0 + HOUR).spent["alice"] == pytest.approx(1.0)
    store.record_report("alice", "/user/alice/", "gpu",
                        report(since=T0 + 5, time=T0 + HOUR, spend=0.9, rate=1.0), T0,
                        T0 + HOUR)
    assert store.meter_rows()[0].reported_since == T0 + 5


# --- reconciliation --------------------------------------------------------------------------

def _store_with(tmp_path: Path, spend: float, rate: float) -> HubStore:
    store = HubStore(tmp_path / "hub.sqlite")
    running = {("alice", ""): (T0, "gpu")}
    store.record_cycle({("alice", ""): ("/user/alice/", "gpu")}, {"alice": ["ml"]}, T0 + 60,
                       120.0)
    store.record_meter(running, {"gpu": 10.0}, T0 + HOUR)
    store.record_report("alice", "/user/alice/", "gpu",
                        report(since=T0 + 20, time=T0 + HOUR, spend=spend, rate=rate), T0,
                        T0 + HOUR)
    return store


def test_an_honest_server_is_not_flagged(tmp_path: Path) -> None:
    store = _store_with(tmp_path, spend=10.0 * (HOUR - 20) / HOUR, rate=10.0)
    (s,) = store.servers()
    (m,) = store.meter_rows()
    # the server's own window, kept with its epoch: over it, meter and report agree exactly
    assert m.reported_since == T0 + 20
    assert m.rate_per_hour * (m.reported_at - m.reported_since) / HOUR == pytest.approx(
        m.reported)
    assert flags_of(s, m, Reconcile(0.05, 120)) == []
    (row,) = rows(store, Budgets("month", {}, {}, None), "server", T0 + HOUR,
                  currency="USD", reconcile=Reconcile())
    assert row.counted == "metered" and row.flags is None
    assert row.metered_rate_per_hour == 10.0 and row.spend == pytest.approx(10.0)


@pytest.mark.parametrize("spend, rate, says", [
    (10.0 * (HOUR - 20) / HOUR, 0.0, "reports a rate of 0.00 USD/h; its profile gpu is "
                                     "metered at 10.00/h"),
    (0.5, 10.0, "reports 0.50 USD for this run; its meter counted 10.00"),
])
def test_a_server_below_its_meter_is_flagged_with_both_figures(tmp_path: Path, spend: float,
                                                               rate: float, says: str) -> None:
    store = _store_with(tmp_path, spend=spend, rate=rate)
    (row,) = rows(store, Budgets("month", {}, {}, None), "user", T0 + HOUR, currency="USD",
                  reconcile=Reconcile(0.05, 120))
    assert row.flags and any(says in f for f in row.flags), row.flags
    assert row.spend == pytest.approx(10.0)  # counted: the meter, not the report
    csv_text = to_csv([row])
    assert "metered" in csv_text and says.split(";")[0] in csv_text


def test_a_server_that_never_reports_is_flagged_and_metered(tmp_path: Path) -> None:
    store = HubStore(tmp_path / "hub.sqlite")
    store.record_cycle({("alice", ""): ("/user/alice/", "gpu")}, {}, T0 + 60, 120.0)
    store.record_meter({("alice", ""): (T0, "gpu")}, {"gpu": 10.0}, T0 + HOUR)
    (row,) = rows(store, Budgets("month", {}, {}, None), "server", T0 + HOUR,
                  currency="USD", reconcile=Reconcile())
    assert row.spend == pytest.approx(10.0) and row.currency == "USD"
    assert row.flags and "has reported nothing for this run" in row.flags[0]


def test_budgets_for_many_users_at_once_are_each_users_budgets(tmp_path: Path) -> None:
    """The budget hold reads every user's spend in one query (a group of thousands summed
    member by member for each member was a million queries a cycle at 10,000 servers): the
    same states as the page's one-user path (handlers.budgets_of)."""
    from jupyter_costguard.hub import handlers
    from jupyter_costguard.hub.app import CostGuardHub

    store = HubStore(tmp_path / "hub.sqlite")
    members = {"ann": ["ml"], "bob": ["ml", "cv"], "cy": []}
    store.record_cycle({(u, ""): (f"/user/{u}/", "gpu") for u in members}, members, T0, 120.0)
    store.record_meter({(u, ""): (T0 - i * 600, "gpu") for i, u in enumerate(members)},
                       {"gpu": 6.0}, T0 + HOUR)
    app = CostGuardHub()
    app.store = store
    app.budgets = Budgets("month", {"cy": 1.0}, {"ml": 10.0, "cv": 5.0}, 4.0)
    many = store.budget_states(app.budgets, members, T0 + HOUR)
    for user in members:
        assert many[user] == handlers.budgets_of(app, user, T0 + HOUR), user
    assert [s.scope for s in many["bob"]] == ["user", "group", "group"]


def test_a_group_counts_its_members_of_the_period_whether_or_not_they_run(
        tmp_path: Path) -> None:
    """The service rebuilt group memberships each look at the Hub from the servers running
    then: a member who stopped dropped out of the group's spend and budget, so members beat
    a group budget by not running at the same time, and Finance's group rows lost them."""
    from jupyter_costguard.hub import budgetbook
    from jupyter_costguard.hub.spawn import states_for

    db = tmp_path / "hub.sqlite"
    store = HubStore(db)
    members = {"ann": ["ml"], "bob": ["ml"]}
    store.record_cycle({(u, ""): (f"/user/{u}/", "gpu") for u in members}, members, T0, 120.0)
    store.record_meter({(u, ""): (T0, "gpu") for u in members}, {"gpu": 6.0}, T0 + HOUR)
    # ann stops; the Hub lists bob alone from now on
    store.record_cycle({("bob", ""): ("/user/bob/", "gpu")}, {"bob": ["ml"]}, T0 + HOUR,
                       120.0)
    budgets = Budgets("month", {}, {"ml": 100.0})
    now = T0 + HOUR + 60
    (group,) = store.budget_states(budgets, {"bob": ["ml"]}, now)["bob"]
    assert group.spent == pytest.approx(12.0)  # ann's 6 and bob's 6
    # the spawn hook's figure, read from another process's view of the file: the same
    (hook,) = states_for({"db_path": str(db), "group_budgets": {"ml": 100.0}}, "bob", ["ml"],
                         now)
    assert hook == group
    # the admin's group row and its budget keep ann's spend too
    (row,) = rows(store, budgets, "group", now)
    assert row.key == "ml" and row.spend == pytest.approx(12.0)
    assert row.budget is not None and row.budget.spent == pytest.approx(12.0)
    # a membership seen before this period does not count in it
    assert budgetbook.memberships(store.db, T0 + 40 * 24 * HOUR) == {}
    store.close()


def test_every_consumer_reads_the_same_budget_figures(tmp_path: Path) -> None:
    """The page's rows, the CSV and the budget-used gauge summed spend by their own code
    beside the book the spawn hook, the budget hold and api/me read: one book now, and for
    the same state of the store every consumer shows the same spend against each budget."""
    import csv
    import io
    import re
    import time

    from jupyter_costguard.hub import budgetbook, handlers
    from jupyter_costguard.hub.app import CostGuardHub
    from jupyter_costguard.hub.metrics import HubCollector, exposition
    from jupyter_costguard.hub.spawn import states_for
    from jupyter_costguard.hub.store import counted_sql

    db = tmp_path / "hub.sqlite"
    store = HubStore(db)
    now = time.time()
    members = {"ann": ["ml"], "bob": ["ml", "cv"], "cy": ["cv"], "dee": []}
    budgets = Budgets("month", {"ann": 3.0}, {"ml": 10.0, "cv": 5.0}, 4.0)
    start = budgets.start(now)
    store.record_cycle({(u, ""): (f"/user/{u}/", "gpu") for u in members}, members, now,
                       120.0)
    # each run metered from a few minutes into the period (or before it: only the period's
    # hours count), and bob's earlier server reported on an unpriced profile
    store.record_meter({(u, ""): (max(start, now - 600 * (i + 1)), "gpu")
                        for i, u in enumerate(members)}, {"gpu": 6.0}, now)
    store.record_report("bob", "/user/bob/", "nope",
                        report("b2", since=now - 300, time=now, spend=0.7, rate=1.0),
                        now - 300, now)
    app = CostGuardHub()
    app.store = store
    app.budgets = budgets
    settings = {"db_path": str(db), "default_user_budget": 4.0,
                "user_budgets": {"ann": 3.0}, "group_budgets": {"ml": 10.0, "cv": 5.0}}

    book = store.budget_book(budgets, now)
    expect = {("user", u): book.spent.get(u, 0.0) for u in members}
    expect.update({("group", g): book.group_spend[g] for g in ("ml", "cv")})
    assert expect[("group", "ml")] == pytest.approx(expect[("user", "ann")]
                                                    + expect[("user", "bob")])
    assert all(v > 0 for v in expect.values())

    def figures(states: list[BudgetState]) -> dict[tuple[str, str], float]:
        return {(s.scope, s.name): s.spent for s in states}

    seen: dict[str, dict[tuple[str, str], float]] = {}
    hold = store.budget_states(budgets, members, now)  # the budget hold's, each cycle
    seen["hold"] = {k: v for u in members for k, v in figures(hold[u]).items()}
    seen["api/me budgets"] = {k: v for u in members
                              for k, v in figures(handlers.budgets_of(app, u, now)).items()}
    seen["spawn hook"] = {k: v for u in members for k, v in figures(
        states_for(settings, u, members[u], now)).items()}
    seen["spawn check"] = {k: v for u in members for k, v in figures(budgetbook.admit(
        db, counted_sql("metered"), budgets, u, "", members[u], now, 0.0, 60.0).states).items()}
    rows_ = rows(store, budgets, "user", now) + rows(store, budgets, "group", now)
    seen["page rows, api/me totals"] = {(r.budget.scope, r.budget.name): r.budget.spent
                                        for r in rows_ if r.budget is not None}
    seen["csv"] = {("group" if line["group"] else "user", line["key"]):
                   float(line["budget_spent"]) for line in csv.DictReader(io.StringIO(
                       to_csv(rows_))) if line["budget_spent"]}
    ratio = re.compile(r'costguard_hub_budget_used_ratio\{name="([^"]+)",period="month",'
                       r'scope="([^"]+)"\} (\S+)')
    body = exposition(HubCollector(store, budgets, lambda: None)).decode()
    seen["metrics"] = {(scope, name): float(v) * ((budgets.for_user(name) if scope == "user"
                                                    else budgets.for_group(name)) or 0.0)
                       for name, scope, v in ratio.findall(body)}
    for consumer, found in seen.items():
        assert found.keys() == expect.keys(), consumer
        for key, value in expect.items():
            assert found[key] == pytest.approx(value, abs=1e-6), (consumer, key)
    store.close()
