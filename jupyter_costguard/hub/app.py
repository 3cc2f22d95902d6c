"""`python -m jupyter_costguard.hub`: the JupyterHub managed service.

It reads what JupyterHub gives every managed service from the environment
(`JUPYTERHUB_API_TOKEN`, `JUPYTERHUB_API_URL`, `JUPYTERHUB_SERVICE_URL`,
`JUPYTERHUB_SERVICE_PREFIX`, the OAuth client settings) and its own settings from
`c.CostGuardHub` in a config file (`--config`, or `$COSTGUARD_HUB_CONFIG`), the same file
the spawn hook reads, so budgets are written once.

User servers push their reports to it (hub/intake.py) with their own tokens; the service's
token goes to the Hub's API only: every `poll_interval` it asks the Hub which servers run,
marks silent ones stale and runs the culler.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast
from urllib.parse import urlparse

from jupyterhub.services.auth import HubOAuth
from jupyterhub.utils import url_path_join
from tornado import web
from tornado.httpclient import HTTPClientError
from tornado.httpserver import HTTPServer
from traitlets import Bool, Dict, Enum, Float, Integer, List, Set, Unicode, default
from traitlets.config import Application

from jupyter_costguard.common.hubprotocol import CLOCK_SKEW_SECONDS, REPORT_PATH
from jupyter_costguard.common.periods import PERIODS
from jupyter_costguard.hub import handlers
from jupyter_costguard.hub.budgethold import MODES as BUDGET_STOP_MODES
from jupyter_costguard.hub.budgethold import BudgetHold
from jupyter_costguard.hub.budgets import Budgets, BudgetState, budget_states
from jupyter_costguard.hub.cull import Culler, policies_from
from jupyter_costguard.hub.hubapi import HubAPI, RunningServer
from jupyter_costguard.hub.intake import Intake, ReportHandler
from jupyter_costguard.hub.meter import MeterConfigError, ProfilePrice, price_profiles
from jupyter_costguard.hub.metrics import HubCollector
from jupyter_costguard.hub.nodegpu import NodeGpu, NodeGpuError, pod_name
from jupyter_costguard.hub.report import BY, Reconcile, rows_json, series
from jupyter_costguard.hub.store import COUNTS, HubStore, with_node_activity

T = TypeVar("T")
ENV_CONFIG = "COSTGUARD_HUB_CONFIG"
#: the most page answers kept ready after each look at the Hub (the most recently asked):
#: however many different queries users send, the background work per cycle is bounded
MAX_KEPT_READY = 16


class CostGuardHub(Application):
    name = "costguard-hub"
    description = "Spend per user and group across a JupyterHub, GPU-aware culling, budgets."

    config_file = Unicode(os.environ.get(ENV_CONFIG, ""), config=True,
                          help="A Python config file with c.CostGuardHub settings "
                               "(the spawn hook reads the same file).")
    db_path = Unicode("costguard_hub.sqlite", config=True,
                      help="The service's SQLite: per-server epochs, hourly spend, events.")
    poll_interval = Float(30.0, config=True,
                          help="Seconds between looks at the Hub's list of running servers "
                               "(stale marks and culling decisions follow each).")
    report_interval = Float(30.0, config=True,
                            help="Seconds between a server's reports (told to every server "
                                 "in each answer); a server silent for two is stale.")
    hub_timeout = Float(10.0, config=True, help="Seconds the Hub's API may take to answer.")
    max_rate_per_hour = Float(1000.0, config=True,
                              help="The most one server may cost per hour on this site: a "
                                   "report claiming more, or more spend than this rate for "
                                   "as long as the server ran, is refused.")
    clock_skew_seconds = Float(CLOCK_SKEW_SECONDS, config=True,
                               help="How far a server's clock may be from the service's.")
    currency = Unicode("USD", config=True,
                       help="The site's currency (ISO 4217): budgets are in it, and messages "
                            "to users say it.")
    member_group_view = Enum(["remaining", "full", "none"], "remaining", config=True,
                             help="What a member sees of a group budget (api/me, JupyterLab): "
                                  "its remaining amount only, the group's whole figures, or "
                                  "nothing. Admins always see everything.")
    budget_check_on_error = Enum(["refuse", "allow"], "refuse", config=True,
                                 help="The spawn hook, when it cannot read the service's "
                                      "database: refuse a budgeted GPU spawn (with the "
                                      "reason), or allow it with a warning in the Hub's log.")
    trusted_proxies = List(Unicode(), config=True,
                           help="Addresses of the proxies in front of the service whose "
                                "X-Forwarded-For / X-Real-Ip headers are believed. Empty: "
                                "no forwarded header is believed.")
    page_max_age_seconds = Float(None, allow_none=True, config=True,
                                 help="How old the figures a page or export is answered with "
                                      "may be (default: poll_interval): it is answered from "
                                      "the last computation while a fresh one runs in the "
                                      "background, so opening a page costs next to nothing "
                                      "at any scale. 0: computed afresh whenever a report "
                                      "changed something.")
    token_cache_seconds = Integer(300, config=True,
                                  help="How long the Hub's answer about a token is kept (each "
                                       "server's token is checked once per this period).")
    admin_users = Set(Unicode(), config=True,
                      help="Users who see everyone's figures (besides holders of the "
                           "custom:costguard:admin scope).")
    admin_groups = Set(Unicode(), config=True, help="Groups whose members see everything.")
    budget_period = Enum(list(PERIODS), "month", config=True,
                         help="Budgets are per calendar month (UTC), ISO week or day.")
    user_budgets = Dict(config=True, help="user name -> budget.")
    group_budgets = Dict(config=True, help="group name -> budget for all its members.")
    default_user_budget = Float(None, allow_none=True, config=True,
                                help="Budget of a user with no entry in user_budgets.")
    gpu_profiles = Set(Unicode(), config=True,
                       help="Spawner profiles (the `profile` user option) that run on GPUs: "
                            "the spawn hook refuses them once a budget is spent.")
    cull_policies = List(Dict(), config=True,
                         help="GPU culling policies, first match wins: {name, profiles, "
                              "groups, idle_minutes, warn_minutes} (see hub/cull.py). "
                              "Empty: no culling.")
    budget_stop = Enum(list(BUDGET_STOP_MODES), "off", config=True,
                       help="Budgets held while servers run: a running GPU server (of "
                            "gpu_profiles) whose user's or group's budget is spent is warned, "
                            "then stopped after budget_grace_minutes ('on'), or only recorded "
                            "('dry-run'). 'off': budgets are checked at spawn only.")
    budget_grace_minutes = Float(15.0, config=True,
                                 help="Minutes between the budget warning reaching the user "
                                      "and the server's stop.")
    cull_dry_run = Bool(False, config=True,
                        help="Log and record what would be stopped instead of stopping it.")
    profile_prices = Dict(config=True,
                          help="The meter's price table: profile slug -> {instance_type, "
                               "market, region, gpus, cpus, memory, gpu_share} (a share of "
                               "a catalog instance, priced as the servers price themselves) "
                               "or {hourly_rate} in the site's currency (hub/meter.py). "
                               "A running server of a priced profile is metered by the "
                               "service: rate x time since the Hub started it.")
    count = Enum(list(COUNTS), "metered", config=True,
                 help="What budgets, pages, exports and metrics count: the service's meter "
                      "(where the profile is priced; what the server reports otherwise), "
                      "what servers report, or the larger of the two, hour by hour.")
    reconcile_tolerance = Float(0.05, config=True,
                                help="A server whose reported rate, or spend for its run, is "
                                     "below its meter by more than this fraction is flagged "
                                     "on the admin page.")
    reconcile_grace_seconds = Float(None, allow_none=True, config=True,
                                    help="How far behind its meter a server's spend for its "
                                         "run may be before it is flagged (it starts "
                                         "reporting after the Hub starts it). Default: two "
                                         "report intervals and a minute.")
    catalog_files = List(Unicode(), config=True,
                         help="The site's own price catalog files (CSV or JSON), on top of "
                              "the shipped one, for profile_prices.")
    exchange_rates = Dict(config=True,
                          help="Units of the site's currency per unit of another, for "
                               "catalog rows priced in another currency.")
    exchange_rates_date = Unicode(None, allow_none=True, config=True,
                                  help="The date of exchange_rates, shown with converted "
                                       "prices.")
    prometheus_url = Unicode("", config=True,
                             help="Prometheus that scrapes NVIDIA's dcgm-exporter (with "
                                  "honorLabels, so each GPU's series names its pod): culling "
                                  "and idle GPU hours then go by the node's GPU activity of "
                                  "each server's pod, not by the server's report. Empty: off.")
    prometheus_timeout = Float(5.0, config=True,
                               help="Seconds a Prometheus query may take.")
    gpu_busy_percent = Float(5.0, config=True,
                             help="A GPU whose node activity is at or above this percent is "
                                  "busy.")
    pod_name_template = Unicode("jupyter-{user_server}", config=True,
                                help="KubeSpawner's pod_name_template (as the Hub is "
                                     "configured), to name each server's pod.")
    pod_namespace = Unicode(os.environ.get("POD_NAMESPACE", ""), config=True,
                            help="The namespace of the user pods (default: $POD_NAMESPACE, "
                                 "which Zero to JupyterHub sets to the Hub's).")
    pod_slug_scheme = Enum(["safe", "escape"], "safe", config=True,
                           help="KubeSpawner's slug_scheme (7+: safe; earlier: escape).")
    ip = Unicode(config=True, help="Listen address (default: from JUPYTERHUB_SERVICE_URL).")
    port = Integer(0, config=True, help="Listen port (default: from JUPYTERHUB_SERVICE_URL).")

    aliases = {"config": "CostGuardHub.config_file", "db": "CostGuardHub.db_path",
               "poll-interval": "CostGuardHub.poll_interval"}

    @default("log_level")
    def _log_level(self) -> int:
        return logging.INFO  # one line per look at the Hub: servers, reporting, stale

    # --- the running service ---------------------------------------------------------

    def initialize(self, argv: list[str] | None = None) -> None:
        super().initialize(argv)
        if self.config_file:
            self.load_config_file(self.config_file)
            self.update_config(self.cli_config)  # the command line wins
        self.budgets = Budgets(self.budget_period, dict(self.user_budgets),
                               dict(self.group_budgets), self.default_user_budget)
        #: the meter's price of each profile (MeterConfigError: refuse to start, saying why)
        self.prices: dict[str, ProfilePrice] = price_profiles(
            self.profile_prices, currency=self.currency, catalog_files=self.catalog_files,
            exchange_rates=self.exchange_rates, rates_date=self.exchange_rates_date)
        for price in self.prices.values():
            self.log.info("costguard-hub: profile %r metered at %.4f %s/h: %s", price.profile,
                          price.rate_per_hour, price.currency, price.detail)
        unpriced = sorted(set(self.gpu_profiles) - set(self.prices))
        if self.prices and unpriced:
            self.log.warning("costguard-hub: GPU profiles without a price in profile_prices "
                             "count what their servers report: %s", ", ".join(unpriced))
        self.store = HubStore(self.db_path, count=self.count)
        #: a server starts reporting a little after the Hub starts it, then every interval
        grace = self.reconcile_grace_seconds
        self.reconcile = Reconcile(self.reconcile_tolerance, 2 * self.report_interval + 60.0
                                   if grace is None else max(0.0, grace), self.node_fresh)
        self.collector = HubCollector(self.store, self.budgets, self._last_poll,
                                      self.currency, self.reconcile)
        self.worker = ThreadPoolExecutor(2, thread_name_prefix="costguard-hub")
        self.prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/costguard/")
        self.last_cycle: Cycle | None = None
        #: what the Hub last said is running (reports of other servers are refused)
        self.running: dict[tuple[str, str], RunningServer] = {}

        self._task: asyncio.Task[None] | None = None
        self.policies = policies_from(self.cull_policies)
        self.culler: Culler | None = None
        self.budget_hold: BudgetHold | None = None
        self.intake = Intake(self)
        #: the node's GPU activity per pod (None: the servers' reports are used)
        self.node: NodeGpu | None = None
        if self.prometheus_url:
            self.node = NodeGpu(self.prometheus_url, timeout=self.prometheus_timeout,
                                busy_percent=self.gpu_busy_percent)
            self.store.idle_from_reports = False
        #: report() answers: key -> (store version, when computed (monotonic), value)
        self._cache: dict[tuple[Any, ...], tuple[int, float, Any]] = {}
        self._computing: dict[tuple[Any, ...], asyncio.Future[Any]] = {}
        self._page: str | None = None
        #: what pages asked report() for, and when last (refresh_pages keeps these ready)
        self._asked: dict[tuple[Any, ...], tuple[Callable[..., Any], tuple[Any, ...],
                                                 float]] = {}

    def _last_poll(self) -> tuple[float, float] | None:
        c = self.last_cycle
        return None if c is None else (c.seconds, float(len(c.running)))

    @property
    def stale_after(self) -> float:
        """A server without a report for two intervals (and a little) is stale."""
        return 2 * self.report_interval + 5.0

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Store work on the worker thread, never on the IO loop."""
        return await asyncio.get_running_loop().run_in_executor(self.worker, fn, *args)

    @property
    def page_max_age(self) -> float:
        age = self.page_max_age_seconds
        return self.poll_interval if age is None else max(0.0, age)

    async def report(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on the worker, answered from a cache: as is while the store has not
        changed; while it is younger than `page_max_age` (and, up to twice that, while a
        fresh one is computed in the background); else computed now. With thousands of
        servers reporting the store changes hundreds of times a second, and a page would
        otherwise recompute every figure on every open."""
        key = (fn.__name__, *(_key(a) for a in args))
        self._asked.pop(key, None)
        self._asked[key] = (fn, args, time.monotonic())
        while len(self._asked) > MAX_KEPT_READY:  # the least recently asked first
            del self._asked[next(iter(self._asked))]
        hit = self._cache.get(key)
        if hit is not None:
            version, at, value = hit
            age = time.monotonic() - at
            limit = self.page_max_age
            if version == self.store.version or age < limit:
                return cast(T, value)
            if age < 2 * limit:
                if key not in self._computing:
                    self._computing[key] = asyncio.ensure_future(self._compute(key, fn, args))
                return cast(T, value)
        pending = self._computing.get(key)
        if pending is None:
            pending = self._computing[key] = asyncio.ensure_future(
                self._compute(key, fn, args))
        return cast(T, await asyncio.shield(pending))

    async def page_html(self) -> str:
        """The page's HTML, read from the package once (off the loop)."""
        if self._page is None:
            self._page = await self.run(handlers.PAGE.read_text, "utf-8")
        return self._page

    def refresh_pages(self) -> None:
        """After each look at the Hub: recompute, in the background, what pages asked for in
        the last ten minutes, and the admin's default views, so an open finds them ready."""
        now, wall = time.monotonic(), time.time()
        hour = float(wall // 3600 * 3600)
        views: list[tuple[Callable[..., Any], tuple[Any, ...]]] = [
            (rows_json, (self.store, self.budgets, by, self.budgets.start(wall) + 1, None,
                         None, None, self.currency, self.reconcile)) for by in BY]
        # the page's chart of the hub: every user, by the hour, the last 48 hours
        views.append((series, (self.store, "user", hour - 47 * 3600, hour + 3600, "hour",
                               None)))
        for fn, args in views:
            key = (fn.__name__, *(_key(a) for a in args))
            self._asked.setdefault(key, (fn, args, now))
        for key, (fn, args, used) in list(self._asked.items()):
            if now - used > 600:
                del self._asked[key]
                continue
            hit = self._cache.get(key)
            fresh = hit is not None and (hit[0] == self.store.version
                                         or now - hit[1] < self.page_max_age)
            if not fresh and key not in self._computing:
                self._computing[key] = asyncio.ensure_future(self._compute(key, fn, args))

    async def _compute(self, key: tuple[Any, ...], fn: Callable[..., Any],
                       args: tuple[Any, ...]) -> Any:
        try:
            version, at = self.store.version, time.monotonic()
            value = await self.run(fn, *args)
            if len(self._cache) >= 256:
                self._cache.clear()
            self._cache[key] = (version, at, value)
            return value
        finally:
            self._computing.pop(key, None)

    def is_admin(self, model: dict[str, Any]) -> bool:
        return (handlers.ADMIN_SCOPE in (model.get("scopes") or ())
                or model.get("name") in self.admin_users
                or bool(set(model.get("groups") or ()) & self.admin_groups))

    def budgets_of(self, name: str, now: float) -> list[BudgetState]:
        return handlers.budgets_of(self, name, now)

    def _record_event(self, t: float, user: str, server: str, kind: str, detail: str) -> None:
        """The culler's record of what it did: written on the worker, never on the loop."""
        self.worker.submit(self.store.add_event, t, user, server, kind, detail)

    def poll_doc(self) -> dict[str, Any] | None:
        c = self.last_cycle
        if c is None:
            return None
        return {"time": c.time, "seconds": round(c.seconds, 3), "servers": len(c.running),
                "answered": c.reporting, "stale": len(c.running) - c.reporting}

    def make_app(self) -> web.Application:
        p = self.prefix
        routes: list[Any] = [
            # first: hundreds a second at scale, and tornado tries the routes in order
            (url_path_join(p, REPORT_PATH), ReportHandler),
            (p, handlers.PageHandler),
            (url_path_join(p, "oauth_callback"), handlers.OAuthCallbackHandler),
            (url_path_join(p, "api/spend"), handlers.SpendHandler),
            (url_path_join(p, "api/spend.csv"), handlers.SpendHandler, {"fmt": "csv"}),
            (url_path_join(p, "api/series"), handlers.SeriesHandler),
            (url_path_join(p, "api/me"), handlers.MeHandler),
            (url_path_join(p, "api/events"), handlers.EventsHandler),
            (url_path_join(p, "metrics"), handlers.MetricsHandler),
        ]
        auth = HubOAuth(api_token=os.environ["JUPYTERHUB_API_TOKEN"],
                        cache_max_age=self.token_cache_seconds)
        return web.Application(routes, costguard=self, hub_auth=auth,
                               cookie_secret=os.urandom(32), xsrf_cookies=False,
                               default_handler_class=handlers.NotFoundHandler)

    async def poll_once(self) -> Cycle:
        """Ask the Hub what runs; mark silent servers stale and stopped ones stopped; cull."""
        started = time.monotonic()
        cycle = Cycle(time=time.time())
        cycle.running, cycle.memberships = await self.hub.running_servers()
        self.running = dict(cycle.running)
        await self.run(self.store.record_cycle,
                       {k: (s.url, s.profile) for k, s in cycle.running.items()},
                       cycle.memberships, cycle.time, self.stale_after)
        if self.prices:
            await self.run(self.store.record_meter,
                           {k: (s.started, s.profile) for k, s in cycle.running.items()},
                           {p: v.rate_per_hour for p, v in self.prices.items()}, cycle.time)
        if self.node is not None:
            await self.read_node(cycle)
        rows = [r for r in await self.run(self.store.servers)
                if (r.user, r.server) in cycle.running]
        if self.node is not None:
            rows = [with_node_activity(r, cycle.time, self.node_fresh) for r in rows]
        cycle.reporting = sum(1 for r in rows if r.state == "ok")
        if self.culler is not None:
            await self.culler.run(rows, cycle.memberships, time.time())
        if self.budget_hold is not None:
            await self.hold_budgets(rows)
        cycle.seconds = time.monotonic() - started
        self.last_cycle = cycle
        if self.page_max_age > 0:
            self.refresh_pages()
        self.log.info("costguard-hub: %d servers running, %d reporting (%.2f s)",
                      len(cycle.running), cycle.reporting, cycle.seconds)
        return cycle

    async def hold_budgets(self, rows: list[Any]) -> None:
        """The budgets of the users with a running GPU server, by the counted figure (on the
        worker), then the budget hold's round."""
        assert self.budget_hold is not None
        now = time.time()
        users = sorted({r.user for r in rows if r.profile in self.gpu_profiles
                        and (r.user, r.server) not in self.budget_hold.stopped})
        if not users:
            return
        starting = {k for k, s in self.running.items() if not s.ready}
        await self.budget_hold.run(rows, await self.run(self._budget_states, users, now), now,
                                   starting)

    def _budget_states(self, users: list[str], now: float) -> dict[str, list[BudgetState]]:
        """Worker thread: the budgets of `users`, every user's spend read in one query (a
        group of thousands would otherwise be summed member by member for each of them)."""
        start = self.budgets.start(now)
        spent = self.store.users_spend(start)
        members = self.store.memberships()
        group_spend: dict[str, float] = {}
        for user, groups in members.items():
            for g in groups:
                group_spend[g] = group_spend.get(g, 0.0) + spent.get(user, 0.0)
        return {u: budget_states(self.budgets, u, members.get(u, []), spent.get(u, 0.0),
                                 group_spend, now) for u in users}

    @property
    def node_fresh(self) -> float:
        """How old the node's reading of a pod may be and still decide."""
        return 2 * self.poll_interval + 10.0

    async def read_node(self, cycle: Cycle) -> None:
        """The node's GPU activity of every running server's pod, recorded (a pod without
        GPU series holds none). When Prometheus cannot answer, nothing is recorded: the last
        readings age out and culling defers; the failure is logged."""
        assert self.node is not None
        pods: dict[tuple[str, str], tuple[str, str]] = {}
        for key in cycle.running:
            try:
                pods[key] = (self.pod_namespace, pod_name(
                    self.pod_name_template, key[0], key[1], namespace=self.pod_namespace,
                    slug_scheme=self.pod_slug_scheme))
            except ValueError as e:
                self.log.warning("costguard-hub: no pod name for %s/%s: %s", *key, e)
        try:
            found = await self.node.read(pods.values())
        except NodeGpuError as e:
            cycle.node_error = str(e)
            self.log.warning("costguard-hub: the node's GPU activity: %s", e)
            return
        readings = {}
        for key, pod in pods.items():
            g = found.get(pod)
            readings[key] = (0, 0) if g is None else (g.gpus, g.busy)
        await self.run(self.store.record_node, readings, cycle.time,
                       max(300.0, 3 * self.poll_interval))

    async def poll_forever(self) -> None:
        while True:
            started = time.monotonic()
            try:
                await self.poll_once()
            except asyncio.CancelledError:
                raise
            except (OSError, HTTPClientError) as e:  # the Hub restarting: next round
                self.log.warning("costguard-hub: asking the Hub which servers run: %s", e)
            except Exception:
                self.log.exception("costguard-hub: asking the Hub failed")
            await asyncio.sleep(max(0.5, self.poll_interval - (time.monotonic() - started)))

    async def serve(self) -> None:
        url = urlparse(os.environ.get("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:10101"))
        ip = self.ip or url.hostname or "127.0.0.1"
        port = self.port or url.port or 10101
        self.hub = HubAPI(os.environ["JUPYTERHUB_API_URL"], os.environ["JUPYTERHUB_API_TOKEN"],
                          timeout=self.hub_timeout)
        if self.policies:
            self.culler = Culler(self.policies, self.hub.stop_server,
                                 dry_run=self.cull_dry_run, record=self._record_event,
                                 log=self.log)
            self.culler.kept.update(await self.run(self.store.kept))
        if self.budget_stop != "off":
            self.budget_hold = BudgetHold(
                self.budget_stop, self.budget_grace_minutes * 60, self.gpu_profiles,
                stop_server=self.hub.stop_server, record=self._record_event, log=self.log,
                currency=self.currency)
        # forwarded headers are believed only from the proxies the site names
        server = HTTPServer(self.make_app(), xheaders=bool(self.trusted_proxies),
                            trusted_downstream=list(self.trusted_proxies) or None,
                            max_body_size=4 * 1024 * 1024)
        server.listen(port, ip)
        self.log.info("costguard-hub: serving %s on %s:%d, reports every %g s, the Hub's "
                      "list every %g s", self.prefix, ip, port, self.report_interval,
                      self.poll_interval)
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stopping.set)
        self._task = asyncio.create_task(self.poll_forever())
        await stopping.wait()
        # stop at once, the database consistent: no new requests, no new cycle, the
        # worker finishes the write it is in, then the store closes
        self.log.info("costguard-hub: stopping")
        server.stop()
        self._task.cancel()
        try:
            await self._task
        except (asyncio.CancelledError, Exception):
            pass
        await self.run(self.store.close)
        self.worker.shutdown(wait=True)
        self.hub.close()

    def start(self) -> None:
        asyncio.run(self.serve())


@dataclass
class Cycle:
    """What one look at the Hub found."""

    time: float
    running: dict[tuple[str, str], RunningServer] = field(default_factory=dict)
    memberships: dict[str, list[str]] = field(default_factory=dict)
    reporting: int = 0
    seconds: float = 0.0
    #: why the node's GPU activity could not be read this cycle ("" when it was, or is off)
    node_error: str = ""


def _key(arg: Any) -> Any:
    """A cache key part for every argument: lists as tuples, objects by identity."""
    if isinstance(arg, list):
        return tuple(arg)
    try:
        hash(arg)
    except TypeError:
        return ("id", id(arg))
    return arg


def main(argv: list[str] | None = None) -> None:
    app = CostGuardHub()
    try:
        app.initialize(argv)
    except MeterConfigError as e:
        app.log.critical("costguard-hub: not starting: %s", e)
        raise SystemExit(2) from None
    app.start()
