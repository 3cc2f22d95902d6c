"""Under JupyterHub: push this server's figures to the costguard hub service, as the server
reports its activity to the Hub, with its **own** token (`JUPYTERHUB_API_TOKEN`).

Nothing the service holds ever reaches this server: it only answers a report, with how often
to report and the cull warnings that stand for this server, which are shown in JupyterLab as
alerts. The user's "Keep running" (dismissing such a warning) goes back in the next report,
sent at once. A report is what this run of the server has spent since it started; the
service checks it against the Hub's own record. The request is asynchronous with a timeout:
a slow or absent service never blocks the server. Each report is a connection of its own:
bench/hub.py measured ten thousand kept-alive connections costing the service more CPU than a
new connection every 30 s each.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from traitlets import Float, Unicode, default
from traitlets.config import Configurable

from jupyter_costguard.alerts.requests import parse_raise_request
from jupyter_costguard.alerts.store import AlertError, AlertStore
from jupyter_costguard.common.hubprotocol import (
    ENV_HUB_URL,
    REPORT_PATH,
    WARNING_KIND,
    parse_answer,
    report_doc,
)
from jupyter_costguard.common.owner import Owner
from jupyter_costguard.common.tasks import cancel_and_wait
from jupyter_costguard.cost.published import Published

log = logging.getLogger("jupyter_costguard")
ENV_TOKEN = "JUPYTERHUB_API_TOKEN"


class HubReport(Configurable):
    """The reports to the costguard hub service (`c.HubReport.<name>`)."""

    #: the old names (`c.CostGuard.<old>`), which still work for a release
    moved_from_costguard: ClassVar[dict[str, str]] = {
        "hub_url": "url", "hub_report_interval": "interval", "hub_report_timeout": "timeout"}

    url = Unicode(
        config=True,
        help="The costguard hub service this server reports to, e.g. "
             "http://costguard:10101/services/costguard/ (the site sets COSTGUARD_HUB_URL in "
             "the spawner's environment). Empty: no reports.")
    interval = Float(
        30.0, config=True,
        help="Seconds between reports until the service says otherwise (it does, each answer).")
    timeout = Float(10.0, config=True, help="Seconds one report may take.")

    @default("url")
    def _hub_url(self) -> str:
        return os.environ.get(ENV_HUB_URL, "")


class HubReporter:
    def __init__(self, url: str, token: str, owner: Owner,
                 published: Callable[[], Published],
                 run_start: Callable[[], tuple[float, float, float, float]],
                 alerts: AlertStore, alerts_changed: Callable[[], Awaitable[None]],
                 active_jobs: Callable[[], int], *, interval: float = 30.0,
                 timeout: float = 10.0,
                 waste_removed: Callable[[], float] = lambda: 0.0) -> None:
        self.url = url.rstrip("/") + "/" + REPORT_PATH
        self._token = token
        self.owner = owner
        self.published = published
        #: (since, spend at start, waste at start, unattributed at start) of this run
        self.run_start = run_start
        self.alerts = alerts
        self.alerts_changed = alerts_changed
        self.active_jobs = active_jobs
        #: the waste this server's hibernations removed (HibernateService.waste_removed)
        self.waste_removed = waste_removed
        self.interval = interval
        self.timeout = timeout
        self.http = AsyncHTTPClient(force_instance=True)
        self._task: asyncio.Task[None] | None = None
        self._reported_kept: set[str] = set()
        #: how the last report went: ok, refused (the service said why), unreachable
        self.state = "starting"
        self.detail = ""

    # --- the report -------------------------------------------------------------------------

    def build(self) -> dict[str, Any] | None:
        """This run's figures from the latest sample (None before the first)."""
        p = self.published()
        if p.sample is None:
            return None
        status = p.views.data["status"]
        since, spend0, waste0, unattributed0 = self.run_start()
        totals = status["totals"]
        activity = status.get("gpu_activity") or {}
        return report_doc(
            server=self.owner.server, time=float(status["time"] or time.time()), since=since,
            spend=max(0.0, float(totals["spend"]) - spend0),
            waste=max(0.0, float(totals["waste"]) - waste0),
            unattributed=max(0.0, float(totals["unattributed"]) - unattributed0),
            currency=str(status["currency"]), simulated=bool(status["simulated"]),
            rate_per_hour=float(status["rate_per_hour"] or 0.0),
            gpu_count=int(status["gpu_count"]), gpus_held=int(activity.get("gpus_held", 0)),
            gpus_busy=int(activity.get("gpus_busy", 0)),
            gpu_idle_since=activity.get("idle_since"),
            active_jobs=self.active_jobs(), kept=sorted(self._dismissed()),
            waste_removed=self.waste_removed())

    def _warnings(self) -> dict[str, Any]:
        """This server's open cull warnings: key -> alert."""
        out = {}
        for kind, key in self.alerts.open_conditions("api"):
            if kind == WARNING_KIND:
                alert = self.alerts.find(kind, key)
                if alert is not None:
                    out[key] = alert
        return out

    def _dismissed(self) -> set[str]:
        return {k for k, a in self._warnings().items() if a.state == "dismissed"}

    async def report_once(self) -> bool:
        """One report and what its answer says; True when the service accepted it."""
        doc = self.build()
        if doc is None:
            return False
        req = HTTPRequest(self.url, method="POST", body=json.dumps(doc),
                          headers={"Authorization": f"token {self._token}",
                                   "Content-Type": "application/json"},
                          connect_timeout=self.timeout, request_timeout=self.timeout,
                          follow_redirects=False)
        try:
            resp = await self.http.fetch(req)
            answer = parse_answer(json.loads(resp.body), self.interval)
        except HTTPClientError as e:
            if e.code == 599:
                return self._failed("unreachable", f"no answer within {self.timeout:g} s")
            why = _message(e)
            return self._failed("refused" if 400 <= e.code < 500 else "unreachable",
                                f"HTTP {e.code}: {why}")
        except (OSError, ValueError) as e:
            return self._failed("unreachable", str(e) or type(e).__name__)
        self._reported_kept |= set(doc["kept"])
        self.interval = answer.interval
        if self.state != "ok":
            log.info("costguard: reporting to the hub service at %s every %g s", self.url,
                     self.interval)
        self.state, self.detail = "ok", ""
        await self._apply(answer.warnings)
        return True

    def _failed(self, state: str, detail: str) -> bool:
        if (state, detail) != (self.state, self.detail):
            log.warning("costguard: report to the hub service %s: %s", state, detail)
        self.state, self.detail = state, detail
        return False

    async def _apply(self, warnings: tuple[dict[str, Any], ...]) -> None:
        """Show the warnings that stand; retire those the service no longer sends."""
        changed = False
        standing = set()
        for w in warnings:
            try:
                request = parse_raise_request(w)
                self.alerts.upsert(**request)
            except (AlertError, TypeError) as e:
                log.warning("costguard: ignoring a warning from the hub service: %s", e)
                continue
            standing.add(request["key"])
            changed = True
        for key in set(self._warnings()) - standing:
            self.alerts.resolve(WARNING_KIND, key)
            self._reported_kept.discard(key)
            changed = True
        if changed:
            await self.alerts_changed()

    # --- the loop ---------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._report_loop())

    async def _report_loop(self) -> None:
        """Report every `interval`, and at once when the user keeps a warned server running."""
        await asyncio.sleep(1.0)  # the first sample
        while True:
            try:
                await self.report_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("costguard: report to the hub service failed")
            deadline = time.monotonic() + self.interval
            # a "Keep running" goes to the service at once, not an interval later
            while time.monotonic() < deadline and not (self._dismissed()
                                                       - self._reported_kept):
                await asyncio.sleep(min(1.0, max(0.0, deadline - time.monotonic())))

    async def stop(self) -> None:
        """A last report (what was spent since the previous one), then stop."""
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None
            try:
                await asyncio.wait_for(self.report_once(), min(3.0, self.timeout))
            except (asyncio.TimeoutError, Exception):
                pass
        self.http.close()


def _message(e: HTTPClientError) -> str:
    body = getattr(e.response, "body", None) if e.response is not None else None
    try:
        doc = json.loads(body) if body else None
    except ValueError:
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("message"), str):
        return str(doc["message"])[:300]
    return e.message or ""


def reporter_from(traits: HubReport, environ: dict[str, str] | os._Environ[str],
                  owner: Owner | None, **parts: Any) -> HubReporter | None:
    """The reporter, when this server is a hub's, has a token and knows the service."""
    token = environ.get(ENV_TOKEN, "")
    if owner is None or not traits.url or not token:
        return None
    return HubReporter(traits.url, token, owner, interval=traits.interval,
                       timeout=traits.timeout, **parts)
