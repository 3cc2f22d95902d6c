"""The meter on the real hub, against users who bend their own server's figures.

A real JupyterHub with its real proxy and the costguard service; four members of group ml run
the GPU profile, priced by the site as a p4d.24xlarge (`profile_prices`). The servers are told
the same instance type by the profile's environment (`COSTGUARD_INSTANCE_TYPE`), as a site's
profile would. Alice is honest; each of the others has one line in their own
`jupyter_server_config.py` that lowers what their server reports:

- ivan: `c.CostGuard.instance_type = "nope"`: his server runs unpriced, reporting 0/h;
- eve: `c.CostGuard.enabled = False`: her server reports nothing at all;
- zed: `c.CostGuard.idle_gpu_threshold_percent = 0`: his held GPUs always count as busy.

What the site counts (the meter, by default) is the same for all four: the profile's price x
the time since the Hub started the server; a budget spent by it refuses the next GPU spawn of
an honest and a hostile member alike; the admin page flags ivan and eve with both figures, and
not alice or zed (whose money figures are honest). The honest server's reported rate and its
meter agree to the cent: one price engine on both sides.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from jupyter_costguard.hub.spawn import load_settings, states_for
from jupyter_costguard.hub.store import read_only
from tests.support.hub import Hub, HubUser, gpu_trace, wait_for

pytestmark = pytest.mark.timeout(600)

INSTANCE = "p4d.24xlarge"
RATE = 21.957642  # the shipped catalog's on-demand price of a p4d.24xlarge (checked below)
BUDGET = 0.05  # each member's: spent by the meter in about 8 s of a p4d
GROUP_BUDGET = 1000.0  # the group's: never spent here, its figure is what is checked
HOSTILE = {
    "ivan": 'c.CostGuard.instance_type = "nope"\n',
    "eve": "c.CostGuard.enabled = False\n",
    "zed": "c.CostGuard.idle_gpu_threshold_percent = 0\n",
}
MEMBERS = ("alice", *HOSTILE)


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    d = tmp_path_factory.mktemp("hubmeter")
    users = [HubUser(name, gpu_trace(d / f"{name}.json", 0), ["ml"],
                     server_config="c = get_config()  # noqa\n" + HOSTILE.get(name, ""))
             for name in MEMBERS]
    users.append(HubUser("admin", gpu_trace(d / "admin.json", 0), []))
    h = Hub(d / "hub", users, service_settings={
        # the price table alone says what is a GPU profile (a p4d holds 8) and which
        # profiles the site has: no gpu_profiles
        "profile_prices": {"gpu": {"instance_type": INSTANCE}},
        "default_user_budget": BUDGET, "group_budgets": {"ml": GROUP_BUDGET},
        # a server starts reporting a few seconds after the Hub starts it
        "reconcile_grace_seconds": 20.0},
        # the profile tells its servers what they run on; the whole instance is theirs
        env={"COSTGUARD_INSTANCE_TYPE": INSTANCE, "COSTGUARD_CONTAINER_SHARE": "off"},
        extra_config="from jupyter_costguard.hub.spawn import budget_hook\n"
                     "c.Spawner.pre_spawn_hook = budget_hook(spec['service_config'])\n")
    h.start()
    try:
        h.admin_token = h.token_for("admin")  # type: ignore[attr-defined]
        wait_for(lambda: h.service("api/spend", h.admin_token)[0] == 200,  # type: ignore
                 60, "the service")
        for name in MEMBERS:
            h.start_server(name, {"profile": "gpu"})
        for name in MEMBERS:
            h.wait_ready(name)
        yield h
    finally:
        h.stop()


def started_of(hub: Hub, user: str) -> float:
    model = (hub.api("GET", f"/users/{user}").get("servers") or {}).get("") or {}
    return datetime.fromisoformat(model["started"]).timestamp()


def meter(hub: Hub) -> dict[str, tuple[float, float, float, float]]:
    """user -> (run, rate, spend, last) of the service's meter, read from its SQLite."""
    found = read_only(hub.service_db, (
        "SELECT user, run, rate_per_hour, spend, last FROM meter WHERE server = ''", ()))
    return {} if found is None else {u: (run, rate, spend, last)
                                     for u, run, rate, spend, last in found[0]}


def metered_total(hub: Hub) -> dict[str, float]:
    """user -> all the meter has counted for them, every run. `meter` keeps one run a user,
    whichever row comes last: a stopped user's later run (CI once saw a run open for the
    moment of a refused spawn) would hide the spend of the run that was stopped."""
    found = read_only(hub.service_db, (
        "SELECT user, SUM(spend) FROM meter WHERE server = '' GROUP BY user", ()))
    return {} if found is None else {u: float(spend) for u, spend in found[0]}


def by_server(hub: Hub) -> dict[str, dict[str, Any]]:
    status, doc = hub.service("api/spend?by=server", hub.admin_token)  # type: ignore
    assert status == 200, doc
    return {r["user"]: r for r in doc["rows"]}


def test_the_catalog_price_this_suite_relies_on() -> None:
    from jupyter_costguard.cost.catalog import Catalog
    row = Catalog.load().get(INSTANCE)
    assert row is not None and row.on_demand_per_hour == RATE


def test_every_member_is_metered_alike_and_the_bent_reports_are_flagged(hub: Hub) -> None:
    # the meter has run 30 s for every server, and the honest one has reported
    wait_for(lambda: len(m := meter(hub)) == len(MEMBERS) and all(
        last - run >= 30 for run, _, _, last in m.values()), 120, "30 s of the meter")
    wait_for(lambda: (lambda r: r["alice"]["flags"] == [] and r["alice"]["rate_per_hour"] > 0
                      and r["ivan"]["flags"] and r["eve"]["flags"])(by_server(hub)), 60,
             "the reports and the flags")
    m = meter(hub)
    rows = by_server(hub)
    for user in MEMBERS:
        run, rate, spend, last = m[user]
        r = rows[user]
        # the Hub's start, the site's price: nothing the user's config says
        assert run == pytest.approx(started_of(hub, user), abs=1e-3), user
        assert rate == RATE and r["metered_rate_per_hour"] == RATE, user
        assert spend == pytest.approx(RATE * (last - run) / 3600, rel=1e-9), user
        # what the site counts is the meter (it has moved on since: at least as much)
        assert r["counted"] == "metered" and r["currency"] == "USD", user
        assert r["spend"] >= spend - 1e-6, (user, r)  # the page rounds to 6 places
        assert r["budget"] is None  # budgets are on user rows
    # the honest server and its meter: the same rate, to the cent (one price engine)
    assert round(rows["alice"]["rate_per_hour"], 2) == round(RATE, 2)
    # conservation for the servers honest about money (alice, zed): what each reported for
    # its run is what the meter counts over the same window (from the server's own start,
    # a few seconds after the Hub's, to its report), to the cent, and so is their sum
    found = read_only(hub.service_db, (
        "SELECT m.user, m.rate_per_hour, e.spend, e.reported_since, e.last_seen FROM meter m "
        "JOIN epochs e ON e.user = m.user AND e.server = m.server AND e.since = m.run "
        "WHERE m.user IN ('alice', 'zed')", ()))
    assert found is not None and len(found[0]) == 2, found
    metered_window = reported_sum = 0.0
    for user, rate, reported, since, at in found[0]:
        window = rate * (at - since) / 3600
        assert abs(window - reported) < 0.01, (user, window, reported)
        metered_window += window
        reported_sum += reported
    assert abs(metered_window - reported_sum) < 0.01
    # each GPU spawn reserved its 1 s look's worth in the Hub's process, in the service's
    # file, and the service released every reservation once its meter counted the server
    log = hub.log_path.read_text(errors="replace")
    for user in MEMBERS:
        assert f"costguard: {user}'s GPU server reserves " in log, user
    assert read_only(hub.service_db, ("SELECT user FROM reservations", ())) == [[]]
    # what the bent servers say, beside what is counted: the admin's rate is the counted
    # one (the meter's), not ivan's word of 0/h; what he says is shown beside it
    assert rows["ivan"]["reported_rate_per_hour"] == 0.0
    assert rows["ivan"]["rate_per_hour"] == RATE
    assert rows["eve"]["rate_per_hour"] == RATE
    assert any("reports a rate of 0.00" in f and f"metered at {RATE:.2f}/h" in f
               for f in rows["ivan"]["flags"]), rows["ivan"]
    assert any("has reported nothing for this run" in f for f in rows["eve"]["flags"]), \
        rows["eve"]
    assert rows["zed"]["flags"] == []
    assert round(rows["zed"]["rate_per_hour"], 2) == round(RATE, 2)
    # by user: the same counted figures, flagged users flagged; the CSV says both too
    status, doc = hub.service("api/spend?by=user", hub.admin_token)  # type: ignore
    assert status == 200
    users = {r["user"]: r for r in doc["rows"]}
    assert [u for u in MEMBERS if users[u]["flags"]] == ["ivan", "eve"]
    # the page's "Rate now" is the sum of these rows: the counted rate of every member
    assert sum(users[u]["rate_per_hour"] for u in MEMBERS) == pytest.approx(RATE * 4)
    # waste is never above what is counted as spent
    assert all(r["waste"] <= r["spend"] + 1e-9 for r in doc["rows"]), doc["rows"]
    status, csv_text = hub.service("api/spend.csv?by=server", hub.admin_token)  # type: ignore
    assert status == 200 and "metered_rate_per_hour" in csv_text and "reports a rate" in csv_text
    # and the metrics
    status, text = hub.service("metrics", hub.admin_token)  # type: ignore
    assert status == 200
    from prometheus_client.parser import text_string_to_metric_families
    samples = {(s.name, s.labels.get("user")): s.value
               for f in text_string_to_metric_families(text) for s in f.samples}
    for user in MEMBERS:
        assert samples[("costguard_hub_user_metered_rate_per_hour", user)] == RATE
        assert samples[("costguard_hub_user_spend_rate_per_hour", user)] == RATE
        assert samples[("costguard_hub_user_flagged_servers", user)] == (user in ("ivan", "eve"))


def test_a_budget_spent_by_the_meter_refuses_honest_and_hostile_alike(hub: Hub) -> None:
    # each member has been metered past the budget, whatever their server says
    wait_for(lambda: all(spend > BUDGET for _, _, spend, _ in meter(hub).values())
             and len(meter(hub)) == len(MEMBERS), 120, "every budget spent by the meter")
    settings = load_settings(hub.service_config)
    for user in MEMBERS:
        states = {s.scope: s for s in states_for(settings, user, ["ml"],
                                                 __import__("time").time())}
        state = states["user"]
        assert state.exhausted and state.spent > BUDGET, (user, state)
        assert not states["group"].exhausted, states
    # the next GPU spawn is refused for the honest and for the one who reported nothing
    for user in ("alice", "ivan"):
        hub.stop_server(user)
        wait_for(lambda u=user: not (hub.api("GET", f"/users/{u}").get("servers") or {}),
                 60, f"{user} stopped")
        status, _, body = hub.request("POST", f"/hub/api/users/{user}/server",
                                      hub.tester_token, {"profile": "gpu"})
        assert status == 403, (user, body)
        assert "GPU servers are refused" in json.loads(body)["message"], body
        # a spawn that names no profile runs the site's default, a GPU one: refused alike
        # (it was taken as "not GPU" by the hook while the meter priced it as the GPU one)
        for options in ({}, {"user_options": {}}):
            status, _, body = hub.request("POST", f"/hub/api/users/{user}/server",
                                          hub.tester_token, options)
            assert status == 403, (user, options, body)
            assert "GPU servers are refused" in json.loads(body)["message"], body
        # a profile the site does not list is refused, not counted at the user's word
        for profile in ("zzz", "cpu", "GPU", "gpu\n"):
            status, _, body = hub.request("POST", f"/hub/api/users/{user}/server",
                                          hub.tester_token, {"profile": profile})
            assert status == 403, (user, profile, body)
            message = json.loads(body)["message"]
            assert "not one this hub offers" in message and "'gpu'" in message, message
        assert not (hub.api("GET", f"/users/{user}").get("servers") or {}), user


def test_a_stopped_members_spend_counts_toward_their_group(hub: Hub) -> None:
    """Alice and ivan were stopped above; their spend this period still counts toward group
    ml, for its budget (the spawn hook's and the pages' figure) and in Finance's group rows.
    The group's members were rebuilt from the servers running now, so it dropped."""
    import time
    metered = metered_total(hub)
    stopped = ("alice", "ivan")
    assert all(metered[u] > BUDGET for u in stopped), metered
    # the service has looked at the Hub since they stopped (their rows say so)
    wait_for(lambda: all(by_server(hub)[u]["state"] == "stopped" for u in stopped), 60,
             "alice and ivan stopped on the page")
    floor = sum(metered.values())
    for user in ("zed", *stopped):
        states = {s.scope: s for s in states_for(load_settings(hub.service_config), user,
                                                 ["ml"], time.time())}
        assert states["group"].spent >= floor - 1e-6, (user, states, metered)
    status, doc = hub.service("api/spend?by=group", hub.admin_token)  # type: ignore
    assert status == 200, doc
    (ml,) = [r for r in doc["rows"] if r["key"] == "ml"]
    assert ml["spend"] >= floor - 1e-6, (ml, metered)
    assert ml["budget"]["spent"] >= floor - 1e-6, (ml, metered)
    status, text = hub.service("api/spend.csv?by=group", hub.admin_token)  # type: ignore
    assert status == 200, text
    import csv
    import io
    (row,) = [r for r in csv.DictReader(io.StringIO(text)) if r["key"] == "ml"]
    assert float(row["spend"]) >= floor - 1e-6 and float(row["budget_spent"]) >= floor - 1e-6


def test_the_meter_survives_a_restart_of_the_service(hub: Hub) -> None:
    """The service killed outright: the Hub restarts it, and the meter of a server still
    running carries on from its last figure, counting the time the service was down."""
    import os
    import signal
    before = meter(hub)["zed"]
    for pid in hub.service_pids():
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: hub.service_pids(), 60, "the Hub restarting the service")
    wait_for(lambda: meter(hub).get("zed", before)[3] > before[3] + 2, 90,
             "the meter moving again")
    run, _rate, spend, last = meter(hub)["zed"]
    assert run == before[0]
    assert spend == pytest.approx(RATE * (last - run) / 3600, rel=1e-9)
    assert spend > before[2]


def test_a_profile_table_that_cannot_be_priced_stops_the_service(tmp_path: Path) -> None:
    import subprocess
    import sys
    config = tmp_path / "c.py"
    config.write_text("c = get_config()  # noqa\n"
                      "c.CostGuardHub.profile_prices = {'gpu': {'instance_type': 'nope'}}\n"
                      f"c.CostGuardHub.db_path = {str(tmp_path / 'x.sqlite')!r}\n")
    env = {**__import__("os").environ, "JUPYTERHUB_API_TOKEN": "x",
           "JUPYTERHUB_API_URL": "http://127.0.0.1:9/hub/api"}
    out = subprocess.run([sys.executable, "-m", "jupyter_costguard.hub", f"--config={config}"],
                         capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 2, out
    assert "not starting" in out.stderr and "profile_prices['gpu']" in out.stderr
    assert "not in the price catalog" in out.stderr
