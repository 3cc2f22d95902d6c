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

from jupyter_costguard.cost.hubbudget import ENV_BUDGET, budgets_doc, budgets_from_environ
from jupyter_costguard.hub import budgetbook, handlers, report
from jupyter_costguard.hub.budgets import Budgets
from jupyter_costguard.hub.profiles import profile_slug
from jupyter_costguard.hub.spawn import check_budget, is_gpu_spawn, name_profile
from jupyter_costguard.hub.store import hour_bounds

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

    def warning(self, msg: str, *args: Any) -> None:
        self.warnings.append(msg % args)


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

    def user_spend(self, user: str, since: float) -> float:
        return self._spend.get(user, 0.0)

    def budget_states(self, budgets: Budgets, users: dict[str, list[str]], now: float,
                      ) -> dict[str, list[Any]]:
        return budgetbook.states(budgets, self._spend, self._members, users, now)

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


def test_a_spent_group_budget_still_refuses_the_gpu_whatever_members_see(
        tmp_path: Path) -> None:
    db = service_db(tmp_path / "hub.sqlite", {"bob": 12.0}, {"ann": ["ml"], "bob": ["ml"]})
    for view in ("remaining", "none"):
        spawner = Spawner(groups=("ml",), user_options={"profile": "gpu"})
        with pytest.raises(web.HTTPError) as refused:
            asyncio.run(check_budget(spawner, settings_for(
                db, group_budgets={"ml": 10.0}, member_group_view=view)))
        assert "group ml's monthly budget of 10.00 USD is spent" in \
            refused.value.jupyterhub_message  # type: ignore[attr-defined]


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
            (p + "api/events", handlers.EventsHandler)],
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
        assert a.headers["Content-Security-Policy"] == "frame-ancestors 'none'"
        assert a.headers["X-Frame-Options"] == "DENY"


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

