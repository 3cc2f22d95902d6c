"""The Hub's REST API as the service uses it: who has a server running (since when, with which
profile), each user's groups, who a token belongs to, and stopping a server.

The service's own token goes to the Hub and nowhere else: never to a user's server, which is
the user's own process. What servers spend reaches the service in their own reports
(common/hubprotocol.py), pushed with their own tokens.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlencode

from tornado.httpclient import AsyncHTTPClient, HTTPRequest

#: the Hub's pagination media type (JupyterHub 2+); without it /users is one unpaged list
PAGINATION = "application/jupyterhub-pagination+json"


@dataclass(frozen=True)
class RunningServer:
    user: str
    server: str  # "" for the default server
    url: str  # the server's path on the proxy, "/user/alice/"
    profile: str = ""
    #: when the Hub started it (epoch seconds); None when the Hub does not say
    started: float | None = None
    #: the Hub calls it ready (False while its spawn is pending: it costs, but is not up)
    ready: bool = True


def profile_of(server_model: dict[str, Any]) -> str:
    """The spawner profile a server was started with (KubeSpawner's `profile` user option,
    or `profile` in any spawner's options form), "" when none."""
    options = server_model.get("user_options") or {}
    value = options.get("profile", "") if isinstance(options, dict) else ""
    return value if isinstance(value, str) else ""


def started_of(server_model: dict[str, Any]) -> float | None:
    raw = server_model.get("started")
    if not isinstance(raw, str):
        return None
    try:
        return datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def http_client() -> type[AsyncHTTPClient]:
    """tornado's curl client where pycurl is installed (it keeps connections alive), else its
    own."""
    try:
        import pycurl  # noqa: F401
        from tornado.curl_httpclient import CurlAsyncHTTPClient
    except ImportError:
        return AsyncHTTPClient
    return CurlAsyncHTTPClient


class HubAPI:
    def __init__(self, hub_api_url: str, token: str, *, timeout: float = 10.0,
                 concurrency: int = 10, clock: Callable[[], float] | None = None) -> None:
        self.hub_api_url = hub_api_url.rstrip("/")
        self._token = token
        self.timeout = timeout
        self.http = http_client()(force_instance=True,
                                    defaults={"connect_timeout": timeout,
                                              "request_timeout": timeout},
                                    max_clients=concurrency)

    def close(self) -> None:
        self.http.close()

    def _headers(self, accept: str = "application/json") -> dict[str, str]:
        return {"Authorization": f"token {self._token}", "Accept": accept}

    async def call(self, method: str, path: str, body: Any = None) -> Any:
        """A call to the Hub's REST API with the service's token; the parsed answer."""
        req = HTTPRequest(
            self.hub_api_url + path, method=method, headers=self._headers(),
            body=None if body is None else json.dumps(body),
            allow_nonstandard_methods=True, follow_redirects=False)
        resp = await self.http.fetch(req)
        return json.loads(resp.body) if resp.body else None

    async def running_servers(self) -> tuple[dict[tuple[str, str], RunningServer],
                                             dict[str, list[str]]]:
        """Every active server (all pages of /users?state=active) and every user's groups."""
        running: dict[tuple[str, str], RunningServer] = {}
        groups: dict[str, list[str]] = {}
        offset = 0
        while True:
            query = urlencode({"state": "active", "offset": offset, "limit": 200})
            req = HTTPRequest(f"{self.hub_api_url}/users?{query}",
                              headers=self._headers(PAGINATION), follow_redirects=False)
            page = json.loads((await self.http.fetch(req)).body)
            items = page["items"] if isinstance(page, dict) else page
            for user in items:
                name = user["name"]
                groups[name] = sorted(user.get("groups") or [])
                for sname, model in (user.get("servers") or {}).items():
                    if model.get("ready") or model.get("pending") == "spawn":
                        running[(name, sname)] = RunningServer(
                            name, sname, model["url"], profile_of(model), started_of(model),
                            ready=bool(model.get("ready")))
            nxt = page.get("_pagination", {}).get("next") if isinstance(page, dict) else None
            if not nxt:
                return running, groups
            offset = int(nxt["offset"])

    async def server(self, user: str, server: str) -> RunningServer | None:
        """One user's server as the Hub knows it now (None: not running)."""
        model = await self.call("GET", f"/users/{quote(user, safe='')}")
        found = (model.get("servers") or {}).get(server) if isinstance(model, dict) else None
        if not found:
            return None
        return RunningServer(user, server, found["url"], profile_of(found), started_of(found))

    async def stop_server(self, user: str, server: str) -> None:
        path = f"/users/{quote(user, safe='')}/server" if not server else \
            f"/users/{quote(user, safe='')}/servers/{quote(server, safe='')}"
        await self.call("DELETE", path)
