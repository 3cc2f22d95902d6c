#!/usr/bin/env python3
"""The JupyterHub service (`python -m jupyter_costguard.hub`) at 10, 100 and 1,000 user
servers: wall time and the service's own CPU per poll cycle, p50/p99 of `api/spend?by=user`
and of the admin page, next to the Hub's own `GET /hub/api/users` at the same size.

What runs, all on 127.0.0.1 (nothing leaves the machine):

- **one real costguard server** (`python -m jupyter_server` with costguard on a replayed
  GPU trace, no cloud lookups), started once: its real `costguard/api/status` document is
  the one every stand-in serves, with its own `user`, `server`, `time`, `totals.since` and a
  `totals.spend`/`waste` that grow between polls;
- **the stand-in** (`--standin`, one tornado process of its own, apart from the service): it
  stands in for the Hub's REST API and for the proxy in front of N user servers. It answers
  `GET /hub/api/users?state=ready&offset=&limit=` (the Hub's pagination format under
  `Accept: application/jupyterhub-pagination+json`, at most 200 a page, as the Hub),
  `GET /hub/api/user` (the identity of whatever token the service checks: an admin with
  `custom:costguard:admin`) and `GET /user/<name>/costguard/api/status` (403 without the
  service's `Authorization: token ...`). Its CPU per cycle is measured too, to show whether
  it, not the service, is what bounds the poll;
- **the service for real**: `python -m jupyter_costguard.hub --config=FILE` as a subprocess
  with the environment JupyterHub gives a managed service, `proxy_url` and the Hub API at
  the stand-in, a fresh SQLite per size, and a `poll_interval` long enough that cycles never
  overlap. The bench reads its log line "polled N servers in X s" as each cycle ends
  (`--CostGuardHub.log_level=INFO`: the line is INFO, under the Application's default WARN)
  and samples the service process's user+system CPU then: the difference between two such
  lines is one whole cycle (the fetches, the parsing and `HubStore.record`); the first cycle
  (every row new; its CPU would hold the start-up) is reported apart, wall time only. Then
  `--rounds` rounds, interleaved, from one keep-alive client with a token header, between
  two cycles, of `GET /services/costguard/api/spend?by=user`, of the page alone
  (`GET /services/costguard/`, its HTML) and of the whole *admin view* (the page, then the
  four calls its script makes on opening: `api/spend` by user, group and server and
  `api/series`, one after another), and last the admin view over and over from 0.1 s before
  the next cycle starts until it ends (its latency while a poll runs);
- **the Hub's own**: a real `jupyterhub` (with its real configurable-http-proxy, no
  services but an admin token, no spawner started) with N users made by
  `POST /hub/api/users`, and `--rounds` listings of all N by `GET /hub/api/users` (pages
  of 200 with the pagination header, as the service walks them). Those users have no
  server running, so the Hub returns empty `servers`; the service's `state=ready` filter
  would return none, so the Hub is asked for every user instead.

Goals (the issue): a poll of 1,000 servers under 10 s of wall time and under 1 s of the
service's CPU; the admin page under 200 ms.

    python bench/hub.py                       # 10, 100, 1,000 servers, 50 rounds
    python bench/hub.py --sizes 10,100 --quick
    python bench/hub.py --profile 1000        # in-process cycles, cProfile, the report
    PYTHONPATH=/path/with/pycurl python bench/hub.py --sizes 1000 --curl --no-hub

`--profile N` runs the poller in this process against the stand-in: steady cycles of the
shipped `Poller` + `HubStore.record`, of a keep-alive variant (aiohttp, an experiment) and,
where pycurl imports, of the shipped `Poller` under tornado's curl client; a cProfile of one
shipped cycle; and `report.rows`/`report.series` timed on the store that made. `--curl` runs
the service itself with `AsyncHTTPClient.configure(CurlAsyncHTTPClient)` (a sitecustomize on
its PYTHONPATH): what the one-line change suggested in bench/README.md would do.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import datetime as dt
import http.client
import io
import json
import os
import platform
import pstats
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import (
    NO_CLOUD,
    REPO,
    Log,
    Server,
    env_versions,
    free_port,
    md_table,
    ms,
    pct,
    progress_log,
    text_table,
    verdict,
)

sys.path.insert(0, str(REPO))

GOAL_POLL_WALL = 10.0  # s, a poll of 1,000 servers
GOAL_POLL_CPU = 1.0  # s of the service's CPU, same
GOAL_PAGE = 0.200  # s, the admin page
PAGE_SIZE = 200  # the Hub's default and largest page
PAGINATION = "application/jupyterhub-pagination+json"
PREFIX = "/services/costguard/"
POLLED = re.compile(r"polled (\d+) servers in ([0-9.]+) s \((\d+) not answering\)")
CHP = REPO / ".venv" / "node" / "node_modules" / ".bin" / "configurable-http-proxy"


def user_name(i: int) -> str:
    return f"user{i:04d}"


def groups_of(i: int) -> list[str]:
    return [f"team{i % 10}"] + (["gpu-heavy"] if i % 3 == 0 else [])


# --------------------------------------------------------------------------- the stand-in

def standin_main(port: int, n: int, doc_path: str, token: str) -> None:
    """The Hub's REST API and the proxy in front of `n` user servers (one process)."""
    from tornado import httpserver, ioloop, web

    template = json.loads(Path(doc_path).read_text())
    started = time.time()
    names = [user_name(i) for i in range(n)]
    index = {name: i for i, name in enumerate(names)}
    models = [{"kind": "user", "name": name, "admin": False, "groups": groups_of(i),
               "servers": {"": {"name": "", "ready": True, "url": f"/user/{name}/",
                                "user_options": {}}}}
              for i, name in enumerate(names)]
    identity = json.dumps({"kind": "user", "name": "admin", "admin": True, "groups": [],
                           "scopes": ["access:services!service=costguard",
                                      "custom:costguard:admin"]})
    counts = {"users": 0, "user": 0, "status": 0, "refused": 0}

    class Base(web.RequestHandler):
        def authorized(self, want: str | None = None) -> bool:
            auth = self.request.headers.get("Authorization", "")
            ok = auth.startswith("token ") and (want is None or auth == f"token {want}")
            if not ok:
                counts["refused"] += 1
                self.set_status(403)
                self.finish('{"status": 403, "message": "no token"}')
            return ok

        def send(self, body: str) -> None:
            self.set_header("Content-Type", "application/json")
            self.finish(body)

    class Users(Base):
        def get(self) -> None:
            if not self.authorized(token):
                return
            counts["users"] += 1
            offset = int(self.get_argument("offset", "0"))
            limit = min(PAGE_SIZE, int(self.get_argument("limit", str(PAGE_SIZE))))
            items = models[offset:offset + limit]  # every one is ready
            if PAGINATION not in self.request.headers.get("Accept", ""):
                self.send(json.dumps(items))
                return
            end = offset + len(items)
            nxt = None
            if end < n:
                nxt = {"offset": end, "limit": limit,
                       "url": f"/hub/api/users?state=ready&offset={end}&limit={limit}"}
            self.send(json.dumps({"items": items, "_pagination": {
                "offset": offset, "limit": limit, "total": n, "next": nxt}}))

    class Me(Base):
        def get(self) -> None:
            if self.authorized():
                counts["user"] += 1
                self.send(identity)

    class Status(Base):
        def get(self, name: str) -> None:
            i = index.get(name)
            if i is None:
                raise web.HTTPError(404)
            if not self.authorized(token):
                return
            counts["status"] += 1
            now = time.time()
            doc = dict(template)
            since = started - 3600.0 - i  # every server's ledger began an hour ago or more
            rate = float(template.get("rate_per_hour") or 36.0) * (1 + i % 4) / 4
            spend = rate * (now - since) / 3600.0
            doc["user"], doc["server"], doc["time"] = name, "", now
            doc["last_sample_time"] = now
            doc["rate_per_hour"] = rate
            doc["totals"] = {**template["totals"], "since": since,
                             "seconds": now - since, "spend": spend, "waste": 0.3 * spend}
            self.send(json.dumps(doc))

    class Stats(web.RequestHandler):
        def get(self) -> None:
            self.finish(counts)

    app = web.Application([
        (r"/hub/api/users", Users), (r"/hub/api/user", Me),
        (r"/user/([^/]+)/costguard/api/status", Status), (r"/bench/stats", Stats)])
    server = httpserver.HTTPServer(app)
    server.listen(port, "127.0.0.1")
    print("ready", flush=True)
    ioloop.IOLoop.current().start()


class Proc:
    """A subprocess in its own process group, its output to a file."""

    def __init__(self, argv: list[str], log_path: Path, env: dict[str, str] | None = None,
                 cwd: Path | None = None) -> None:
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.logf = open(log_path, "ab")
        self.proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=self.logf,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(20)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.logf.close()


def wait_http(port: int, path: str, proc: Proc, what: str, timeout: float = 60.0,
              headers: dict[str, str] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise RuntimeError(f"{what} exited early:\n{proc.tail()}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", path, headers=headers or {})
            status = conn.getresponse().status
            conn.close()
            if status < 500:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{what} not up in {timeout} s:\n{proc.tail()}")


def cpu_of(pid: int) -> float:
    import psutil

    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


# --------------------------------------------------------------------------- real document

def real_status(work: Path, log: Log) -> dict[str, Any]:
    """One real costguard server's `costguard/api/status` (a replayed 1-GPU trace)."""
    from tests.support.traces import write_trace

    work.mkdir(parents=True, exist_ok=True)
    trace = write_trace(work / "trace.json", [{"t": 0, "gpus": [
        {"utilization_percent": 0, "power_watts": 60, "processes": []}]}], gpus=1)
    server = Server(sys.executable, work, log)
    server.start({"ServerApp": {"jpserver_extensions": {"jupyter_costguard": True}},
                  "CostGuard": {"db_path": str(work / "ledger.sqlite"),
                                "sample_interval": 0.5, "hourly_rate": 36.0,
                                "replay_trace": str(trace), "replay_mode": "always",
                                "offload_warm_kernels": 0}})
    try:
        from common import Client

        c = Client(server)
        deadline = time.monotonic() + 30
        while True:
            code, body, _, _ = c.get("costguard/api/status")
            if code == 200 and json.loads(body).get("time") is not None:
                doc: dict[str, Any] = json.loads(body)
                return doc
            if time.monotonic() > deadline:
                raise RuntimeError(f"no status: {code} {body[:300]!r}")
            time.sleep(0.2)
    finally:
        server.stop()


# --------------------------------------------------------------------------- the service

class Service:
    def __init__(self, work: Path, standin_port: int, token: str, interval: float,
                 concurrency: int, curl: bool = False) -> None:
        self.port = free_port()
        work.mkdir(parents=True, exist_ok=True)
        config = work / "costguard_hub_config.py"
        settings = {"db_path": str(work / "costguard_hub.sqlite"),
                    "proxy_url": f"http://127.0.0.1:{standin_port}",
                    "poll_interval": interval, "poll_timeout": 5.0,
                    "poll_concurrency": concurrency}
        config.write_text("c = get_config()  # noqa\n" + "".join(
            f"c.CostGuardHub.{k} = {v!r}\n" for k, v in settings.items()))
        url = f"http://127.0.0.1:{self.port}"
        path = [str(REPO), os.environ.get("PYTHONPATH", "")]
        if curl:  # the experiment: tornado's curl client in the service, from a sitecustomize
            (work / "curl").mkdir(exist_ok=True)
            (work / "curl" / "sitecustomize.py").write_text(
                "from tornado.httpclient import AsyncHTTPClient\n"
                "AsyncHTTPClient.configure('tornado.curl_httpclient.CurlAsyncHTTPClient')\n")
            path.insert(0, str(work / "curl"))
        env = {**os.environ, **NO_CLOUD, "PYTHONPATH": os.pathsep.join(x for x in path if x),
               "PYTHONUNBUFFERED": "1",
               "JUPYTERHUB_API_TOKEN": token,
               "JUPYTERHUB_API_URL": f"http://127.0.0.1:{standin_port}/hub/api",
               "JUPYTERHUB_SERVICE_NAME": "costguard",
               "JUPYTERHUB_SERVICE_URL": url, "JUPYTERHUB_SERVICE_PREFIX": PREFIX,
               "JUPYTERHUB_CLIENT_ID": "service-costguard",
               "JUPYTERHUB_OAUTH_CALLBACK_URL": PREFIX + "oauth_callback",
               "JUPYTERHUB_BASE_URL": "/", "JUPYTERHUB_HOST": "",
               "JUPYTERHUB_OAUTH_ACCESS_SCOPES": '["access:services!service=costguard"]',
               "JUPYTERHUB_OAUTH_CLIENT_ALLOWED_SCOPES": '["custom:costguard:admin"]'}
        # its "polled N servers" line is INFO, below the Application's default WARN
        self.proc = Proc([sys.executable, "-m", "jupyter_costguard.hub", f"--config={config}",
                          "--CostGuardHub.log_level=INFO"],
                         work / "service.log", env=env, cwd=work)

    def cycles(self) -> list[tuple[int, float, int]]:
        text = self.proc.tail(10 ** 7)
        return [(int(m[1]), float(m[2]), int(m[3])) for m in POLLED.finditer(text)]


def measure_size(n: int, doc_path: Path, work: Path, rounds: int, cycles: int,
                 concurrency: int, log: Log, curl: bool = False) -> dict[str, Any]:
    token = secrets.token_hex(16)
    sport = free_port()
    standin = Proc([sys.executable, __file__, "--standin", str(sport), "--users", str(n),
                    "--doc", str(doc_path), "--token", token],
                   work / "standin.log", env={**os.environ, "PYTHONPATH": str(REPO)})
    service = None
    try:
        wait_http(sport, "/bench/stats", standin, "the stand-in")
        # long enough that a cycle (and the latency rounds after the last) never overlap
        interval = max(3.0, 0.012 * n + 2.0)
        service = Service(work / "service", sport, token, interval, concurrency, curl)
        seen: list[tuple[int, float, int]] = []
        marks: list[tuple[float, float, float]] = []  # (monotonic, service cpu, standin cpu)
        deadline = time.monotonic() + 30 + (cycles + 1) * (interval + 20)
        log(f"{n} servers: service on :{service.port}, stand-in on :{sport}, "
            f"poll every {interval:g} s")
        while len(seen) < cycles + 1:
            if not service.proc.alive():
                raise RuntimeError(f"service exited:\n{service.proc.tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"no poll cycles in time:\n{service.proc.tail()}")
            now_cycles = service.cycles()
            if len(now_cycles) > len(seen):
                marks.append((time.monotonic(), cpu_of(service.proc.pid), cpu_of(standin.pid)))
                seen = now_cycles
                log(f"  cycle {len(seen)}: {seen[-1][0]} servers in {seen[-1][1]:.2f} s, "
                    f"{seen[-1][2]} not answering")
                if len(now_cycles) > len(marks):  # two ended within one look: not separable
                    raise RuntimeError("cycles too close together to separate")
            time.sleep(0.01)
        # CPU of cycle k (k >= 2) = what the service used between the ends of k-1 and k;
        # the first cycle's figure also holds the service's start-up, so it is not used
        cpu = [b[1] - a[1] for a, b in zip(marks, marks[1:])]
        standin_cpu = [b[2] - a[2] for a, b in zip(marks, marks[1:])]
        walls = [c[1] for c in seen]
        lat = latency(service.port, token, rounds)
        after = service.cycles()
        during = during_poll(service, token, marks[-1][0] - walls[-1], interval)
        return {"servers": n, "answered_min": min(c[0] - c[2] for c in seen),
                "listed": [c[0] for c in seen], "first_wall": walls[0],
                "walls": walls[1:], "cpu": cpu, "standin_cpu": standin_cpu,
                "interval": interval, "overlapped": len(after) > len(seen),
                "during_ms": during, **lat}
    finally:
        if service is not None:
            service.proc.stop()
        standin.stop()


def during_poll(service: Service, token: str, last_start: float,
                interval: float) -> list[float]:
    """The admin view, over and over, from just before the next cycle starts (the service
    starts one every `interval` s) until it ends: its latency while a poll runs."""
    n0 = len(service.cycles())
    start = last_start + interval
    while start < time.monotonic() + 0.2:
        start += interval
    time.sleep(max(0.0, start - 0.1 - time.monotonic()))
    conn = http.client.HTTPConnection("127.0.0.1", service.port, timeout=60)
    headers = {"Authorization": f"token {token}"}
    out = []
    deadline = time.monotonic() + interval + 30
    while len(service.cycles()) == n0 and time.monotonic() < deadline:
        t0 = time.perf_counter()
        for p in ADMIN_VIEW:
            conn.request("GET", p, headers=headers)
            conn.getresponse().read()
        out.append(time.perf_counter() - t0)
    conn.close()
    return out


#: what the admin page asks for when it opens (page.html, refreshAdmin then refreshChart)
ADMIN_VIEW = [PREFIX, PREFIX + "api/spend?by=user", PREFIX + "api/spend?by=group",
              PREFIX + "api/spend?by=server", PREFIX + "api/series?by=user&step=hour"]


def latency(port: int, token: str, rounds: int) -> dict[str, Any]:
    """`rounds` rounds, in alternating order, of: api/spend?by=user; the page alone (its
    HTML); the whole admin view (the page and the four API calls its script makes on
    opening, one after the other: a bound on what the browser waits for)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Authorization": f"token {token}"}
    size: dict[str, int] = {}

    def get(path: str) -> None:
        conn.request("GET", path, headers=headers)
        r = conn.getresponse()
        body = r.read()
        if r.status != 200:
            raise RuntimeError(f"GET {path}: {r.status} {body[:300]!r}")
        size[path] = len(body)

    for p in ADMIN_VIEW:  # once each first: the HubOAuth cache, the page's file
        get(p)
    out: dict[str, list[float]] = {"spend": [], "page": [], "view": []}
    steps = {"spend": [ADMIN_VIEW[1]], "page": [ADMIN_VIEW[0]], "view": ADMIN_VIEW}
    for i in range(rounds):
        order = list(steps) if i % 2 == 0 else list(steps)[::-1]
        for k in order:
            t0 = time.perf_counter()
            for p in steps[k]:
                get(p)
            out[k].append(time.perf_counter() - t0)
    conn.close()
    return {"spend_ms": out["spend"], "page_ms": out["page"], "view_ms": out["view"],
            "bytes": size}


# --------------------------------------------------------------------------- the Hub's own

HUB_CONFIG = r'''
import json, os
spec = json.load(open({spec!r}))
c = get_config()  # noqa
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = spec["port"]
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = spec["hub_port"]
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:%d" % spec["proxy_api_port"]
c.ConfigurableHTTPProxy.command = [spec["chp"]]
c.ConfigurableHTTPProxy.pid_file = os.path.join(spec["dir"], "proxy.pid")
c.JupyterHub.db_url = "sqlite:///" + os.path.join(spec["dir"], "hub.sqlite")
c.JupyterHub.cookie_secret_file = os.path.join(spec["dir"], "cookie_secret")
c.JupyterHub.pid_file = os.path.join(spec["dir"], "hub.pid")
c.JupyterHub.cleanup_servers = True
c.JupyterHub.authenticator_class = "null"
c.JupyterHub.spawner_class = "simple"
c.JupyterHub.services = [{{"name": "bench", "api_token": spec["token"]}}]
c.JupyterHub.load_roles = [{{"name": "bench", "services": ["bench"],
                             "scopes": ["admin:users", "admin:servers", "list:users"]}}]
'''


class RealHub:
    def __init__(self, work: Path, log: Log) -> None:
        self.work = work
        self.log = log
        self.token = secrets.token_hex(16)
        self.hub_port = free_port()
        self.users = 0
        work.mkdir(parents=True, exist_ok=True)
        chp = str(CHP) if CHP.exists() else shutil.which("configurable-http-proxy")
        if chp is None:
            raise RuntimeError("configurable-http-proxy not found")
        spec = {"dir": str(work), "port": free_port(), "hub_port": self.hub_port,
                "proxy_api_port": free_port(), "chp": chp, "token": self.token}
        (work / "spec.json").write_text(json.dumps(spec))
        cfg = work / "jupyterhub_config.py"
        cfg.write_text(HUB_CONFIG.format(spec=str(work / "spec.json")))
        bindir = Path(sys.executable).parent
        env = {**os.environ, "PATH": f"{bindir}:{os.environ.get('PATH', '')}",
               "PYTHONUNBUFFERED": "1"}
        self.proc = Proc([str(bindir / "jupyterhub"), "-f", str(cfg)], work / "hub.log",
                         env=env, cwd=work)
        wait_http(self.hub_port, "/hub/api/", self.proc, "jupyterhub", timeout=120)
        self.conn = http.client.HTTPConnection("127.0.0.1", self.hub_port, timeout=120)

    def call(self, method: str, path: str, body: Any = None,
             accept: str = "application/json") -> Any:
        data = None if body is None else json.dumps(body).encode()
        self.conn.request(method, "/hub/api" + path, body=data, headers={
            "Authorization": f"token {self.token}", "Accept": accept,
            **({"Content-Type": "application/json"} if data else {})})
        r = self.conn.getresponse()
        payload = r.read()
        if r.status >= 400:
            raise RuntimeError(f"{method} {path}: {r.status} {payload[:300]!r}")
        return json.loads(payload) if payload else None

    def grow_to(self, n: int) -> None:
        if n > self.users:
            self.call("POST", "/users",
                      {"usernames": [user_name(i) for i in range(self.users, n)]})
            self.users = n

    def list_all(self) -> int:
        offset, got = 0, 0
        while True:
            page = self.call("GET", f"/users?offset={offset}&limit={PAGE_SIZE}",
                             accept=PAGINATION)
            got += len(page["items"])
            nxt = page["_pagination"]["next"]
            if not nxt:
                return got
            offset = int(nxt["offset"])

    def measure(self, n: int, rounds: int) -> dict[str, Any]:
        self.grow_to(n)
        got = self.list_all()  # warm
        times = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            self.list_all()
            times.append(time.perf_counter() - t0)
        return {"hub_users": got, "hub_ms": times,
                "hub_pages": -(-n // PAGE_SIZE)}

    def stop(self) -> None:
        self.conn.close()
        self.proc.stop()


# --------------------------------------------------------------------------- profile

def keepalive_poller(base: Any, hub_api: str, proxy: str, token: str,
                     concurrency: int) -> Any:
    """An experiment, not the product: the shipped Poller with its per-server fetch through
    one keep-alive aiohttp session (a pool of `concurrency` connections), to show what
    connection reuse alone saves. (The "curl" variant, run where pycurl imports, is the
    shipped Poller under `AsyncHTTPClient.configure(CurlAsyncHTTPClient)`, which also keeps
    connections.)"""
    import aiohttp

    from jupyter_costguard.hub.poller import reading_from_status

    class KeepAlivePoller(base):  # type: ignore[misc, valid-type]
        session: Any = None

        async def read_status(self, server: Any) -> Any:
            if self.session is None:
                self.session = aiohttp.ClientSession(
                    connector=aiohttp.TCPConnector(limit=concurrency),
                    timeout=aiohttp.ClientTimeout(total=self.timeout))
            url = f"{self.proxy_url}{server.url}costguard/api/status"
            async with self.session.get(url, headers=self._headers(),
                                        allow_redirects=False) as r:
                if r.status != 200:
                    raise ValueError(f"HTTP {r.status}")
                doc = json.loads(await r.read())
            return reading_from_status(server, doc, self.clock())

    return KeepAlivePoller(hub_api, proxy, token, timeout=5.0, concurrency=concurrency)


def profile(n: int, doc_path: Path, work: Path, concurrency: int, log: Log) -> str:
    """In-process, against the stand-in: steady cycles (`Poller.poll` + `HubStore.record`)
    of the shipped poller and of a keep-alive variant, a cProfile of one shipped cycle, and
    the report behind api/spend and api/series on the resulting store."""
    from jupyter_costguard.hub import report
    from jupyter_costguard.hub.budgets import Budgets
    from jupyter_costguard.hub.poller import Poller
    from jupyter_costguard.hub.store import HubStore

    token = secrets.token_hex(16)
    sport = free_port()
    work.mkdir(parents=True, exist_ok=True)
    standin = Proc([sys.executable, __file__, "--standin", str(sport), "--users", str(n),
                    "--doc", str(doc_path), "--token", token],
                   work / "standin.log", env={**os.environ, "PYTHONPATH": str(REPO)})
    out = io.StringIO()
    hub_api, proxy = f"http://127.0.0.1:{sport}/hub/api", f"http://127.0.0.1:{sport}"

    def say(line: str) -> None:
        log(line)
        print(line, file=out)

    try:
        wait_http(sport, "/bench/stats", standin, "the stand-in")
        variants = ["shipped", "keep-alive"]
        try:
            import pycurl  # noqa: F401
            variants.append("curl")
        except ImportError:
            say("(no pycurl here: the curl variant is skipped)")
        for variant in variants:
            store = HubStore(work / f"{variant}.sqlite")

            async def cycles(k: int, prof: cProfile.Profile | None = None,
                             variant: str = variant, store: HubStore = store) -> None:
                if variant in ("shipped", "curl"):
                    from tornado.httpclient import AsyncHTTPClient

                    AsyncHTTPClient.configure(
                        "tornado.curl_httpclient.CurlAsyncHTTPClient" if variant == "curl"
                        else None)  # None: tornado's simple client, the default
                    poller = Poller(hub_api, proxy, token, timeout=5.0,
                                    concurrency=concurrency)
                else:
                    poller = keepalive_poller(Poller, hub_api, proxy, token, concurrency)
                for i in range(k):
                    t0, c0 = time.perf_counter(), time.process_time()
                    if prof:
                        prof.enable()
                    c = await poller.poll()
                    t1, c1 = time.perf_counter(), time.process_time()
                    store.record(c.readings, c.failures,
                                 {key: sv.url for key, sv in c.running.items()},
                                 c.memberships, c.time)
                    if prof:
                        prof.disable()
                    t2, c2 = time.perf_counter(), time.process_time()
                    say(f"{variant} cycle {i + 1}{' (cProfile on)' if prof else ''}: "
                        f"{len(c.readings)} read, {len(c.failures)} failed: poll "
                        f"{t1 - t0:.2f} s wall / {c1 - c0:.2f} s CPU; record "
                        f"{t2 - t1:.3f} s wall / {c2 - c1:.3f} s CPU")
                    await asyncio.sleep(0.5)
                poller.close()
                if getattr(poller, "session", None) is not None:
                    await poller.session.close()

            asyncio.run(cycles(4))
            if variant == "shipped":
                prof = cProfile.Profile()
                asyncio.run(cycles(1, prof))
                st = pstats.Stats(prof, stream=out)
                st.sort_stats("tottime").print_stats(20)
                budgets = Budgets("month", {}, {"team1": 100.0}, 50.0)
                now = time.time()
                for by in report.BY:
                    t0 = time.perf_counter()
                    for _ in range(5):
                        rows = report.rows(store, budgets, by, now)
                    say(f"report.rows(by={by}): {len(rows)} rows, "
                        f"{(time.perf_counter() - t0) / 5 * 1000:.1f} ms")
                t0 = time.perf_counter()
                for _ in range(5):
                    report.series(store, "user", now - 48 * 3600, now, "hour")
                say(f"report.series(by=user, 48 h): "
                    f"{(time.perf_counter() - t0) / 5 * 1000:.1f} ms")
                prof = cProfile.Profile()
                prof.enable()
                report.rows(store, budgets, "server", now)
                prof.disable()
                st = pstats.Stats(prof, stream=out)
                st.sort_stats("tottime").print_stats(12)
            store.close()
    finally:
        standin.stop()
    return out.getvalue()


# --------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="10,100,1000", help="user servers, comma-separated")
    p.add_argument("--rounds", type=int, default=50, help="requests per latency figure")
    p.add_argument("--cycles", type=int, default=3, help="steady poll cycles per size")
    p.add_argument("--concurrency", type=int, default=50,
                   help="c.CostGuardHub.poll_concurrency (the service's default: 50)")
    p.add_argument("--quick", action="store_true", help="10 rounds, 2 cycles")
    p.add_argument("--curl", action="store_true",
                   help="an experiment: the service with tornado's curl client (needs pycurl "
                        "importable, e.g. on PYTHONPATH)")
    p.add_argument("--no-hub", action="store_true", help="skip the real JupyterHub")
    p.add_argument("--profile", type=int, metavar="N",
                   help="only profile one in-process poll of N servers (cProfile)")
    p.add_argument("--json", type=Path, help="also write every figure here")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (logs)")
    p.add_argument("--standin", type=int, help=argparse.SUPPRESS)
    p.add_argument("--users", type=int, help=argparse.SUPPRESS)
    p.add_argument("--doc", help=argparse.SUPPRESS)
    p.add_argument("--token", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.standin:
        standin_main(args.standin, args.users, args.doc, args.token)
        return 0
    if args.quick:
        args.rounds, args.cycles = 10, 2
    sizes = [int(s) for s in args.sizes.split(",") if s]
    log = progress_log()
    started = time.monotonic()
    load_before = [round(x, 2) for x in os.getloadavg()]
    tmp = Path(tempfile.mkdtemp(prefix="costguard-bench-hub-"))
    results: list[dict[str, Any]] = []
    try:
        log("one real costguard server for its status document")
        doc = real_status(tmp / "server", log)
        doc_path = tmp / "status.json"
        doc_path.write_text(json.dumps(doc))
        log(f"status document: {len(json.dumps(doc))} bytes")
        if args.profile:
            print(profile(args.profile, doc_path, tmp / "profile", args.concurrency, log))
            return 0
        for n in sizes:
            results.append(measure_size(n, doc_path, tmp / f"n{n}", args.rounds,
                                        args.cycles, args.concurrency, log,
                                        args.curl))
        if not args.no_hub:
            log("a real jupyterhub for /hub/api/users")
            hub = RealHub(tmp / "hub", log)
            try:
                for r in results:
                    r.update(hub.measure(r["servers"], args.rounds))
                    log(f"  hub: {r['hub_users']} users listed")
            finally:
                hub.stop()
    finally:
        if args.keep:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs) if xs else float("nan")

    header = ["servers", "poll wall s (first)", "service CPU s / poll", "stand-in CPU s / poll",
              "api/spend p50 / p99 ms", "page p50 / p99 ms",
              "admin view p50 / p99 ms", "admin view during a poll: n, p50 / max ms",
              "/hub/api/users p50 / p99 ms"]
    rows = []
    for r in results:
        hub_cell = "n/a"
        if "hub_ms" in r:
            hub_cell = (f"{ms(pct(r['hub_ms'], 50))} / {ms(pct(r['hub_ms'], 99))} "
                        f"({r['hub_pages']} page{'s' if r['hub_pages'] > 1 else ''})")
        rows.append([
            f"{r['servers']:,}",
            f"{mean(r['walls']):.2f} ({r['first_wall']:.2f})",
            f"{mean(r['cpu']):.3f}",
            f"{mean(r['standin_cpu']):.3f}",
            f"{ms(pct(r['spend_ms'], 50))} / {ms(pct(r['spend_ms'], 99))}",
            f"{ms(pct(r['page_ms'], 50))} / {ms(pct(r['page_ms'], 99))}",
            f"{ms(pct(r['view_ms'], 50))} / {ms(pct(r['view_ms'], 99))}",
            f"{len(r['during_ms'])}, {ms(pct(r['during_ms'], 50))} / "
            f"{ms(max(r['during_ms'], default=float('nan')))}",
            hub_cell])
    big = [r for r in results if r["servers"] >= 1000]
    goals = []
    for r in big:
        goals.append(
            f"{r['servers']:,} servers: poll wall {mean(r['walls']):.2f} s < "
            f"{GOAL_POLL_WALL:g} s {verdict(mean(r['walls']) < GOAL_POLL_WALL)}; service CPU "
            f"{mean(r['cpu']):.3f} s < {GOAL_POLL_CPU:g} s "
            f"{verdict(mean(r['cpu']) < GOAL_POLL_CPU)};"
            f" page p99 {ms(pct(r['page_ms'], 99))} ms < {GOAL_PAGE * 1000:g} ms "
            f"{verdict(pct(r['page_ms'], 99) < GOAL_PAGE)}, admin view p99 "
            f"{ms(pct(r['view_ms'], 99))} ms {verdict(pct(r['view_ms'], 99) < GOAL_PAGE)}")
    goal_line = ("Goals: a poll of 1,000 servers < 10 s wall and < 1 s of the service's CPU; "
                 "the admin page < 200 ms. " + (" ".join(goals) or "(1,000 not run)"))
    notes = []
    for r in results:
        if r["answered_min"] != r["servers"]:
            notes.append(f"{r['servers']}: only {r['answered_min']} answered in some cycle")
        if r["overlapped"]:
            notes.append(f"{r['servers']}: a poll cycle ran during the latency rounds")
    versions = env_versions(sys.executable, ["jupyterhub", "tornado", "jupyter_server"])
    meta = {"date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{os.cpu_count()} CPUs ({platform.machine()})",
            "versions": versions, "seconds": round(time.monotonic() - started, 1),
            "rounds": args.rounds, "cycles": args.cycles, "concurrency": args.concurrency,
            "load_before": load_before, "load_after": [round(x, 2) for x in os.getloadavg()]}
    print(text_table(header, rows))
    print("\n" + goal_line)
    for note in notes:
        print("NOTE: " + note)
    print(f"\n(ran {meta['seconds']} s on {meta['machine']}, load average "
          f"{meta['load_before'][0]} before, {meta['load_after'][0]} after; {meta['versions']}; "
          f"{args.rounds} rounds, {args.cycles} steady cycles, concurrency "
          f"{args.concurrency}{', curl client (experiment)' if args.curl else ''})")
    print("\nMarkdown:\n\n" + md_table(header, rows) + "\n\n" + goal_line)
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
