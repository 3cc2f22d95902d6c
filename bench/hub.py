#!/usr/bin/env python3
"""The JupyterHub service (`python -m jupyter_costguard.hub`) under the push design: 1,000 and
10,000 user servers each POST a report to `{prefix}api/report` every 30 s with their own
token. Measured: the service's CPU per second of wall time (its process and the pages' process
it starts), the report latency, the admin page's latency (`api/spend?by=user` as an admin,
and the page with all its data), and how often the service asks the Hub who a token is
(`GET /hub/api/user`).

What runs, all on 127.0.0.1 (nothing leaves the machine), fresh for each scenario:

- **the service for real**: `python -m jupyter_costguard.hub --config=FILE` as a subprocess
  with the environment JupyterHub gives a managed service (`JUPYTERHUB_API_TOKEN`,
  `JUPYTERHUB_API_URL`, `JUPYTERHUB_SERVICE_URL`, `JUPYTERHUB_SERVICE_PREFIX`,
  `JUPYTERHUB_SERVICE_NAME`, the OAuth client settings HubOAuth reads), a fresh SQLite,
  `report_interval` = `poll_interval` = 30 s, a GPU cull policy, budgets held while servers
  run (dry run) and both profiles priced (so the culler, the budget figures and the meter do
  their work too), and the `token_cache_seconds` of the scenario.
- **a stand-in for the Hub's REST API** (`--standin`, a tornado process of its own): 10,000
  real single-user servers cannot run on this machine, and a real Hub would need each of
  them spawned to list them as running and to issue their tokens, so a stand-in speaks the
  Hub's protocol for exactly the calls the service makes, and counts them:
  `GET /hub/api/users?state=active&offset=&limit=` (the service's token only; the Hub's
  pagination format under `Accept: application/jupyterhub-pagination+json`, 200 a page, as
  the Hub), `GET /hub/api/users/<name>` (one user's servers), `GET /hub/api/user` with any
  token (HubAuth's identify call: a server's token is the model `{kind: "user", name,
  scopes: ["access:servers!server=<name>/", "access:services!service=costguard", ...]}`,
  the admin's has `custom:costguard:admin`, anything else is 403 as at the Hub) and
  `DELETE /hub/api/users/<name>/server` (a cull; none happen). Every server has been running
  since 10 minutes before the stand-in started (its `started`).
- **the load** (`--load`, a process of its own, raw asyncio, so it stays cheap on 2 cores):
  each server's report is a document built with `protocol.report_doc` (since = its start,
  time = now, spend growing at its rate; one server in ten a GPU server), sent with its own
  token on a connection of its own (`Connection: close`, as the server side's tornado
  client does), the N servers spread evenly over each 30 s. It records each report's
  latency (connect to the end of the answer), its status, and how late it was sent (so a
  generator that fell behind shows).

Each scenario is three intervals after the service's first look at the Hub: the *first
interval* (every token new to HubAuth, every server's first report), then *reports only*
(one full interval, the steady state) and *reports + admin* (one interval in which an admin
also opens the page every second: the page HTML, `api/spend` by user, group and server
at once as its script does, then `api/series`). The service's user+system CPU (psutil) and
the stand-in's call counts are read at each phase's bounds.

Then, for the largest size (`--floor`), **the floor**: the same load for one interval
against tornado with one empty handler on the report path (no token, no parse, no store),
which shows what tornado alone costs per report on this machine; the service's CPU is
compared with it as a ratio.

Goals (issue 22): 10,000 servers under 25% of one core; the page p99 < 200 ms.

    python bench/hub.py                          # 1,000 and 10,000; token cache 300 s and 1 s
    python bench/hub.py --sizes 1000 --caches 300   # one scenario, ~2 min
    python bench/hub.py --sizes 10000 --caches 300 --profile   # the service under cProfile

`--profile` runs the service under cProfile in every thread (the IO loop, the store's worker
threads, HubAuth's) and prints where its time went; its CPU figures are then the profiler's,
not the service's.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import hashlib
import hmac
import http.client
import json
import os
import platform
import re
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import NO_CLOUD, REPO, env_versions, free_port, md_table, pct, progress_log, text_table

GOAL_CPU = 0.25  # of one core, 10,000 servers
GOAL_PAGE = 0.200  # s, the admin page's p99
PAGE_SIZE = 200  # the Hub's default and largest page
PAGINATION = "application/jupyterhub-pagination+json"
PREFIX = "/services/costguard/"
POLLED = re.compile(r"costguard-hub: (\d+) servers running, (\d+) reporting \(([0-9.]+) s\)")
#: the most latencies one phase keeps (bounded whatever the size)
MAX_SAMPLES = 200_000
HERE = Path(__file__).resolve()


def user_name(i: int) -> str:
    return f"user{i:05d}"


def groups_of(i: int) -> list[str]:
    return [f"team{i % 20}"] + (["gpu-users"] if i % 10 == 0 else [])


def is_gpu(i: int) -> bool:
    return i % 10 == 0


def token_of(secret: str, who: str) -> str:
    """A Hub-like token for a server (`who` = its index) or the admin: the stand-in checks
    it against the same secret, so it needs no table of 10,000 tokens."""
    mac = hmac.new(secret.encode(), who.encode(), hashlib.sha256).hexdigest()[:32]
    return f"cgb{who}x{mac}"


def iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat().replace("+00:00", "Z")


# --------------------------------------------------------------------------- the stand-in

def standin_main(cfg: dict[str, Any]) -> None:
    """A stand-in for the Hub's REST API (see the module's docstring), on loopback."""
    from tornado import httpserver, ioloop, web

    n, secret, service_token = cfg["n"], cfg["secret"], cfg["service_token"]
    started = iso(cfg["started"])
    admin_token = token_of(secret, "admin")

    def user_model(i: int) -> dict[str, Any]:
        name = user_name(i)
        return {"kind": "user", "name": name, "admin": False, "groups": groups_of(i),
                "roles": ["user"], "created": started, "last_activity": started,
                "pending": None, "server": f"/user/{name}/",
                "servers": {"": {"name": "", "ready": True, "pending": None, "stopped": False,
                                 "url": f"/user/{name}/", "started": started,
                                 "last_activity": started,
                                 "user_options": {"profile": "gpu" if is_gpu(i) else "cpu"},
                                 "progress_url": f"/hub/api/users/{name}/server/progress"}}}

    users = [user_model(i) for i in range(n)]
    index = {u["name"]: i for i, u in enumerate(users)}
    counts = {"identify": 0, "identify_admin": 0, "identify_refused": 0, "users_pages": 0,
              "users_one": 0, "stop": 0, "refused": 0}

    def identity(token: str) -> dict[str, Any] | None:
        """What the Hub's `GET /hub/api/user` answers for a token (None: 403)."""
        if hmac.compare_digest(token, admin_token):
            counts["identify_admin"] += 1
            return {"kind": "user", "name": "admin", "admin": True, "groups": [],
                    "roles": ["admin"], "session_id": None,
                    "scopes": ["access:services!service=costguard", "custom:costguard:admin",
                               "read:users", "access:servers"]}
        head, _, _ = token.partition("x")
        if head.startswith("cgb") and head[3:].isdigit():
            i = int(head[3:])
            if i < n and hmac.compare_digest(token, token_of(secret, str(i))):
                name = user_name(i)
                return {"kind": "user", "name": name, "admin": False,
                        "groups": groups_of(i), "roles": ["server"], "session_id": None,
                        "server": f"/user/{name}/",
                        "scopes": [f"access:servers!server={name}/",
                                   f"users:activity!user={name}",
                                   f"read:users:activity!user={name}",
                                   "access:services!service=costguard"]}
        counts["identify_refused"] += 1
        return None

    class Base(web.RequestHandler):
        def token(self) -> str:
            auth = self.request.headers.get("Authorization", "")
            return auth[6:] if auth.lower().startswith("token ") else ""

        def service_only(self) -> bool:
            if hmac.compare_digest(self.token(), service_token):
                return True
            counts["refused"] += 1
            self.set_status(403)
            self.finish({"status": 403, "message": "Forbidden"})
            return False

        def send(self, doc: Any) -> None:
            self.set_header("Content-Type", "application/json")
            self.finish(json.dumps(doc))

    class Users(Base):
        def get(self) -> None:
            if not self.service_only():
                return
            counts["users_pages"] += 1
            offset = int(self.get_argument("offset", "0"))
            limit = min(PAGE_SIZE, int(self.get_argument("limit", str(PAGE_SIZE))))
            items = users[offset:offset + limit]  # every server here is active
            if PAGINATION not in self.request.headers.get("Accept", ""):
                self.send(items)
                return
            nxt = None
            if offset + limit < n:
                nxt = {"offset": offset + limit, "limit": limit,
                       "url": f"{self.request.protocol}://{self.request.host}/hub/api/users?"
                              f"state=active&offset={offset + limit}&limit={limit}"}
            self.send({"items": items, "_pagination": {"offset": offset, "limit": limit,
                                                       "total": n, "next": nxt}})

    class OneUser(Base):
        def get(self, name: str) -> None:
            if not self.service_only():
                return
            counts["users_one"] += 1
            if name not in index:
                self.set_status(404)
                self.send({"status": 404, "message": f"No such user: {name}"})
                return
            self.send(users[index[name]])

    class Stop(Base):
        def delete(self, name: str, server: str = "") -> None:
            if not self.service_only():
                return
            counts["stop"] += 1
            self.set_status(204)
            self.finish()

    class Identify(Base):
        def get(self) -> None:
            counts["identify"] += 1
            model = identity(self.token())
            if model is None:
                self.set_status(403)
                self.send({"status": 403, "message": "Forbidden"})
                return
            self.send(model)

    class Counts(web.RequestHandler):
        def get(self) -> None:  # the bench's own, not the Hub's
            self.finish(dict(counts))

    app = web.Application([
        (r"/hub/api/users", Users),
        (r"/hub/api/users/([^/]+)", OneUser),
        (r"/hub/api/users/([^/]+)/server", Stop),
        (r"/hub/api/users/([^/]+)/servers/([^/]*)", Stop),
        (r"/hub/api/user", Identify),
        (r"/bench/counts", Counts),
    ], log_function=lambda handler: None)
    server = httpserver.HTTPServer(app)
    server.listen(cfg["port"], "127.0.0.1")
    loop = ioloop.IOLoop.current()
    signal.signal(signal.SIGTERM, lambda *_: loop.add_callback_from_signal(loop.stop))
    loop.start()


# --------------------------------------------------------------------------- the load

def floor_main(cfg: dict[str, Any]) -> None:
    """The floor: tornado with one handler on the report path that reads the body and answers
    `{"accepted": true}` (no token check, no parse, no store). Under the same load it shows
    what tornado alone costs per report on this machine, which no handler can go below."""
    from tornado import web

    from jupyter_costguard.common.hubprotocol import REPORT_PATH

    @web.stream_request_body
    class Empty(web.RequestHandler):
        def data_received(self, chunk: bytes) -> None:
            pass

        def post(self) -> None:
            self.set_header("Content-Type", "application/json; charset=UTF-8")
            self.finish(b'{"accepted": true, "warnings": []}')

    async def serve() -> None:
        web.Application([(PREFIX + REPORT_PATH, Empty)]).listen(
            cfg["port"], "127.0.0.1", xheaders=False)
        await asyncio.Event().wait()

    asyncio.run(serve())


def load_main(cfg: dict[str, Any]) -> None:
    """N servers' reports, spread evenly over each interval, until `end`; the figures go to
    `cfg["out"]` as JSON."""
    asyncio.run(_load(cfg))


async def _load(cfg: dict[str, Any]) -> None:
    from jupyter_costguard.common.hubprotocol import REPORT_PATH, report_doc

    n, interval, port = cfg["n"], cfg["interval"], cfg["port"]
    t0, end, started = cfg["t0"], cfg["end"], cfg["started"]
    phases = [(str(a), float(lo), float(hi)) for a, lo, hi in cfg["phases"]]
    path = PREFIX + REPORT_PATH
    keep = cfg.get("connection", "close") == "keep-alive"
    close = "" if keep else "Connection: close\r\n"
    heads = [(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
              f"Authorization: token {token_of(cfg['secret'], str(i))}\r\n"
              f"Content-Type: application/json\r\n{close}"
              "Content-Length: ").encode() for i in range(n)]
    #: each server's kept connection (keep-alive: as cost/hubreport.py's KeptConnection)
    kept: dict[int, tuple[asyncio.StreamReader, asyncio.StreamWriter]] = {}
    since = [started + 2.0 + (i % 7) for i in range(n)]  # each run's start, after the Hub's
    rate = [2.5 if is_gpu(i) else 0.05 for i in range(n)]
    stats: dict[str, dict[str, Any]] = {
        name: {"latency": [], "status": {}, "lag": [], "errors": []} for name, _, _ in phases}
    sem = asyncio.Semaphore(cfg["concurrency"])
    tasks: set[asyncio.Task[None]] = set()

    def phase_of(t: float) -> dict[str, Any] | None:
        for name, lo, hi in phases:
            if lo <= t < hi:
                return stats[name]
        return None

    def doc(i: int, now: float) -> bytes:
        hours = (now - since[i]) / 3600.0
        spend = rate[i] * hours
        gpu = is_gpu(i)
        idle = gpu and i % 20 == 0  # half the GPU servers idle since soon after their start
        return json.dumps(report_doc(
            server="", time=now, since=since[i], spend=spend,
            waste=spend * 0.8 if idle else 0.0, currency="USD", simulated=False,
            rate_per_hour=rate[i], gpu_count=1 if gpu else 0, gpus_held=1 if gpu else 0,
            gpus_busy=1 if gpu and not idle else 0,
            gpu_idle_since=since[i] + 60.0 if idle else None,
            active_jobs=0, kept=[])).encode()

    async def one(i: int, due: float, lag: float) -> None:
        st = phase_of(due)
        body = doc(i, time.time())
        status: int | str = "error"
        payload = b""
        t1 = time.monotonic()
        writer: asyncio.StreamWriter | None = None
        try:
            if keep and i in kept:
                reader, conn = kept.pop(i)
            else:
                reader, conn = await asyncio.wait_for(
                    asyncio.open_connection("127.0.0.1", port), 30)
            writer = conn
            conn.write(heads[i] + str(len(body)).encode() + b"\r\n\r\n" + body)
            if keep:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
                m = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
                payload = head + (await asyncio.wait_for(
                    reader.readexactly(int(m[1])), 30) if m else b"")
            else:
                payload = await asyncio.wait_for(reader.read(-1), 30)
            status = int(payload[9:12]) if payload.startswith(b"HTTP/1.1 ") else "bad"
            if status == 200 and b'"accepted": true' not in payload:
                status = "not accepted"
            if keep and b"connection: close" not in payload.lower():
                kept[i] = (reader, conn)  # for the next report
                writer = None
        except (OSError, asyncio.TimeoutError, ValueError, asyncio.IncompleteReadError) as e:
            payload = repr(e).encode()
        finally:
            if writer is not None:
                writer.close()
            sem.release()
        seconds = time.monotonic() - t1
        if st is not None:
            key = str(status)
            st["status"][key] = st["status"].get(key, 0) + 1
            if len(st["latency"]) < MAX_SAMPLES:
                st["latency"].append(seconds)
                st["lag"].append(lag)
            if status != 200 and len(st["errors"]) < 5:
                st["errors"].append(f"{i}: {payload[-300:].decode(errors='replace')}")

    r, done = 0, False
    while not done:  # round r: server i reports at t0 + r * interval + i * interval / n
        for i in range(n):
            due = t0 + r * interval + i * interval / n
            if due >= end:
                done = True
                break
            delay = due - time.time()
            if delay > 0.001:
                await asyncio.sleep(delay)
            lag = max(0.0, time.time() - due)
            await sem.acquire()
            task = asyncio.create_task(one(i, due, lag))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        r += 1
    if tasks:
        await asyncio.gather(*tasks)
    for _, w in kept.values():
        w.close()
    Path(cfg["out"]).write_text(json.dumps(stats))


# --------------------------------------------------------------------------- processes

class Proc:
    """A subprocess in its own process group, its output to a file."""

    def __init__(self, argv: list[str], log_path: Path, env: dict[str, str] | None = None,
                 cwd: Path | None = None) -> None:
        import psutil

        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.logf = open(log_path, "ab")
        self.proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=self.logf,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.ps = psutil.Process(self.proc.pid)

    def cpu(self) -> float:
        """User + system CPU of the process and of its live children (the service's pages'
        process counts as the service's)."""
        import psutil

        t = self.ps.cpu_times()
        total = float(t.user + t.system)
        try:
            children = self.ps.children(recursive=True)
        except psutil.Error:
            children = []
        for child in children:
            try:
                c = child.cpu_times()
            except psutil.Error:
                continue
            total += float(c.user + c.system)
        return total

    def loop_cpu(self) -> float:
        """The main thread's CPU (the service's IO loop; its other threads are the store's
        workers, HubAuth's resolver and asyncio's default executor)."""
        for t in self.ps.threads():
            if t.id == self.ps.pid:
                return float(t.user_time + t.system_time)
        return float("nan")

    def tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM its group, wait, then SIGKILL what is left; its exit status (None: it had
        to be killed)."""
        code: int | None = self.proc.poll()
        if code is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                code = self.proc.wait(timeout)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                code = None
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait(10)
        self.logf.close()
        return code


def bench_proc(mode: str, cfg: dict[str, Any], work: Path, name: str) -> Proc:
    """This file run as the stand-in or the load, its settings in a JSON file."""
    path = work / f"{name}.json"
    path.write_text(json.dumps(cfg))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        x for x in (str(REPO), str(HERE.parent), os.environ.get("PYTHONPATH", "")) if x)}
    return Proc([sys.executable, str(HERE), mode, str(path)], work / f"{name}.log", env=env)


def get_json(port: int, path: str, timeout: float = 10.0) -> Any:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        body = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"GET {path}: {resp.status}")
        return json.loads(body)
    finally:
        conn.close()


def wait_until(check: Any, proc: Proc, what: str, timeout: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise RuntimeError(f"{what} exited early:\n{proc.tail()}")
        try:
            value = check()
        except OSError:
            value = None
        if value:
            return value
        time.sleep(0.1)
    raise RuntimeError(f"{what} not ready in {timeout} s:\n{proc.tail()}")


def service_proc(work: Path, hub_port: int, service_token: str, cache: int,
                 interval: float, profile_out: Path | None,
                 service_path: str | None = None) -> tuple[Proc, int]:
    port = free_port()
    settings: dict[str, Any] = {
        "db_path": str(work / "costguard_hub.sqlite"), "poll_interval": interval,
        "report_interval": interval, "token_cache_seconds": cache,
        "default_user_budget": 100.0, "group_budgets": {"gpu-users": 5000.0},
        # the meter and the budget hold do their work each cycle too (the load's own rates)
        "profile_prices": {"gpu": {"hourly_rate": 2.5, "gpus": 1},
                           "cpu": {"hourly_rate": 0.05}},
        "budget_stop": "dry-run",
        "cull_policies": [{"name": "gpu", "profiles": ["gpu"], "idle_minutes": 240,
                           "warn_minutes": 10}]}
    config = work / "costguard_hub_config.py"
    config.write_text("c = get_config()  # noqa\n" + "".join(
        f"c.CostGuardHub.{k} = {v!r}\n" for k, v in settings.items()))
    env = {**os.environ, **NO_CLOUD,
           "PYTHONPATH": os.pathsep.join(
               x for x in (service_path, str(REPO), str(HERE.parent),
                           os.environ.get("PYTHONPATH", "")) if x),
           "PYTHONUNBUFFERED": "1",
           # what JupyterHub gives a managed service
           "JUPYTERHUB_API_TOKEN": service_token,
           "JUPYTERHUB_API_URL": f"http://127.0.0.1:{hub_port}/hub/api",
           "JUPYTERHUB_BASE_URL": "/", "JUPYTERHUB_HOST": "",
           "JUPYTERHUB_SERVICE_NAME": "costguard",
           "JUPYTERHUB_SERVICE_URL": f"http://127.0.0.1:{port}",
           "JUPYTERHUB_SERVICE_PREFIX": PREFIX,
           "JUPYTERHUB_CLIENT_ID": "service-costguard",
           "JUPYTERHUB_OAUTH_CALLBACK_URL": PREFIX + "oauth_callback",
           "JUPYTERHUB_OAUTH_ACCESS_SCOPES": '["access:services!service=costguard"]',
           "JUPYTERHUB_OAUTH_CLIENT_ALLOWED_SCOPES": '["custom:costguard:admin"]'}
    argv = ["-m", "jupyter_costguard.hub", f"--config={config}"]
    if profile_out is not None:
        argv = [str(HERE), "--profiled-service", str(profile_out), "--", *argv[2:]]
    return Proc([sys.executable, *argv], work / "service.log", env=env, cwd=work), port


def profiled_service(out: str, argv: list[str]) -> None:
    """The service in this process with cProfile on in every thread, timed by each thread's
    own CPU time (`time.thread_time`: a wait for a lock, the disk or the next request costs
    nothing); all threads' stats merged into `out` when it stops (SIGTERM)."""
    import cProfile
    import pstats
    import threading

    profiles: list[cProfile.Profile] = []

    def start(*_: Any) -> None:  # the first event in a new thread: profile it from here
        sys.setprofile(None)
        p = cProfile.Profile(time.thread_time)
        profiles.append(p)
        p.enable()

    threading.setprofile(start)
    main = cProfile.Profile(time.thread_time)
    from jupyter_costguard.hub.app import main as service_main

    main.enable()
    try:
        service_main(argv)
    finally:
        main.disable()
        for p in profiles:
            p.disable()
        stats = pstats.Stats(main)
        for p in profiles:
            try:
                stats.add(p)
            except (TypeError, ValueError):
                pass  # a thread that never ran a call
        stats.dump_stats(out)


# --------------------------------------------------------------------------- the admin

class KeepAlive:
    """One keep-alive connection (as a browser keeps one): GET with the admin's token."""

    def __init__(self, port: int, token: str) -> None:
        self.port, self.token = port, token
        self.rw: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def get(self, path: str) -> tuple[int, bytes, float]:
        t0 = time.monotonic()
        if self.rw is None:
            self.rw = await asyncio.open_connection("127.0.0.1", self.port)
        reader, writer = self.rw
        writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
                     f"Authorization: token {self.token}\r\n\r\n".encode())
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        m = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
        if m is None:
            raise RuntimeError(f"GET {path}: no Content-Length in {head[:300]!r}")
        body = await reader.readexactly(int(m[1]))
        return status, body, time.monotonic() - t0

    def close(self) -> None:
        if self.rw is not None:
            self.rw[1].close()


async def admin_reads(port: int, token: str, until: float, n: int) -> dict[str, Any]:
    """The admin page opened every second until `until` (epoch): the HTML, `api/spend` by
    user, group and server at once (as the page's script asks), then `api/series`."""
    conns = [KeepAlive(port, token) for _ in range(3)]
    spend_user: list[float] = []
    views: list[float] = []
    page: list[float] = []
    bad: list[str] = []
    short = 0
    tick = time.time()
    try:
        while tick < until:  # one a second; a late one starts as the one before ends
            await asyncio.sleep(max(0.0, tick - time.time()))
            t0 = time.monotonic()
            code, html, secs = await conns[0].get(PREFIX)
            page.append(secs)
            if code != 200 or b'"admin": true' not in html:
                bad.append(f"page {code}, not an admin's")
            answers = await asyncio.gather(*(
                c.get(f"{PREFIX}api/spend?by={by}")
                for c, by in zip(conns, ("user", "group", "server"))))
            hour = int(time.time() // 3600) * 3600
            code_s, _, _ = await conns[0].get(
                f"{PREFIX}api/series?by=user&step=hour&since={hour - 47 * 3600}"
                f"&until={hour + 3600}")
            views.append(time.monotonic() - t0)
            spend_user.append(answers[0][2])
            for (code, body, _), by in zip(answers, ("user", "group", "server")):
                if code != 200:
                    bad.append(f"spend?by={by} {code}: {body[:200]!r}")
            if code_s != 200:
                bad.append(f"series {code_s}")
            if answers[0][0] == 200 and answers[0][1].count(b'"key": ') < n:
                short += 1
            tick = max(tick + 1.0, time.time())
    finally:
        for c in conns:
            c.close()
    return {"spend_user": spend_user, "view": views, "page": page, "bad": bad[:10],
            "short": short}


# --------------------------------------------------------------------------- a scenario

def scenario(n: int, cache: int, args: argparse.Namespace, work: Path,
             log: Any, connection: str = "keep-alive") -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    interval = args.interval
    secret = secrets.token_hex(16)
    service_token = secrets.token_hex(32)
    hub_port = free_port()
    started = time.time() - 600.0  # every server started 10 min ago
    standin = bench_proc("--standin", {"port": hub_port, "n": n, "secret": secret,
                                       "service_token": service_token, "started": started},
                         work, "standin")
    service: Proc | None = None
    load: Proc | None = None
    result: dict[str, Any] = {"servers": n, "token_cache_seconds": cache,
                              "connection": connection}
    try:
        wait_until(lambda: get_json(hub_port, "/bench/counts"), standin, "the stand-in")
        profile_out = work / "service.prof" if args.profile else None
        service, port = service_proc(work, hub_port, service_token, cache, interval,
                                     profile_out, args.service_path)
        svc = service

        def first_poll() -> bool:
            return any(int(m[1]) == n for m in POLLED.finditer(svc.tail(10 ** 6)))

        wait_until(first_poll, service, "the service's first look at the Hub")
        t0 = time.time() + 1.0
        bounds = {"first": (t0, t0 + interval),
                  "reports": (t0 + interval + 3, t0 + 2 * interval + 3),
                  "admin": (t0 + 2 * interval + 3, t0 + 3 * interval + 3)}
        end = bounds["admin"][1]
        out = work / "load-out.json"
        load = bench_proc("--load", {
            "port": port, "n": n, "secret": secret, "started": started, "t0": t0,
            "end": end, "interval": interval, "concurrency": args.concurrency,
            "connection": connection,
            "phases": [(k, lo, hi) for k, (lo, hi) in bounds.items()], "out": str(out)},
            work, "load")
        log(f"  {n:,} servers, token cache {cache} s, {connection}: load from +1 s, "
            f"3 x {interval:g} s")
        marks: dict[str, dict[str, Any]] = {}

        def mark(name: str) -> None:
            assert service is not None and load is not None
            marks[name] = {"t": time.time(), "service": service.cpu(),
                           "loop": service.loop_cpu(),
                           "standin": standin.cpu(),
                           "load": load.cpu() if load.alive() else None,
                           "hub": get_json(hub_port, "/bench/counts"),
                           "polls": [float(m[3]) for m in POLLED.finditer(service.tail(10 ** 7))
                                     if int(m[1]) == n]}

        def sleep_until(t: float) -> None:
            time.sleep(max(0.0, t - time.time()))

        sleep_until(t0)
        mark("first0")
        sleep_until(bounds["first"][1])
        mark("first1")
        # one admin visit between the phases: the admin's token is known to HubAuth, as
        # after a first visit
        admin_token = token_of(secret, "admin")
        asyncio.run(admin_reads(port, admin_token, time.time() + 0.5, n))
        sleep_until(bounds["reports"][0])
        mark("reports0")
        sleep_until(bounds["reports"][1])
        mark("reports1")
        mark("admin0")
        admin = asyncio.run(admin_reads(port, admin_token, bounds["admin"][1] - 0.5, n))
        sleep_until(end)
        mark("admin1")
        load.proc.wait(120)
        stats = json.loads(out.read_text())
        result["service_rss_mb"] = round(service.ps.memory_info().rss / 2 ** 20, 1)
        code = service.stop()
        result["service_exit"] = code
        db = sqlite3.connect(f"file:{work / 'costguard_hub.sqlite'}?mode=ro", uri=True)
        result["db_epochs"] = db.execute("SELECT COUNT(*) FROM epochs").fetchone()[0]
        result["db_ok"] = db.execute(
            "SELECT COUNT(*) FROM servers WHERE state = 'ok'").fetchone()[0]
        db.close()
    finally:
        for p in (load, service, standin):
            if p is not None:
                p.stop()
    for phase in ("first", "reports", "admin"):
        a, b = marks[f"{phase}0"], marks[f"{phase}1"]
        wall = b["t"] - a["t"]
        st = stats[phase]
        lat = st["latency"]
        cpu_load = (None if a["load"] is None or b["load"] is None
                    else (b["load"] - a["load"]) / wall)
        result[phase] = {
            "wall": round(wall, 2),
            "service_cpu": (b["service"] - a["service"]) / wall,
            "loop_cpu": (b["loop"] - a["loop"]) / wall,
            "standin_cpu": (b["standin"] - a["standin"]) / wall,
            "load_cpu": cpu_load,
            "identify_per_s": (b["hub"]["identify"] - a["hub"]["identify"]) / wall,
            "hub_calls": {k: b["hub"][k] - a["hub"][k] for k in b["hub"]},
            "polls": b["polls"][len(a["polls"]):],
            "reports": len(lat), "status": st["status"], "errors": st["errors"],
            "latency_p50": pct(lat, 50), "latency_p99": pct(lat, 99),
            "latency_max": max(lat, default=float("nan")),
            "lag_p99": pct(st["lag"], 99), "lag_max": max(st["lag"], default=float("nan")),
        }
    result["admin"].update({
        "views": len(admin["view"]), "spend_user_p50": pct(admin["spend_user"], 50),
        "spend_user_p99": pct(admin["spend_user"], 99),
        "spend_user_max": max(admin["spend_user"], default=float("nan")),
        "view_p50": pct(admin["view"], 50), "view_p99": pct(admin["view"], 99),
        "view_max": max(admin["view"], default=float("nan")),
        "page_p99": pct(admin["page"], 99), "bad": admin["bad"], "short": admin["short"]})
    if args.profile:
        result["profile"] = str(work / "service.prof")
    return result


def floor_scenario(n: int, args: argparse.Namespace, work: Path, log: Any,
                   connection: str) -> dict[str, Any]:
    """The same load, one interval, against `floor_main`: its CPU per second of wall time."""
    work.mkdir(parents=True, exist_ok=True)
    port = free_port()
    floor = bench_proc("--floor-server", {"port": port}, work, "floor")
    load: Proc | None = None
    try:
        def listening() -> bool:
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                return True
            except OSError:
                return False

        wait_until(listening, floor, "the floor server")
        t0 = time.time() + 1.0
        end = t0 + args.interval + 3
        out = work / "load-out.json"
        load = bench_proc("--load", {
            "port": port, "n": n, "secret": "floor", "started": time.time() - 600.0,
            "t0": t0, "end": end, "interval": args.interval,
            "concurrency": args.concurrency, "connection": connection,
            "phases": [("reports", t0 + 3, end)], "out": str(out)}, work, "load")
        log(f"  {n:,} servers, {connection}: the floor (an empty tornado handler), "
            f"{args.interval:g} s")
        time.sleep(max(0.0, t0 + 3 - time.time()))
        a, ta = floor.cpu(), time.time()
        time.sleep(max(0.0, end - time.time()))
        b, tb = floor.cpu(), time.time()
        load.proc.wait(120)
        stats = json.loads(out.read_text())["reports"]
    finally:
        for p in (load, floor):
            if p is not None:
                p.stop()
    return {"servers": n, "connection": connection, "cpu": (b - a) / (tb - ta),
            "reports": len(stats["latency"]), "status": stats["status"],
            "latency_p99": pct(stats["latency"], 99)}


# --------------------------------------------------------------------------- the report

def pc(x: float | None) -> str:
    return "n/a" if x is None or x != x else f"{100 * x:.1f}%"


def msf(x: float) -> str:
    return "n/a" if x != x else f"{x * 1000:.1f}"


def table(results: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    header = ["servers", "token cache s", "connection", "service CPU: reports only (its IO loop)",
              "+ admin every 1 s",
              "first 30 s", "report p50 / p99 ms", "/hub/api/user calls/s: steady, first 30 s",
              "api/spend?by=user p50 / p99 ms", "admin page + data p50 / p99 ms",
              "reports accepted", "stand-in CPU", "load CPU"]
    rows = []
    for r in results:
        f, s, a = r["first"], r["reports"], r["admin"]
        sent = sum(sum(r[p]["status"].values()) for p in ("first", "reports", "admin"))
        ok = sum(r[p]["status"].get("200", 0) for p in ("first", "reports", "admin"))
        rows.append([
            f"{r['servers']:,}", str(r["token_cache_seconds"]), r.get("connection", "close"),
            f"{pc(s['service_cpu'])} ({pc(s['loop_cpu'])})",
            pc(a["service_cpu"]), pc(f["service_cpu"]),
            f"{msf(s['latency_p50'])} / {msf(s['latency_p99'])}",
            f"{s['identify_per_s']:.1f}, {f['identify_per_s']:.1f}",
            f"{msf(a['spend_user_p50'])} / {msf(a['spend_user_p99'])}",
            f"{msf(a['view_p50'])} / {msf(a['view_p99'])}",
            f"{ok:,} / {sent:,}", pc(s["standin_cpu"]), pc(s["load_cpu"])])
    return header, rows


def comparisons(results: list[dict[str, Any]]) -> list[str]:
    """Ratios within this run (the machine is noisy; ratios of one run hold better)."""
    first = results[0].get("connection", "close") if results else "close"
    out = []
    pairs: dict[tuple[int, int], dict[str, dict[str, Any]]] = {}
    for r in results:
        pairs.setdefault((r["servers"], r["token_cache_seconds"]), {})[
            r.get("connection", "close")] = r
    for (n, c), got in sorted(pairs.items()):
        if "keep-alive" in got and "close" in got:
            ka, cl = got["keep-alive"]["reports"], got["close"]["reports"]
            out.append(f"{n:,} servers, token cache {c} s: a kept connection vs a new one per "
                       f"report: service CPU {pc(ka['service_cpu'])} vs "
                       f"{pc(cl['service_cpu'])} (x{ka['service_cpu'] / cl['service_cpu']:.2f})")
    results = [r for r in results if r.get("connection", "close") == first]
    by = {(r["servers"], r["token_cache_seconds"]): r for r in results}
    sizes = sorted({r["servers"] for r in results})
    caches = sorted({r["token_cache_seconds"] for r in results})
    for c in caches:
        if len(sizes) > 1 and (sizes[0], c) in by and (sizes[-1], c) in by:
            lo, hi = by[(sizes[0], c)], by[(sizes[-1], c)]
            out.append(
                f"token cache {c} s, {sizes[-1]:,} vs {sizes[0]:,} servers "
                f"(x{sizes[-1] / sizes[0]:g} load): service CPU x"
                f"{hi['reports']['service_cpu'] / lo['reports']['service_cpu']:.2f} "
                f"(reports only), x{hi['admin']['service_cpu'] / lo['admin']['service_cpu']:.2f}"
                f" (+ admin); api/spend?by=user p99 x"
                f"{hi['admin']['spend_user_p99'] / lo['admin']['spend_user_p99']:.1f}")
    for n in sizes:
        have = [c for c in caches if (n, c) in by]
        if len(have) > 1:
            off, on = by[(n, min(have))], by[(n, max(have))]
            d_cpu = off["reports"]["service_cpu"] - on["reports"]["service_cpu"]
            d_calls = off["reports"]["identify_per_s"] - on["reports"]["identify_per_s"]
            per_call = d_cpu / d_calls if d_calls > 0 else float("nan")
            steady = n / max(have)
            out.append(
                f"{n:,} servers, token cache {min(have)} s vs {max(have)} s: "
                f"/hub/api/user calls {off['reports']['identify_per_s']:.1f}/s vs "
                f"{on['reports']['identify_per_s']:.1f}/s, service CPU x"
                f"{off['reports']['service_cpu'] / on['reports']['service_cpu']:.2f} "
                f"({pc(off['reports']['service_cpu'])} vs {pc(on['reports']['service_cpu'])});"
                f" one identify call costs the service ~{per_call * 1000:.2f} ms of CPU, so "
                f"with a {max(have)} s cache, past its first expiry (~{steady:.0f} calls/s), "
                f"about {pc(on['reports']['service_cpu'] + steady * per_call)} of a core")
    return out


def floor_lines(results: list[dict[str, Any]], floors: list[dict[str, Any]]) -> list[str]:
    out = []
    for f in floors:
        for r in results:
            if r["servers"] == f["servers"] and r.get("connection") == f["connection"]:
                cpu = r["reports"]["service_cpu"]
                out.append(
                    f"{f['servers']:,} servers, {f['connection']}, token cache "
                    f"{r['token_cache_seconds']} s: service CPU {pc(cpu)} vs the floor (an "
                    f"empty tornado handler on the same load) {pc(f['cpu'])}: "
                    f"x{cpu / f['cpu']:.2f}, {pc(cpu - f['cpu'])} of a core above tornado "
                    f"alone ({f['reports']:,} reports, {f['status']})")
    return out


def goals(results: list[dict[str, Any]]) -> list[str]:
    out = []
    for r in results:
        if r["servers"] < 10_000:
            continue
        cpu, a = r["reports"]["service_cpu"], r["admin"]
        out.append(
            f"{r['servers']:,} servers, token cache {r['token_cache_seconds']} s, "
            f"{r.get('connection', 'close')}: service CPU "
            f"{pc(cpu)} < 25% {'PASS' if cpu < GOAL_CPU else 'FAIL'} (with the admin page "
            f"every second: {pc(a['service_cpu'])}); api/spend?by=user p99 "
            f"{msf(a['spend_user_p99'])} ms < 200 ms "
            f"{'PASS' if a['spend_user_p99'] < GOAL_PAGE else 'FAIL'}; page + data p99 "
            f"{msf(a['view_p99'])} ms {'PASS' if a['view_p99'] < GOAL_PAGE else 'FAIL'}")
    return out


def notes(results: list[dict[str, Any]]) -> list[str]:
    out = []
    for r in results:
        tag = f"{r['servers']:,}/{r['token_cache_seconds']} s/{r.get('connection', 'close')}"
        for phase in ("first", "reports", "admin"):
            p = r[phase]
            bad = {k: v for k, v in p["status"].items() if k != "200"}
            if bad:
                out.append(f"{tag} {phase}: answers other than 200: {bad}; {p['errors'][:2]}")
            if p["lag_p99"] > 0.5:
                out.append(f"{tag} {phase}: the load fell behind (lag p99 "
                           f"{p['lag_p99']:.2f} s, max {p['lag_max']:.2f} s)")
            polls = ", ".join(f"{s:.2f}" for s in p["polls"])
            out.append(f"{tag} {phase}: {p['reports']:,} reports in {p['wall']:.1f} s, "
                       f"latency max {msf(p['latency_max'])} ms; polls of the Hub (s): "
                       f"{polls or 'none'}; stand-in calls {p['hub_calls']}")
        a = r["admin"]
        if a["bad"] or a["short"]:
            out.append(f"{tag}: admin answers not OK: {a['bad']}, {a['short']} short")
        out.append(f"{tag}: {a['views']} admin page opens, spend?by=user max "
                   f"{msf(a['spend_user_max'])} ms, page + data max {msf(a['view_max'])} ms, "
                   f"HTML p99 {msf(a['page_p99'])} ms; service RSS {r['service_rss_mb']} MB, "
                   f"exit {r['service_exit']}; SQLite: {r['db_epochs']:,} epochs, "
                   f"{r['db_ok']:,} servers ok")
    return out


def print_profile(path: str, limit: int = 30) -> str:
    import io
    import pstats

    buf = io.StringIO()
    stats = pstats.Stats(path, stream=buf)
    stats.sort_stats("tottime").print_stats(limit)
    stats.sort_stats("cumulative").print_stats(limit)
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--sizes", default="1000,10000", help="user servers, comma-separated")
    p.add_argument("--connections", default="keep-alive,close",
                   help="how servers send reports: keep-alive (one kept connection, as "
                        "cost/hubreport.py does) and/or close (a new connection per report)")
    p.add_argument("--caches", default="300",
                   help="c.CostGuardHub.token_cache_seconds to run each size with (300: the "
                        "default; 1: every report's token checked at the Hub)")
    p.add_argument("--interval", type=float, default=30.0,
                   help="seconds between a server's reports (the service's report_interval "
                        "and poll_interval)")
    p.add_argument("--concurrency", type=int, default=512,
                   help="the most reports in flight at once")
    p.add_argument("--profile", action="store_true",
                   help="run the service under cProfile (all threads) and print its profile")
    p.add_argument("--service-path", metavar="DIR",
                   help="run the service's jupyter_costguard from DIR (an A/B against another "
                        "version: git archive REV jupyter_costguard | tar -x -C DIR)")
    p.add_argument("--floor", default="largest", choices=("largest", "all", "none"),
                   help="also run the same load against an empty tornado handler (what "
                        "tornado alone costs here), for the largest size, every size or none")
    p.add_argument("--json", type=Path, help="also write every figure here")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (logs)")
    p.add_argument("--standin", help=argparse.SUPPRESS)
    p.add_argument("--load", help=argparse.SUPPRESS)
    p.add_argument("--floor-server", help=argparse.SUPPRESS)
    p.add_argument("--profiled-service", help=argparse.SUPPRESS)
    args, rest = p.parse_known_args(argv)
    if args.standin:
        standin_main(json.loads(Path(args.standin).read_text()))
        return 0
    if args.load:
        load_main(json.loads(Path(args.load).read_text()))
        return 0
    if args.floor_server:
        floor_main(json.loads(Path(args.floor_server).read_text()))
        return 0
    if args.profiled_service:
        profiled_service(args.profiled_service, [a for a in rest if a != "--"])
        return 0
    if rest:
        p.error(f"unrecognized arguments: {' '.join(rest)}")
    sizes = [int(s) for s in args.sizes.split(",") if s]
    caches = [int(c) for c in args.caches.split(",") if c]
    log = progress_log()
    started = time.monotonic()
    load_before = [round(x, 2) for x in os.getloadavg()]
    tmp = Path(tempfile.mkdtemp(prefix="costguard-bench-hub-"))
    results: list[dict[str, Any]] = []
    floors: list[dict[str, Any]] = []
    try:
        for n in sizes:
            for cache in caches:
                for conn in [c for c in args.connections.split(",") if c]:
                    results.append(scenario(n, cache, args, tmp / f"n{n}-c{cache}-{conn}",
                                            log, conn))
            if args.floor == "all" or (args.floor == "largest" and n == max(sizes)):
                for conn in [c for c in args.connections.split(",") if c]:
                    floors.append(floor_scenario(n, args, tmp / f"n{n}-floor-{conn}", log,
                                                 conn))
    finally:
        if args.keep or args.profile:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--",
                            "jupyter_costguard/hub"], capture_output=True, text=True).stdout
    versions = env_versions(sys.executable, ["jupyterhub", "tornado", "aiohttp", "psutil"])
    meta = {"date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{os.cpu_count()} CPUs ({platform.machine()}, "
                       f"{platform.processor() or 'unknown'})",
            "commit": commit + (" (hub/ modified)" if dirty.strip() else " (hub/ clean)")
                      + (f", the service from {args.service_path}" if args.service_path
                         else ""),
            "versions": {**versions, "sqlite": sqlite3.sqlite_version},
            "seconds": round(time.monotonic() - started, 1), "interval": args.interval,
            "load_before": load_before, "load_after": [round(x, 2) for x in os.getloadavg()],
            "argv": sys.argv[1:] if argv is None else argv}
    header, rows = table(results)
    print(text_table(header, rows))
    lines = comparisons(results) + floor_lines(results, floors) + goals(results)
    print()
    for line in lines:
        print(line)
    print()
    for line in notes(results):
        print("  " + line)
    print(f"\n(ran {meta['seconds']} s on {meta['machine']}, {meta['commit']}, load average "
          f"{load_before[0]} before, {meta['load_after'][0]} after; {meta['versions']})")
    print("\nMarkdown:\n\n" + md_table(header, rows))
    for r in results:
        if "profile" in r:
            print(f"\nProfile of the service, {r['servers']:,} servers, cache "
                  f"{r['token_cache_seconds']} s ({r['profile']}):\n")
            print(print_profile(r["profile"]))
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "results": results, "floors": floors},
                                        indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
