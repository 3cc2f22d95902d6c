"""One poll cycle: ask the Hub who has a server running, then ask every server's costguard.

Servers are read through the Hub's proxy (as a browser would reach them) with the service's
own token, all at once up to `concurrency`, each with its own timeout: a server that does
not answer, answers with an error or with something that is not a costguard status is
reported as a failure with the reason and never holds up the others.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from jupyter_costguard.hub.cull import CullClient
from jupyter_costguard.hub.store import Reading

#: the Hub's pagination media type (JupyterHub 2+); without it /users is one unpaged list
PAGINATION = "application/jupyterhub-pagination+json"


@dataclass(frozen=True)
class RunningServer:
    user: str
    server: str  # "" for the default server
    url: str  # the server's path on the proxy, "/user/alice/"
    profile: str = ""


@dataclass
class Cycle:
    """What one poll found."""

    time: float
    running: dict[tuple[str, str], RunningServer] = field(default_factory=dict)
    memberships: dict[str, list[str]] = field(default_factory=dict)
    readings: list[Reading] = field(default_factory=list)
    failures: dict[tuple[str, str], str] = field(default_factory=dict)
    seconds: float = 0.0


def profile_of(server_model: dict[str, Any]) -> str:
    """The spawner profile a server was started with (KubeSpawner's `profile` user option,
    or `profile` in any spawner's options form), "" when none."""
    options = server_model.get("user_options") or {}
    value = options.get("profile", "") if isinstance(options, dict) else ""
    return value if isinstance(value, str) else ""


def reading_from_status(server: RunningServer, doc: Any, now: float) -> Reading:
    """A store reading from a costguard `/status` document; ValueError if it is not one."""
    try:
        totals = doc["totals"]
        activity = doc.get("gpu_activity") or {}
        idle_since = activity.get("idle_since")
        return Reading(
            user=server.user, server=server.server, url=server.url,
            time=float(doc["time"] if doc.get("time") is not None else now),
            since=float(totals["since"]), spend=float(totals["spend"]),
            waste=float(totals["waste"]), currency=str(doc["currency"]),
            simulated=bool(doc["simulated"]),
            rate_per_hour=float(doc["rate_per_hour"] or 0.0),
            gpu_count=int(doc["gpu_count"]),
            gpus_held=int(activity.get("gpus_held", 0)),
            gpus_busy=int(activity.get("gpus_busy", 0)),
            gpu_idle_since=None if idle_since is None else float(idle_since),
            profile=server.profile,
        )
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ValueError(f"not a costguard status document ({type(e).__name__}: {e})") from None


def http_client() -> type[AsyncHTTPClient]:
    """tornado's curl client where pycurl is installed (it keeps connections to the proxy
    alive: a third of the CPU per poll, bench/hub.py), else its own."""
    try:
        import pycurl  # noqa: F401
        from tornado.curl_httpclient import CurlAsyncHTTPClient
    except ImportError:
        return AsyncHTTPClient
    return CurlAsyncHTTPClient


class Poller(CullClient):
    def __init__(self, hub_api_url: str, proxy_url: str, token: str, *,
                 timeout: float = 5.0, concurrency: int = 50,
                 clock: Callable[[], float] = time.time) -> None:
        self.hub_api_url = hub_api_url.rstrip("/")
        self.proxy_url = proxy_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.concurrency = concurrency
        self.clock = clock
        self.http = http_client()(force_instance=True,
                                    defaults={"connect_timeout": timeout,
                                              "request_timeout": timeout},
                                    max_clients=concurrency)

    def close(self) -> None:
        self.http.close()

    def _headers(self, accept: str = "application/json") -> dict[str, str]:
        return {"Authorization": f"token {self.token}", "Accept": accept}

    async def hub(self, method: str, path: str, body: Any = None) -> Any:
        """A call to the Hub's REST API with the service's token; the parsed answer."""
        req = HTTPRequest(
            self.hub_api_url + path, method=method, headers=self._headers(),
            body=None if body is None else json.dumps(body),
            allow_nonstandard_methods=True)
        resp = await self.http.fetch(req)
        return json.loads(resp.body) if resp.body else None

    async def running_servers(self) -> tuple[dict[tuple[str, str], RunningServer],
                                             dict[str, list[str]]]:
        """Every ready server (all pages of /users?state=ready) and every user's groups."""
        running: dict[tuple[str, str], RunningServer] = {}
        groups: dict[str, list[str]] = {}
        offset = 0
        while True:
            query = urlencode({"state": "ready", "offset": offset, "limit": 200})
            req = HTTPRequest(f"{self.hub_api_url}/users?{query}",
                              headers=self._headers(PAGINATION))
            page = json.loads((await self.http.fetch(req)).body)
            items = page["items"] if isinstance(page, dict) else page
            for user in items:
                name = user["name"]
                groups[name] = sorted(user.get("groups") or [])
                for sname, model in (user.get("servers") or {}).items():
                    if model.get("ready"):
                        running[(name, sname)] = RunningServer(
                            name, sname, model["url"], profile_of(model))
            nxt = page.get("_pagination", {}).get("next") if isinstance(page, dict) else None
            if not nxt:
                return running, groups
            offset = int(nxt["offset"])

    async def read_status(self, server: RunningServer) -> Reading:
        url = f"{self.proxy_url}{server.url}costguard/api/status"  # the Hub escaped it
        try:
            resp = await self.http.fetch(HTTPRequest(url, headers=self._headers(),
                                                     follow_redirects=False))
        except HTTPClientError as e:
            if e.code == 599:  # tornado's own: the connection or the answer timed out
                raise ValueError(f"no answer within {self.timeout:g} s") from None
            raise ValueError(f"HTTP {e.code} from {server.url}costguard/api/status") from None
        try:
            doc = json.loads(resp.body)
        except ValueError:
            raise ValueError("the answer is not JSON") from None
        return reading_from_status(server, doc, self.clock())

    # --- what the culler does (hub.cull.CullClient) -----------------------------------

    async def _server_call(self, url: str, path: str, method: str = "GET",
                           body: Any = None) -> Any:
        req = HTTPRequest(f"{self.proxy_url}{url}costguard/api/{path}", method=method,
                          headers={**self._headers(), "Content-Type": "application/json"},
                          body=None if body is None else json.dumps(body),
                          follow_redirects=False)
        resp = await self.http.fetch(req)
        return json.loads(resp.body) if resp.body else None

    async def raise_alert(self, url: str, body: dict[str, Any]) -> dict[str, Any]:
        doc = await self._server_call(url, "alerts", "POST", body)
        return doc if isinstance(doc, dict) else {}

    async def dismiss_alert(self, url: str, alert_id: str) -> None:
        await self._server_call(url, f"alerts/{alert_id}/dismiss", "POST", {})

    async def active_jobs(self, url: str) -> int:
        doc = await self._server_call(url, "jobs?limit=500")
        return sum(1 for j in doc.get("jobs", []) if j.get("state") in ("queued", "running"))

    async def stop_server(self, user: str, server: str) -> None:
        path = f"/users/{quote(user)}/server" if not server else \
            f"/users/{quote(user)}/servers/{quote(server)}"
        await self.hub("DELETE", path)

    async def poll(self) -> Cycle:
        started = time.monotonic()
        cycle = Cycle(time=self.clock())
        cycle.running, cycle.memberships = await self.running_servers()
        gate = asyncio.Semaphore(self.concurrency)

        async def one(server: RunningServer) -> None:
            async with gate:
                try:
                    cycle.readings.append(await asyncio.wait_for(
                        self.read_status(server), self.timeout + 1.0))
                except asyncio.TimeoutError:
                    cycle.failures[(server.user, server.server)] = \
                        f"no answer within {self.timeout:g} s"
                except Exception as e:  # every other server still gets read
                    cycle.failures[(server.user, server.server)] = _why(e, self.timeout)

        await asyncio.gather(*(one(s) for s in cycle.running.values()))
        cycle.seconds = time.monotonic() - started
        return cycle


def _why(e: Exception, timeout: float) -> str:
    if isinstance(e, HTTPClientError) and e.code == 599:
        return f"no answer within {timeout:g} s"
    if isinstance(e, (ConnectionError, OSError)):
        return f"cannot connect ({e})"
    return str(e) or type(e).__name__
