"""Bench-only Jupyter server extension: lets bench/sampling.py steer and observe costguard.

Loaded only by the bench's own server (``jpserver_extensions: {"costguard_bench_ext": true}``
with ``bench/`` on PYTHONPATH); it is not part of the product and ships nowhere.

What it does, all from inside the one server process under test:

- pause / resume costguard's sampling task and change its interval at run time, so that the
  idle baseline, the 1 Hz windows and the fast windows are taken on the same process with
  the same kernels (pausing = cancelling the sampling task, which is the state
  ``c.CostGuard.enabled=False`` leaves the service in: built, never ticking);
- toggle ``ResourceUseDisplay.track_cpu_percent`` of jupyter-resource-usage at run time
  (its handler reads the config object on every request);
- time each ``CostService.tick`` (monotonic start/end, so the bench can tell which of its
  requests overlapped a sample, and the worker thread's own CPU time) and each loop-side
  ``gather`` (IO-loop thread CPU);
- optionally run cProfile over ticks on the worker thread.

Endpoints (token-authenticated like any APIHandler):
  POST {base}costguard-bench/control  {"interval": float|null, "track_cpu_percent": bool,
                                        "profile": bool}
  GET  {base}costguard-bench/ticks?since=K
  GET  {base}costguard-bench/profile?limit=L
"""

from __future__ import annotations

import asyncio
import cProfile
import io
import json
import os
import pstats
import re
import threading
import time
from typing import Any

from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web


class _State:
    def __init__(self) -> None:
        self.installed = False
        self.ticks: list[tuple[float, float, float]] = []  # (mono start, mono end, thread CPU s)
        self.gathers: list[tuple[float, float]] = []  # (mono start, loop-thread CPU s)
        self.in_tick = False
        self.sampler_tid: int | None = None
        self.profile_on = False
        self.profiler: cProfile.Profile | None = None
        self.profile_ticks = 0
        self.profile_seconds = 0.0
        self.lock = threading.Lock()


STATE = _State()


def _costguard_app(serverapp: Any) -> Any:
    ext = serverapp.extension_manager.extensions["jupyter_costguard"]
    return ext.extension_points["jupyter_costguard"].app


def _install(serverapp: Any) -> None:
    """Wrap the service's tick (instance attribute; `_sample_loop` looks it up every time)."""
    if STATE.installed:
        return
    service = serverapp.web_app.settings["costguard_service"]
    original = service.tick

    def timed_tick(kernels: Any) -> Any:
        STATE.in_tick = True
        STATE.sampler_tid = threading.get_native_id()
        t0 = time.monotonic()
        c0 = time.thread_time()
        prof = STATE.profiler if STATE.profile_on else None
        try:
            if prof is not None:
                prof.enable()
                try:
                    return original(kernels)
                finally:
                    prof.disable()
            return original(kernels)
        finally:
            c1 = time.thread_time()
            t1 = time.monotonic()
            with STATE.lock:
                STATE.ticks.append((t0, t1, c1 - c0))
                if prof is not None:
                    STATE.profile_ticks += 1
                    STATE.profile_seconds += t1 - t0
            STATE.in_tick = False

    service.tick = timed_tick
    STATE.installed = True


def _timed_gather(app: Any) -> Any:
    async def gather() -> Any:
        t0 = time.monotonic()
        c0 = time.thread_time()
        result = await app._gather()
        STATE.gathers.append((t0, time.thread_time() - c0))
        return result

    return gather


class ControlHandler(APIHandler):
    @web.authenticated
    async def post(self) -> None:
        body = json.loads(self.request.body or b"{}")
        serverapp = self.settings["serverapp"]
        _install(serverapp)
        service = self.settings["costguard_service"]
        if "profile" in body:
            if body["profile"]:
                STATE.profiler = cProfile.Profile()
                STATE.profile_ticks = 0
                STATE.profile_seconds = 0.0
                STATE.profile_on = True
            else:
                STATE.profile_on = False
        if "track_cpu_percent" in body:
            cfg = self.settings["jupyter_resource_usage_display_config"]
            cfg.track_cpu_percent = bool(body["track_cpu_percent"])
        if "interval" in body:
            task = service._task
            if task is not None and not task.done():
                task.cancel()
                try:
                    await task
                except (asyncio.CancelledError, Exception):
                    pass
            service._task = None
            # a tick handed to the worker before the cancel still finishes there
            deadline = time.monotonic() + 30
            while STATE.in_tick and time.monotonic() < deadline:
                await asyncio.sleep(0.005)
            if body["interval"] is not None:
                service.sample_interval = float(body["interval"])
                service.start(_timed_gather(_costguard_app(serverapp)))
        cfg = self.settings.get("jupyter_resource_usage_display_config")
        self.finish(json.dumps({
            "pid": os.getpid(),
            "running": service.running,
            "interval": service.sample_interval,
            "track_cpu_percent": getattr(cfg, "track_cpu_percent", None),
            "ticks": len(STATE.ticks),
            "profile": STATE.profile_on,
        }))


class TicksHandler(APIHandler):
    @web.authenticated
    def get(self) -> None:
        since = int(self.get_query_argument("since", "0"))
        gsince = int(self.get_query_argument("gather_since", "0"))
        with STATE.lock:
            ticks = STATE.ticks[since:]
            count = len(STATE.ticks)
        gathers = STATE.gathers[gsince:]
        self.finish(json.dumps({
            "count": count, "ticks": ticks,
            "gather_count": gsince + len(gathers), "gathers": gathers,
            "sampler_tid": STATE.sampler_tid, "pid": os.getpid(),
            "in_tick": STATE.in_tick,
        }))


class ProfileHandler(APIHandler):
    @web.authenticated
    def get(self) -> None:
        limit = int(self.get_query_argument("limit", "25"))
        prof = STATE.profiler
        if prof is None or STATE.profile_ticks == 0:
            self.finish(json.dumps({"ticks": 0}))
            return
        stats = pstats.Stats(prof)
        rows = []
        for (filename, line, func), (_cc, nc, tt, ct, _callers) in stats.stats.items():
            rows.append({"function": f"{_short(filename)}:{line}({func})",
                         "ncalls": nc, "tottime": tt, "cumtime": ct})
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(limit)
        self.finish(json.dumps({
            "ticks": STATE.profile_ticks,
            "tick_seconds": STATE.profile_seconds,
            "by_tottime": sorted(rows, key=lambda r: -r["tottime"])[:limit],
            "by_cumtime": sorted(rows, key=lambda r: -r["cumtime"])[:limit * 2],
            "text": text.getvalue(),
        }))


def _short(filename: str) -> str:
    """jupyter_costguard/x.py, psutil/x.py, json/x.py: the package-relative path."""
    i = filename.find("jupyter_costguard/")
    if i >= 0:
        return filename[i:]
    i = filename.find("site-packages/")
    if i >= 0:
        return filename[i + len("site-packages/"):]
    m = re.search(r"lib/python3\.\d+/", filename)
    if m:
        return filename[m.end():]
    return filename


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "costguard_bench_ext"}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    base = serverapp.web_app.settings["base_url"]
    serverapp.web_app.add_handlers(".*$", [
        (url_path_join(base, "costguard-bench/control"), ControlHandler),
        (url_path_join(base, "costguard-bench/ticks"), TicksHandler),
        (url_path_join(base, "costguard-bench/profile"), ProfileHandler),
    ])
