"""`python -m jupyter_costguard.hub`: the JupyterHub managed service.

It reads what JupyterHub gives every managed service from the environment
(`JUPYTERHUB_API_TOKEN`, `JUPYTERHUB_API_URL`, `JUPYTERHUB_SERVICE_URL`,
`JUPYTERHUB_SERVICE_PREFIX`, the OAuth client settings) and its own settings from
`c.CostGuardHub` in a config file (`--config`, or `$COSTGUARD_HUB_CONFIG`), the same file
the spawn hook reads, so budgets are written once.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar
from urllib.parse import urlparse

from jupyterhub.services.auth import HubOAuth, HubOAuthCallbackHandler
from jupyterhub.utils import url_path_join
from tornado import web
from tornado.httpserver import HTTPServer
from traitlets import Bool, Dict, Enum, Float, Integer, List, Set, Unicode, default
from traitlets.config import Application

from jupyter_costguard.hub import handlers
from jupyter_costguard.hub.budgets import Budgets, BudgetState
from jupyter_costguard.hub.cull import Culler, policies_from
from jupyter_costguard.hub.metrics import HubCollector
from jupyter_costguard.hub.poller import Cycle, Poller
from jupyter_costguard.hub.store import HubStore
from jupyter_costguard.periods import PERIODS

T = TypeVar("T")
ENV_CONFIG = "COSTGUARD_HUB_CONFIG"


class CostGuardHub(Application):
    name = "costguard-hub"
    description = "Spend per user and group across a JupyterHub, GPU-aware culling, budgets."

    config_file = Unicode(os.environ.get(ENV_CONFIG, ""), config=True,
                          help="A Python config file with c.CostGuardHub settings "
                               "(the spawn hook reads the same file).")
    db_path = Unicode("costguard_hub.sqlite", config=True,
                      help="The service's SQLite: per-server epochs, hourly spend, events.")
    proxy_url = Unicode(config=True, help="Where the Hub's proxy answers (user servers are "
                                          "read through it), e.g. http://proxy-public.")
    poll_interval = Float(30.0, config=True, help="Seconds between polls of every server.")
    poll_timeout = Float(5.0, config=True, help="Seconds one server may take to answer.")
    poll_concurrency = Integer(50, config=True, help="Servers asked at once.")
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
    cull_dry_run = Bool(False, config=True,
                        help="Log and record what would be stopped instead of stopping it.")
    ip = Unicode(config=True, help="Listen address (default: from JUPYTERHUB_SERVICE_URL).")
    port = Integer(0, config=True, help="Listen port (default: from JUPYTERHUB_SERVICE_URL).")

    aliases = {"config": "CostGuardHub.config_file", "db": "CostGuardHub.db_path",
               "proxy-url": "CostGuardHub.proxy_url",
               "poll-interval": "CostGuardHub.poll_interval"}

    @default("log_level")
    def _log_level(self) -> int:
        return logging.INFO  # one line per poll: how many servers, how long, how many silent

    @default("proxy_url")
    def _proxy_url(self) -> str:
        return os.environ.get("COSTGUARD_HUB_PROXY_URL", "http://127.0.0.1:8000")

    # --- the running service ---------------------------------------------------------

    def initialize(self, argv: list[str] | None = None) -> None:
        super().initialize(argv)
        if self.config_file:
            self.load_config_file(self.config_file)
            self.update_config(self.cli_config)  # the command line wins
        self.budgets = Budgets(self.budget_period, dict(self.user_budgets),
                               dict(self.group_budgets), self.default_user_budget)
        self.store = HubStore(self.db_path)
        self.worker = ThreadPoolExecutor(2, thread_name_prefix="costguard-hub")
        self.prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/costguard/")
        self.last_cycle: Cycle | None = None
        self.collector = HubCollector(self.store, self.budgets, self._last_poll)
        self._task: asyncio.Task[None] | None = None
        self.policies = policies_from(self.cull_policies)
        self.culler: Culler | None = None
        self._cache: dict[tuple[Any, ...], tuple[int, Any]] = {}

    def _last_poll(self) -> tuple[float, float] | None:
        c = self.last_cycle
        return None if c is None else (c.seconds, float(len(c.running)))

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Store work on the worker thread, never on the IO loop."""
        return await asyncio.get_running_loop().run_in_executor(self.worker, fn, *args)

    async def report(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on the worker, answered from a cache until the store next changes
        (once per poll): pages opened between polls cost nothing but the lookup."""
        key = (fn.__name__, *(tuple(a) if isinstance(a, list) else a for a in args[2:]))
        hit = self._cache.get(key)
        version = self.store.version
        if hit is not None and hit[0] == version:
            return hit[1]
        value = await self.run(fn, *args)
        if len(self._cache) >= 256:
            self._cache.clear()
        self._cache[key] = (version, value)
        return value

    def is_admin(self, model: dict[str, Any]) -> bool:
        return (handlers.ADMIN_SCOPE in (model.get("scopes") or ())
                or model.get("name") in self.admin_users
                or bool(set(model.get("groups") or ()) & self.admin_groups))

    def budgets_of(self, name: str, now: float) -> list[BudgetState]:
        return handlers.budgets_of(self, name, now)

    def _record_event(self, t: float, user: str, server: str, kind: str, detail: str) -> None:
        self.store.add_event(t, user, server, kind, detail)

    def poll_doc(self) -> dict[str, Any] | None:
        c = self.last_cycle
        if c is None:
            return None
        return {"time": c.time, "seconds": round(c.seconds, 3), "servers": len(c.running),
                "answered": len(c.readings), "stale": len(c.failures)}

    def make_app(self) -> web.Application:
        p = self.prefix
        routes: list[Any] = [
            (p, handlers.PageHandler),
            (url_path_join(p, "oauth_callback"), HubOAuthCallbackHandler),
            (url_path_join(p, "api/spend"), handlers.SpendHandler),
            (url_path_join(p, "api/spend.csv"), handlers.SpendHandler, {"fmt": "csv"}),
            (url_path_join(p, "api/series"), handlers.SeriesHandler),
            (url_path_join(p, "api/me"), handlers.MeHandler),
            (url_path_join(p, "api/events"), handlers.EventsHandler),
            (url_path_join(p, "metrics"), handlers.MetricsHandler),
        ]
        auth = HubOAuth(api_token=os.environ["JUPYTERHUB_API_TOKEN"], cache_max_age=60)
        return web.Application(routes, costguard=self, hub_auth=auth,
                               cookie_secret=os.urandom(32), xsrf_cookies=False)

    async def poll_once(self) -> Cycle:
        cycle = await self.poller.poll()
        await self.run(self.store.record, cycle.readings, cycle.failures,
                       {k: s.url for k, s in cycle.running.items()}, cycle.memberships,
                       cycle.time)
        self.last_cycle = cycle
        if self.culler is not None:
            rows = [r for r in await self.run(self.store.servers)
                    if (r.user, r.server) in cycle.running]
            await self.culler.run(rows, cycle.memberships, time.time())
        self.log.info("costguard-hub: polled %d servers in %.2f s (%d not answering)",
                      len(cycle.running), cycle.seconds, len(cycle.failures))
        return cycle

    async def poll_forever(self) -> None:
        while True:
            started = time.monotonic()
            try:
                await self.poll_once()
            except Exception:  # the Hub restarting, say: try again next round
                self.log.exception("costguard-hub: poll failed")
            await asyncio.sleep(max(0.5, self.poll_interval - (time.monotonic() - started)))

    async def serve(self) -> None:
        url = urlparse(os.environ.get("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:10101"))
        ip = self.ip or url.hostname or "127.0.0.1"
        port = self.port or url.port or 10101
        self.poller = Poller(os.environ["JUPYTERHUB_API_URL"], self.proxy_url,
                             os.environ["JUPYTERHUB_API_TOKEN"], timeout=self.poll_timeout,
                             concurrency=self.poll_concurrency)
        if self.policies:
            self.culler = Culler(self.policies, self.poller, dry_run=self.cull_dry_run,
                                 record=self._record_event, log=self.log)
            self.culler.kept.update(await self.run(self.store.kept))
        server = HTTPServer(self.make_app(), xheaders=True)
        server.listen(port, ip)
        self.log.info("costguard-hub: serving %s on %s:%d, polling every %g s via %s",
                      self.prefix, ip, port, self.poll_interval, self.proxy_url)
        self._task = asyncio.create_task(self.poll_forever())
        await asyncio.Event().wait()

    def start(self) -> None:
        asyncio.run(self.serve())


def main(argv: list[str] | None = None) -> None:
    app = CostGuardHub()
    app.initialize(argv)
    app.start()
