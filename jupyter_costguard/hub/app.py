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
import faulthandler
import gc
import logging
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import replace
from typing import Any, TypeVar
from urllib.parse import urlparse

from jupyterhub.httpclient import JupyterHubHTTPClient
from jupyterhub.services.auth import HubOAuth
from jupyterhub.utils import url_path_join
from tornado import web
from tornado.httpserver import HTTPServer
from traitlets import Integer, Unicode, default
from traitlets.config import Application

from jupyter_costguard.common.hubprotocol import REPORT_PATH
from jupyter_costguard.common.tasks import cancel_and_wait
from jupyter_costguard.hub import handlers
from jupyter_costguard.hub.budgethold import BudgetHold
from jupyter_costguard.hub.cull import Culler, policies_from
from jupyter_costguard.hub.cycle import Cycle, Poller
from jupyter_costguard.hub.hubapi import HubAPI, RunningServer
from jupyter_costguard.hub.intake import Intake, ReportHandler
from jupyter_costguard.hub.meter import MeterConfigError
from jupyter_costguard.hub.metrics import HubCollector
from jupyter_costguard.hub.nodegpu import NodeGpu
from jupyter_costguard.hub.pagecache import PageCache
from jupyter_costguard.hub.report import BY, Reconcile, rows_json
from jupyter_costguard.hub.settings import HubSettings
from jupyter_costguard.hub.store import REUSE_SECONDS, HubStore

T = TypeVar("T")
ENV_CONFIG = "COSTGUARD_HUB_CONFIG"
#: the longest each step of stopping waits for what is in flight (JupyterHub's own wait for
#: a managed service to end is 5 s; systemd's 90 s)
STOP_SECONDS = 2.0
#: the collector's thresholds (the defaults are 700, 10, 10): see `quiet_collector`
GC_THRESHOLDS = (50_000, 20, 10)


class CostGuardHub(HubSettings, Application):
    name = "costguard-hub"
    description = "Spend per user and group across a JupyterHub, GPU-aware culling, budgets."

    config_file = Unicode(os.environ.get(ENV_CONFIG, ""), config=True,
                          help="A Python config file with c.CostGuardHub settings "
                               "(the spawn hook reads the same file).")
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
        #: the meter's price of each profile (MeterConfigError: refuse to start, saying why)
        for price in self.prices.values():
            self.log.info("costguard-hub: profile %r metered at %.4f %s/h: %s", price.profile,
                          price.rate_per_hour, price.currency, price.detail)
        unpriced = sorted(p.slug for p in self.site.profiles.values() if p.price is None)
        if self.prices and unpriced:
            self.log.warning("costguard-hub: GPU profiles without a price in profile_prices "
                             "count what their servers report: %s", ", ".join(unpriced))
        self.store = HubStore(self.db_path, count=self.count)
        #: a server starts reporting a little after the Hub starts it, then every interval
        grace = self.reconcile_grace_seconds
        self.reconcile = Reconcile(self.reconcile_tolerance, 2 * self.report_interval + 60.0
                                   if grace is None else max(0.0, grace), self.fresh)
        self.collector = HubCollector(self.store, self.budgets, self._last_poll,
                                      self.currency, self.reconcile)
        self.worker = ThreadPoolExecutor(2, thread_name_prefix="costguard-hub")
        self.prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/costguard/")
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
        #: where the pages' figures are computed (started at the first page, hub/pagecache.py)
        self._pages_process: ProcessPoolExecutor | None = None
        self.pages = PageCache(lambda: self.store.version, self.compute,
                               lambda: self.page_max_age)
        # a page's figures may be page_max_age old: its views may share a read that long
        self.store.pages_reuse_seconds = min(REUSE_SECONDS, self.page_max_age)
        self.poller = Poller(self)

    def as_run(self, server: RunningServer) -> RunningServer:
        """The Hub's record of a server with the profile it runs by the site's rule (a spawn
        that named none runs the default): what every decision of the service reads."""
        slug = self.site.slug(server.profile)
        return server if slug == server.profile else replace(server, profile=slug)

    def _last_poll(self) -> tuple[float, float] | None:
        c = self.poller.last
        return None if c is None else (c.seconds, float(len(c.running)))

    @property
    def stale_after(self) -> float:
        """A server without a report for two intervals (and a little) is stale."""
        return 2 * self.report_interval + 5.0

    def run(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """Store work on the worker thread, never on the IO loop."""
        return asyncio.get_running_loop().run_in_executor(self.worker, fn, *args)

    def compute(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """A page's figures, in the pages' process where `fn` can be named there (a module's
        function: the report's rows and series; the store goes as a read-only view of its
        file): at 10,000 servers one computation is a third of a second of Python, which on
        a thread of this process would hold the GIL, and so the IO loop, as long. Anything
        else (a closure) runs on the worker thread."""
        if "<" in fn.__qualname__:
            return self.run(fn, *args)
        loop = asyncio.get_running_loop()
        for _ in range(2):
            if self._pages_process is None:
                self._pages_process = ProcessPoolExecutor(
                    1, mp_context=multiprocessing.get_context("spawn"),
                    initializer=pages_process_started)
            try:
                return loop.run_in_executor(self._pages_process, fn, *args)
            except BrokenProcessPool:  # the process died (killed): a new one
                self._pages_process = None
        return self.run(fn, *args)

    @property
    def page_max_age(self) -> float:
        age = self.page_max_age_seconds
        return self.poll_interval if age is None else max(0.0, age)

    async def report(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on the worker, answered from the pages' cache (hub/pagecache.py)."""
        return await self.pages.answer(fn, *args)

    def refresh_pages(self) -> None:
        """After each look at the Hub: what pages asked for recently, and the admin's default
        views, recomputed in the background (none when pages are never kept)."""
        if self.page_max_age <= 0:
            return
        wall = time.time()
        hour = float(wall // 3600 * 3600)
        views: list[tuple[Callable[..., Any], tuple[Any, ...]]] = [
            (rows_json, (self.store, self.budgets, by, self.budgets.start(wall) + 1, None,
                         None, None, self.currency, self.reconcile)) for by in BY]
        # the page's chart of the hub: every user, by the hour, the last 48 hours
        views.append((handlers.series_json, (self.store, "user", hour - 47 * 3600,
                                             hour + 3600, "hour", None)))
        self.pages.refresh(views)

    def _record_event(self, t: float, user: str, server: str, kind: str, detail: str) -> None:
        """The culler's record of what it did: written on the worker, never on the loop."""
        self.worker.submit(self.store.add_event, t, user, server, kind, detail)

    def poll_doc(self) -> dict[str, Any] | None:
        c = self.poller.last
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
            (url_path_join(p, "static/(?P<path>[^/]+)"), handlers.StaticHandler),
        ]
        auth = HubOAuth(api_token=os.environ["JUPYTERHUB_API_TOKEN"],
                        cache_max_age=self.token_cache_seconds)
        return web.Application(routes, costguard=self, costguard_intake=self.intake,
                               hub_auth=auth,
                               cookie_secret=os.urandom(32), xsrf_cookies=False,
                               default_handler_class=handlers.NotFoundHandler)

    async def poll_once(self) -> Cycle:
        """One look at the Hub and what follows it (hub/cycle.py)."""
        return await self.poller.poll_once()

    async def serve(self) -> None:
        url = urlparse(os.environ.get("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:10101"))
        ip = self.ip or url.hostname or "127.0.0.1"
        port = self.port or url.port or 10101
        self.hub = HubAPI(os.environ["JUPYTERHUB_API_URL"], os.environ["JUPYTERHUB_API_TOKEN"],
                          timeout=self.hub_timeout)
        if self.policies:
            self.culler = Culler(self.policies, self.hub.stop_server,
                                 dry_run=self.cull_dry_run, record=self._record_event,
                                 log=self.log, keeps_per_day=self.cull_keeps_per_day,
                                 keep_ceiling=self.cull_keep_ceiling_minutes * 60,
                                 fresh_seconds=self.fresh)
            self.culler.kept.update(await self.run(self.store.kept))
            self.culler.keeps.update(await self.run(self.store.keeps, time.time() - 86400))
        if self.budget_stop != "off":
            self.budget_hold = BudgetHold(
                self.budget_stop, self.budget_grace_minutes * 60, self.site,
                stop_server=self.hub.stop_server, record=self._record_event, log=self.log,
                currency=self.currency, view=self.member_group_view)
        # forwarded headers are believed only from the proxies the site names
        server = HTTPServer(self.make_app(), xheaders=bool(self.trusted_proxies),
                            trusted_downstream=list(self.trusted_proxies) or None,
                            max_body_size=4 * 1024 * 1024)
        server.listen(port, ip)
        quiet_collector()
        self.log.info("costguard-hub: serving %s on %s:%d, reports every %g s, the Hub's "
                      "list every %g s", self.prefix, ip, port, self.report_interval,
                      self.poll_interval)
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stopping.set)
        self._task = asyncio.create_task(self.poller.poll_forever())
        await stopping.wait()
        await self.stop(server)

    async def stop(self, server: HTTPServer) -> None:
        """In order, so that nothing runs on what is already closed (SIGTERM under load
        once ended in SIGSEGV): no new connections and no new cycle; the reports waiting
        in the intake's batch recorded; the connections closed; the worker's jobs
        finished, none started after; the store closed on this thread, once no other
        reads or writes it; the Hub's clients closed, HubAuth's too (its DNS resolver's
        channel must be destroyed while the interpreter still runs, not by a daemon
        thread during its exit)."""
        self.log.info("costguard-hub: stopping")
        server.stop()
        await cancel_and_wait(self._task)
        try:
            await asyncio.wait_for(self.intake.drain(), STOP_SECONDS)
        except (asyncio.TimeoutError, Exception):
            self.log.warning("costguard-hub: reports still being recorded at exit")
        try:
            await asyncio.wait_for(server.close_all_connections(), STOP_SECONDS)
        except asyncio.TimeoutError:
            pass
        # a job in flight runs to its end (off the loop, which still answers signals)
        await asyncio.to_thread(self.worker.shutdown, wait=True, cancel_futures=True)
        if self._pages_process is not None:
            await asyncio.to_thread(self._pages_process.shutdown, wait=True,
                                    cancel_futures=True)
        self.store.close()
        self.hub.close()
        if JupyterHubHTTPClient.initialized():
            await JupyterHubHTTPClient.loop_instance().close()

    def start(self) -> None:
        asyncio.run(self.serve())


def quiet_collector() -> None:
    """Python's cyclic garbage collector, tuned for a service holding 10,000 servers' state:
    what was loaded at the start (modules, settings: ~200,000 objects) is set aside for
    good, and collections run 70 times less often. At the defaults a full collection,
    which finds nothing, ran every ~4 s under 333 reports a second (the objects of reports
    in flight reach the oldest generation) and held the IO loop 100-370 ms each time; the
    objects of a request die with it, by reference counting, not by the collector."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def pages_process_started() -> None:
    """The pages' process: the service ends it (a signal to the service's process group,
    as a terminal's Ctrl-C, leaves it to the service's orderly stop)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # one computation's ~500,000 short-lived objects otherwise set off several full
    # collections (~0.1 s each) of the process's own, for nothing
    quiet_collector()


def main(argv: list[str] | None = None) -> None:
    # a crash in C code (SQLite, the DNS resolver) leaves each thread's stack in the log
    faulthandler.enable()
    # a worker thread's Python (a cycle's writes for 10,000 servers) gives the GIL back to
    # the IO loop within 1 ms rather than 5: each request's few system calls otherwise wait
    # up to 5 ms each for it
    sys.setswitchinterval(0.001)
    app = CostGuardHub()
    try:
        app.initialize(argv)
    except MeterConfigError as e:
        app.log.critical("costguard-hub: not starting: %s", e)
        raise SystemExit(2) from None
    app.start()
