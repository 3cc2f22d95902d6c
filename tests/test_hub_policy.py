"""GPU-aware culling and budgets at spawn on a real JupyterHub with real costguard servers:
the idle GPU server is warned in its own JupyterLab (the warning travels back in the answer
to its report), then stopped; the GPU-busy but kernel-silent one never, under a policy that
trusts what servers report; "Keep running" keeps it; the real jupyterhub-idle-culler with the
arbiter hook decides the same; a GPU spawn over budget is refused with the reason, a CPU one
is not."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_costguard.common.hubprotocol import Report
from jupyter_costguard.hub.cull import (
    ALERT_KIND,
    DEFER,
    KEEP,
    STOP,
    WARN,
    Culler,
    decide,
    policies_from,
)
from jupyter_costguard.hub.store import HubStore
from tests.support.hub import BIN, Hub, HubUser, gpu_trace, wait_for

pytestmark = pytest.mark.timeout(600)

#: a GPU profile's servers are stopped after 24 s with every GPU idle, warned 12 s before;
#: this site trusts its users' reports of a busy GPU (tests/test_hub_abuse.py: one that does not)
POLICY = {"name": "gpu", "profiles": ["gpu"], "idle_minutes": 0.4, "warn_minutes": 0.2,
          "trust_reported_activity": True}
USERS = {"erin": 0, "frank": 90, "gina": 0, "hank": 0, "dave": 0, "kim": 0}
#: how many times a day a server's user may keep it running
KEEPS_PER_DAY = 2


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    d = tmp_path_factory.mktemp("hubpolicy")
    users = [HubUser(name, gpu_trace(d / f"{name}.json", util), ["lab"])
             for name, util in USERS.items()]
    h = Hub(d / "hub", users, service_settings={
        "cull_policies": [POLICY], "gpu_profiles": {"gpu"}, "budget_period": "day",
        "user_budgets": {"dave": 0.002}, "cull_keeps_per_day": KEEPS_PER_DAY},
        extra_config="from jupyter_costguard.hub.spawn import budget_hook\n"
                     "c.Spawner.pre_spawn_hook = budget_hook(spec['service_config'])\n")
    h.start()
    try:
        yield h
    finally:
        h.stop()


def running(hub: Hub, user: str) -> bool:
    server = (hub.api("GET", f"/users/{user}").get("servers") or {}).get("")
    return bool(server and server.get("ready"))


def alerts(hub: Hub, user: str) -> list[dict[str, Any]]:
    status, _, data = hub.request("GET", f"/user/{user}/costguard/api/alerts?include=all",
                                  hub.tester_token)
    return json.loads(data)["alerts"] if status == 200 else []


def service_event_rows(hub: Hub) -> list[tuple[float, str, str, str, str]]:
    """The service's event log, oldest first (read from its SQLite)."""
    store = HubStore(hub.service_db)
    try:
        return list(reversed(store.events()))
    finally:
        store.close()


def service_events(hub: Hub) -> list[tuple[str, str]]:
    return [(u, k) for _, u, _, k, _ in service_event_rows(hub)]


def test_the_idle_gpu_server_is_warned_then_stopped_and_the_busy_one_never(hub: Hub) -> None:
    # frank first, and his kernel as soon as his server answers: until the kernel holds the
    # GPU his server is idle too, and on a loaded machine waiting for the others' start took
    # longer than the policy's warning lead (he was warned)
    hub.start_server("frank", {"profile": "gpu"})
    hub.wait_ready("frank")
    hub.start_kernel("frank")  # holds GPU 0 at 90% in frank's trace, and runs no cell
    for user in ("erin", "gina"):
        hub.start_server(user, {"profile": "cpu" if user == "gina" else "gpu"})
    for user in ("erin", "gina"):
        hub.wait_ready(user)
    # the warning reaches erin's own JupyterLab (her server's alerts) before the stop
    warning = wait_for(lambda: next((a for a in alerts(hub, "erin")
                                     if a["kind"] == ALERT_KIND), None), 30, "the warning")
    assert warning["actions"] == [{"id": "dismiss", "label": "Keep running"}]
    assert "will be stopped in" in warning["title"]
    assert running(hub, "erin")
    wait_for(lambda: not running(hub, "erin"), 40, "erin stopped")
    kinds = service_events(hub)
    assert kinds.index(("erin", "warn")) < kinds.index(("erin", "stop"))
    times = {k: t for t, u, _, k, _ in service_event_rows(hub) if u == "erin"}
    # warned the policy's 12 s ahead at least, and not stopped before the 24 s limit
    assert times["stop"] - times["warn"] >= 12
    assert times["stop"] >= warning["details"]["stop_at"]
    # frank's kernels are silent, his GPU busy: never culled; gina's profile has no policy
    time.sleep(5)
    assert running(hub, "frank") and running(hub, "gina")
    assert ("frank", "warn") not in kinds and ("gina", "warn") not in service_events(hub)
    assert not [a for a in alerts(hub, "frank") if a["kind"] == ALERT_KIND]
    status, doc = hub.service("api/events", hub.token_for("admin"))
    assert status == 200
    stop = next(e for e in doc["events"] if e["user"] == "erin" and e["kind"] == "stop")
    assert "every GPU idle" in stop["detail"] and "policy gpu" in stop["detail"]


def test_keep_running_keeps_the_server(hub: Hub) -> None:
    hub.start_server("hank", {"profile": "gpu"})
    hub.wait_ready("hank")
    warning = wait_for(lambda: next((a for a in alerts(hub, "hank")
                                     if a["kind"] == ALERT_KIND), None), 30, "the warning")
    # what JupyterLab's "Keep running" button does
    status, _, _ = hub.request("POST", f"/user/hank/costguard/api/alerts/{warning['id']}/"
                               "dismiss", hub.tester_token, {})
    assert status == 200
    kept_at = time.time()
    wait_for(lambda: ("hank", "kept") in service_events(hub), 15, "the keep recorded")
    # the idle clock starts again: still up past the original limit
    time.sleep(max(0.0, kept_at + 14 - time.time()))
    assert running(hub, "hank")
    assert ("hank", "stop") not in service_events(hub)
    hub.stop_server("hank")


def test_the_idle_culler_with_the_arbiter_hook_decides_the_same(hub: Hub, tmp_path: Path,
                                                                 ) -> None:
    """The real jupyterhub-idle-culler, every server idle by its rule (1 s): the hook keeps
    frank (GPU busy), lets the usual rule cull gina (no policy), and logs each decision."""
    assert running(hub, "frank") and running(hub, "gina")
    log = tmp_path / "decisions.jsonl"
    config = tmp_path / "culler_config.py"
    config.write_text(
        "import json\n"
        "from jupyter_costguard.hub.cull import cull_arbiter_hook\n"
        f"arbiter = cull_arbiter_hook({str(hub.service_config)!r})\n"
        "def logged(**kw):\n"
        "    result = arbiter(**kw)\n"
        f"    with open({str(log)!r}, 'a') as f:\n"
        "        f.write(json.dumps({'server': kw['server']['full_name'],"
        " 'inactive': kw['inactive'].total_seconds(), 'cull': result}) + '\\n')\n"
        "    return result\n"
        "c = get_config()  # noqa\n"
        "c.IdleCuller.cull_arbiter_hook = logged\n")
    culler = subprocess.Popen(
        [sys.executable, "-m", "jupyterhub_idle_culler", f"--config={config}",
         f"--url={hub.url}/hub/api", "--timeout=1", "--cull-every=2"],
        env={"JUPYTERHUB_API_TOKEN": hub.tester_token, "PATH": str(BIN)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: not running(hub, "gina"), 40, "gina culled by the usual rule")
        wait_for(lambda: log.exists() and any(
            json.loads(line)["server"] == "frank/" and json.loads(line)["inactive"] >= 1
            for line in log.read_text().splitlines()), 20, "frank judged")
    finally:
        culler.terminate()
        out = culler.communicate(timeout=10)[0].decode(errors="replace")
    decisions = [json.loads(line) for line in log.read_text().splitlines()]
    assert {d["cull"] for d in decisions if d["server"] == "frank/"} == {False}, out
    assert any(d["cull"] for d in decisions if d["server"] == "gina/"), out
    assert running(hub, "frank")
    hub.stop_server("frank")


def test_a_gpu_spawn_over_budget_is_refused_and_a_cpu_spawn_is_not(hub: Hub) -> None:
    hub.start_server("dave", {"profile": "cpu"})
    hub.wait_ready("dave")
    # 36/h: the 0.002 budget is spent in a fraction of a second of polls
    wait_for(lambda: (lambda s: s[1]["rows"] and s[1]["rows"][0]["budget"] and
                      s[1]["rows"][0]["budget"]["used"] >= 1)(
        hub.service("api/spend?by=user&user=dave", hub.token_for("admin"))), 30,
        "dave over budget")
    status, me = hub.service("api/me", hub.token_for("dave"))
    assert status == 200 and me["budgets"][0]["remaining"] == 0
    assert me["budgets"][0]["period"] == "day"
    hub.stop_server("dave")
    wait_for(lambda: not running(hub, "dave"), 30, "dave stopped")
    status, _, body = hub.request("POST", "/hub/api/users/dave/server", hub.tester_token,
                                  {"profile": "gpu"})
    assert status == 403, body
    message = json.loads(body)["message"]
    assert "GPU servers are refused" in message and "daily budget of 0.00 USD" in message
    assert "a CPU profile can still be started" in message
    assert not running(hub, "dave")
    status, _, body = hub.request("POST", "/hub/api/users/dave/server", hub.tester_token,
                                  {"profile": "cpu"})
    assert status in (201, 202), body
    hub.wait_ready("dave")
    # the server was told its budget at spawn
    doc = hub.server_status("dave")
    assert doc["hub_budgets"][0]["scope"] == "user"
    assert doc["hub_budgets"][0]["remaining"] == 0


def test_a_script_that_answers_every_warning_with_keep_running_is_stopped(hub: Hub) -> None:
    """Kim's automation dismisses every cull warning the moment it shows ("Keep running"),
    as a script in her own server could. Each keep restarted the idle clock, so her idle GPU
    was never stopped; now the day's keeps run out and the warning stands."""
    hub.start_server("kim", {"profile": "gpu"})
    hub.wait_ready("kim")
    answered: set[str] = set()
    deadline = time.monotonic() + 240
    while running(hub, "kim") and time.monotonic() < deadline:
        for a in alerts(hub, "kim"):
            if a["kind"] == ALERT_KIND and a["state"] == "active" and a["id"] not in answered:
                status, _, _ = hub.request(
                    "POST", f"/user/kim/costguard/api/alerts/{a['id']}/dismiss",
                    hub.tester_token, {})
                if status == 200:
                    answered.add(a["id"])
        time.sleep(0.5)
    assert not running(hub, "kim"), "an automated keep kept an idle GPU server"
    kinds = [k for u, k in service_events(hub) if u == "kim"]
    assert kinds.count("kept") == KEEPS_PER_DAY, kinds
    assert "keep-refused" in kinds and kinds[-1] == "stop", kinds
    assert len(answered) > KEEPS_PER_DAY  # it did answer the warning it was refused


# --- dry run: the culler's decisions on a real store ---------------------------------------

def report(t: float, **kw: Any) -> Report:
    fields: dict[str, Any] = {
        "server": "", "time": t, "since": t - 3600, "spend": 1.0, "waste": 0.5,
        "currency": "USD", "simulated": True, "rate_per_hour": 10.0, "gpu_count": 2,
        "gpus_held": 0, "gpus_busy": 0, "gpu_idle_since": t - 1000, **kw}
    return Report(**fields)


async def test_dry_run_logs_and_records_what_it_would_stop_and_stops_nothing(
        tmp_path: Path) -> None:
    store = HubStore(tmp_path / "hub.sqlite")
    t0 = 1_800_000_000.0
    store.record_report("ann", "/user/ann/", "gpu", report(t0))
    stops: list[tuple[str, str]] = []

    async def stop(user: str, server: str) -> None:
        stops.append((user, server))

    culler = Culler(policies_from([POLICY]), stop, dry_run=True, record=store.add_event,
                    log=__import__("logging").getLogger("test"))
    rows = store.servers()
    first = await culler.run(rows, {}, t0)
    assert first[0][1].action == WARN  # past the limit, but never stopped unwarned
    # the warning goes out with the answer to ann's next report
    warnings = culler.warnings_for(("ann", ""), t0 + 1)
    assert [w["key"] for w in warnings] == [f"{ALERT_KIND}:{t0 - 1000:.0f}"]
    assert warnings[0]["actions"] == [{"id": "dismiss", "label": "Keep running"}]
    assert (await culler.run(rows, {}, t0 + 12))[0][1].action == WARN  # 11 s after: not yet
    later = await culler.run(rows, {}, t0 + 13)
    assert later[0][1].action == STOP
    assert not stops
    assert [k for _, _, _, k, _ in store.events()] == ["would-stop", "warn"]


async def test_a_reported_busy_gpu_keeps_a_server_only_where_the_policy_trusts_it(
        tmp_path: Path) -> None:
    store = HubStore(tmp_path / "hub.sqlite")
    t0 = 1_800_000_000.0
    store.record_report("ann", "/user/ann/", "gpu", report(t0, gpus_held=1, gpus_busy=1,
                                                            gpu_idle_since=None))
    busy = store.servers()[0]
    assert decide(busy, [], policies_from([POLICY]), t0 + 1).action == KEEP
    untrusted = {**POLICY, "trust_reported_activity": False}
    d = decide(busy, [], policies_from([untrusted]), t0 + 1)
    assert d.action == DEFER and "does not take a server's word" in d.reason
    # silence defers too: a server whose last report is old is never kept by costguard
    assert decide(busy, [], policies_from([POLICY]), t0 + 600).action == DEFER


async def test_keeps_past_the_days_limit_are_refused_and_the_warning_says_so(
        tmp_path: Path) -> None:
    store = HubStore(tmp_path / "hub.sqlite")
    t0 = 1_800_000_000.0
    stops: list[tuple[str, str]] = []

    async def stop(user: str, server: str) -> None:
        stops.append((user, server))

    culler = Culler(policies_from([POLICY]), stop, dry_run=False, record=store.add_event,
                    log=__import__("logging").getLogger("test"), keeps_per_day=1)
    t = t0
    store.record_report("ann", "/user/ann/", "gpu", report(t, gpu_idle_since=t - 1000))
    assert (await culler.run(store.servers(), {}, t))[0][1].action == WARN
    (w,) = culler.warnings_for(("ann", ""), t + 1)
    assert culler.kept_by_user(("ann", ""), [w["key"]], t + 2)  # the day's one keep
    t += 20  # idle again past the limit since the keep
    store.record_report("ann", "/user/ann/", "gpu", report(t, gpu_idle_since=t0 - 1000))
    assert (await culler.run(store.servers(), {}, t))[0][1].action == WARN
    (w,) = culler.warnings_for(("ann", ""), t + 1)
    assert w["details"]["can_keep"] is False
    assert w["actions"] == [{"id": "dismiss", "label": "Hide"}]
    assert not culler.kept_by_user(("ann", ""), [w["key"]], t + 2)
    # a day later the user may keep again
    assert culler.may_keep(("ann", ""), t0 + 2 + 86400)
    last = await culler.run(store.servers(), {}, t + 14)
    assert last[0][1].action == STOP and stops == [("ann", "")]
    kinds = [k for _, _, _, k, _ in reversed(store.events())]
    assert kinds == ["warn", "kept", "warn", "keep-refused", "stop"], kinds


def test_a_keep_does_not_hold_past_the_ceiling_of_node_idle_time() -> None:
    from jupyter_costguard.hub.storerows import server_row, with_node_activity
    t0 = 1_800_000_000.0
    # the server reports its GPU busy; the node (dcgm-exporter) shows it idle for 50 min
    row = with_node_activity(server_row((
        "ann", "", "/user/ann/", "ok", "", t0, t0, "USD", 1, 10.0, 2, 1, 1, None, "gpu", 0,
        1, 0, t0, t0 - 3000, 0)), t0, 60.0)
    assert row.activity_source == "node"
    policies = policies_from([{**POLICY, "idle_minutes": 10, "warn_minutes": 1}])
    kept = t0 - 60  # kept a minute ago: the idle clock restarted
    assert decide(row, [], policies, t0, kept).action == KEEP
    # the node has shown every GPU idle for 50 min: past a 45 min ceiling no keep holds
    assert decide(row, [], policies, t0, kept, keep_ceiling=45 * 60).action == STOP
    assert decide(row, [], policies, t0, kept, keep_ceiling=55 * 60).action == KEEP


async def test_a_server_that_goes_silent_after_its_warning_round_began_is_still_stopped(
        ) -> None:
    """Judged by the node's figures, warned while it reported, silent before any answer
    carried the warning: its lead ran from never, so it was never stopped. Now from the
    first round that finds it silent."""
    from jupyter_costguard.hub.storerows import server_row, with_node_activity
    t0 = 1_800_000_000.0
    stops: list[tuple[str, str]] = []

    async def stop(user: str, server: str) -> None:
        stops.append((user, server))

    def row(state: str) -> Any:
        return with_node_activity(server_row((
            "ann", "", "/user/ann/", state, "", t0, t0, "USD", 1, 10.0, 2, 1, 0, t0 - 1000,
            "gpu", 0, 1, 0, t0 + 100, t0 - 1000, 0)), t0 + 100, 600.0)

    culler = Culler(policies_from([POLICY]), stop, dry_run=False,
                    record=lambda *a: None, log=__import__("logging").getLogger("test"))
    assert (await culler.run([row("ok")], {}, t0))[0][1].action == WARN
    silent = row("stale")
    assert (await culler.run([silent], {}, t0 + 5))[0][1].action == WARN
    assert (await culler.run([silent], {}, t0 + 5 + 13))[0][1].action == STOP
    assert stops == [("ann", "")]


# --- one stop decision, the same inputs for the service's culler and the arbiter (issue 44) --

UNTRUSTED = {"name": "gpu", "profiles": ["gpu"], "idle_minutes": 10, "warn_minutes": 1,
             "trust_reported_activity": False}


def _site_config(tmp_path: Path, **extra: Any) -> Path:
    """A hub config whose default profile (a spawn that names none) is the GPU one."""
    settings = {"db_path": str(tmp_path / "hub.sqlite"), "cull_policies": [UNTRUSTED],
                "gpu_profiles": ["gpu"], "default_profile": "gpu", **extra}
    path = tmp_path / "costguard_hub_config.py"
    path.write_text("".join(f"c.CostGuardHub.{k} = {v!r}\n" for k, v in settings.items()))
    return path


def _arbiter(config: Path, now: float, inactive: float) -> bool:
    """The arbiter hook's answer, for a culler that saw `ann` inactive this long (limit 1 h)."""
    from datetime import timedelta

    from jupyter_costguard.hub.cull import cull_arbiter_hook
    return cull_arbiter_hook(config, clock=lambda: now)(
        inactive=timedelta(seconds=inactive), inactive_limit=3600.0,
        server={"full_name": "ann/"})


def test_a_busy_gpu_while_no_kernel_executes_is_never_idle_to_culler_nor_arbiter(
        tmp_path: Path) -> None:
    """A server whose kernel sits at its prompt for hours while its training thread keeps the
    GPU at work: the node shows the GPU busy, the server reports it busy and no idle clock.
    Idle by no measure (`row_idleness`, the one stop decision): the service's culler keeps
    it and the arbiter never stops it, however long the Hub saw no kernel activity."""
    from jupyter_costguard.common.gpuactivity import BUSY
    from jupyter_costguard.hub.cull import judged_row, row_idleness
    from jupyter_costguard.hub.settings import HubSettings

    config = _site_config(tmp_path)
    settings = HubSettings.load(config)
    store = HubStore(settings.db_path)
    t0 = 1_800_000_000.0
    store.record_cycle({("ann", ""): ("/user/ann/", "gpu")}, {}, t0 - 3600, 65.0)
    store.record_report("ann", "/user/ann/", "gpu",
                        report(t0, gpus_held=1, gpus_busy=1, gpu_idle_since=None),
                        received=t0)
    row = store.servers()[0]
    assert row_idleness(row) == BUSY
    assert decide(row, [], policies_from([UNTRUSTED]), t0).action == DEFER  # the user's word
    assert not _arbiter(config, t0, inactive=600.0)
    store.record_node({("ann", ""): (1, 1, 0)}, t0 - 5)  # the node: 1 GPU held, 1 busy
    judged = judged_row(store.servers()[0], settings.site, t0, settings.fresh)
    assert judged.activity_source == "node" and row_idleness(judged) == BUSY
    d = decide(judged, [], policies_from([UNTRUSTED]), t0, fresh_seconds=settings.fresh)
    assert d.action == KEEP, d
    assert not _arbiter(config, t0, inactive=5 * 3600.0), "never culled for kernel silence"


def test_the_arbiter_and_the_services_culler_get_the_same_inputs(tmp_path: Path) -> None:
    """The same row, groups and keep give the same decision whichever asks: one freshness
    window (`HubSettings.fresh`, 70 s at the default intervals; the arbiter used 130 s, the
    service's culler 120 s for reports and 70 s for the node) and the profile the site
    resolves (a server recorded with no profile runs the site's default; the arbiter judged
    the raw one and found no policy)."""
    from jupyter_costguard.hub.cull import judged_row
    from jupyter_costguard.hub.settings import HubSettings

    config = _site_config(tmp_path)
    settings = HubSettings.load(config)
    assert settings.fresh == 70.0
    assert HubSettings.of({"poll_interval": 60.0}).fresh == 130.0
    assert HubSettings.of({"fresh_seconds": 45.0}).fresh == 45.0
    policies = policies_from(settings.cull_policies)
    t0 = 1_800_000_000.0

    def both(profile: str, node_age: float | None, busy_report: bool,
             ) -> tuple[str, bool, bool]:
        path = tmp_path / "hub.sqlite"
        for p in path.parent.glob("hub.sqlite*"):
            p.unlink()
        store = HubStore(path)
        store.record_cycle({("ann", ""): ("/user/ann/", profile)}, {}, t0 - 7200, 65.0)
        idle = {"gpus_held": 1, "gpus_busy": 0, "gpu_idle_since": t0 - 3000}
        busy = {"gpus_held": 1, "gpus_busy": 1, "gpu_idle_since": None}
        store.record_report("ann", "/user/ann/", profile,
                            report(t0 - 10, **(busy if busy_report else idle)),
                            received=t0 - 10)
        if node_age is not None:  # the node: every GPU idle for an hour
            store.record_node({("ann", ""): (1, 0, 0)}, t0 - 3600)
            store.record_node({("ann", ""): (1, 0, 0)}, t0 - node_age)
        # the service's cycle: its rows as the culler reads them
        row = judged_row(store.servers()[0], settings.site, t0, settings.fresh)
        d = decide(row, [], policies, t0, None, settings.fresh,
                   settings.cull_keep_ceiling_minutes * 60)
        return (d.action, _arbiter(config, t0, inactive=60.0),
                _arbiter(config, t0, inactive=7200.0))

    for profile in ("", "gpu"):
        for node_age in (None, 30.0, 100.0, 200.0):
            for busy_report in (False, True):
                action, short, long = both(profile, node_age, busy_report)
                why = (profile, node_age, busy_report, action)
                assert short == (action == STOP), why
                assert long == (action in (STOP, DEFER)), why
    # a server recorded with no profile runs the site's GPU default: culled as one
    assert both("", None, False) == (STOP, True, True)
    # the node's reading 100 s old is stale for both: the server's untrusted word defers
    assert both("gpu", 100.0, True) == (DEFER, False, True)
