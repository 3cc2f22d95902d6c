#!/usr/bin/env python3
"""What costguard's sampling costs a Jupyter server, next to jupyter-resource-usage.

One run, one `python -m jupyter_server` process with costguard, jupyter-resource-usage and
the bench's own steering extension (bench/costguard_bench_ext.py) loaded, real ipykernel
kernels added in steps (N = 1, 10, 30 by default). For every N it measures, on the server
PID only (user+system, threads included, kernels excluded):

  * server CPU with costguard paused (idle baseline) and sampling at 1 Hz, interleaved;
  * CPU per costguard sample from a window at a short interval (many samples), plus the
    worker thread's own CPU per tick and the IO-loop CPU per gather;
  * server CPU per request of /api/metrics/v1 (jupyter-resource-usage, track_cpu_percent
    off and on), /api/kernels and each costguard endpoint, sampling paused;
  * latency (median, p99) of those endpoints with sampling at 1 Hz, and p99 of costguard
    endpoints for the requests that overlapped a sample in progress;
  * at the largest N, a cProfile of the worker-thread tick (hot spots).

Run `python bench/sampling.py --help`; bench/README.md says how and shows a result.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime as dt
import json
import os
import platform
import queue
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import (
    BENCH,
    Client,
    Server,
    busy_cpu,
    ensure_venv,
    env_versions,
    md_table,
    median,
    ms,
    pct,
    progress_log,
    reexec_in,
    text_table,
    verdict,
)

DEFAULT_VENV = BENCH / ".venv"
COSTGUARD_ENDPOINTS = ["status", "gpus", "kernels", "notebooks"]
GiB = 1 << 30

# goals from the issue
GOAL_SAMPLE_VS_JRU = 0.2  # costguard sample CPU <= 1/5 of resource-usage request CPU (at max N)
GOAL_MEDIAN_VS_KERNELS = 2.0  # costguard endpoint median <= 2x /api/kernels median
GOAL_CPU_ABOVE_IDLE = 1.0  # percent of one core at 1 Hz
GOAL_P99_MS = 20.0


SERVER_DISTS = ["jupyter_server", "jupyter-resource-usage", "ipykernel", "psutil", "tornado",
                "pyzmq"]


# --------------------------------------------------------------------------- server

def write_trace(path: Path, gpus: int = 8, holders: int = 16) -> Path:
    """8×A100 (p4d.24xlarge); kernels 0..holders-1 hold memory on GPU k % gpus."""
    frames = []
    for t, util in ((0, 3), (30, 60)):
        frame_gpus = []
        for g in range(gpus):
            procs = [{"kernel": k, "used_memory_bytes": (2 + k % 3) * GiB}
                     for k in range(holders) if k % gpus == g]
            frame_gpus.append({"utilization_percent": util if g % 2 == 0 else 1,
                               "power_watts": 90 + util, "processes": procs})
        frames.append({"t": t, "gpus": frame_gpus})
    doc = {
        "format": "costguard-trace/1",
        "description": "bench trace",
        "instance_type": "p4d.24xlarge",
        "duration": 60,
        "gpus": [{"uuid": f"GPU-bench-{i}", "name": "NVIDIA A100-SXM4-40GB",
                  "memory_total_bytes": 40 * GiB} for i in range(gpus)],
        "frames": frames,
    }
    path.write_text(json.dumps(doc))
    return path


def server_config(workdir: Path) -> dict[str, Any]:
    """costguard, jupyter-resource-usage and the steering extension, on a replayed trace."""
    trace = write_trace(workdir / "trace.json")
    return {
        "ServerApp": {
            "jpserver_extensions": {"jupyter_costguard": True,
                                    "jupyter_resource_usage": True,
                                    "costguard_bench_ext": True},
        },
        "CostGuard": {
            "db_path": str(workdir / "ledger.sqlite"),
            "sample_interval": 1.0,
            "hourly_rate": 32.77,
            "replay_trace": str(trace),
            "replay_mode": "always",
            "enabled": True,
        },
        "ResourceUseDisplay": {"track_cpu_percent": False},
    }


# --------------------------------------------------------------------------- bench

class Bench:
    def __init__(self, args: argparse.Namespace, server: Server, log: Any) -> None:
        import psutil

        self.args = args
        self.server = server
        self.log = log
        self.client = Client(server)
        self.proc = psutil.Process(server.pid)
        self.tick_cursor = 0
        self.gather_cursor = 0
        self.kernels_started = 0

    # server CPU (the server PID only: its threads, not its children)
    def cpu(self) -> float:
        t = self.proc.cpu_times()
        return t.user + t.system

    def control(self, **body: Any) -> Any:
        return self.client.json("POST", "costguard-bench/control", body)

    def ticks(self) -> tuple[list[list[float]], list[list[float]]]:
        doc = self.client.json(
            "GET", f"costguard-bench/ticks?since={self.tick_cursor}"
                   f"&gather_since={self.gather_cursor}")
        self.tick_cursor = doc["count"]
        self.gather_cursor = doc["gather_count"]
        return doc["ticks"], doc["gathers"]

    def window(self, seconds: float) -> dict[str, Any]:
        """Server CPU over a quiet window (the bench sends nothing meanwhile)."""
        self.ticks()  # move the cursors to now
        s0, c0, t0 = busy_cpu(), self.cpu(), time.monotonic()
        time.sleep(seconds)
        s1, c1, t1 = busy_cpu(), self.cpu(), time.monotonic()
        ticks, gathers = self.ticks()
        inside = [t for t in ticks if t0 <= t[1] < t1]
        return {"cpu": c1 - c0, "wall": t1 - t0, "ticks": inside,
                "gathers": [g for g in gathers if t0 <= g[0] < t1],
                # everything else busy on the machine (kernels, other users), in cores
                "other_load": max(0.0, (s1 - s0) - (c1 - c0)) / (t1 - t0)}

    # ---- kernels
    def add_kernels(self, n_total: int) -> None:
        todo = list(range(self.kernels_started, n_total))
        if not todo:
            return
        self.log(f"starting {len(todo)} kernel(s) -> {n_total}")
        t0 = time.monotonic()

        def start(i: int) -> str:
            c = Client(self.server)
            try:
                doc = c.json("POST", "api/sessions", {
                    "path": f"nb-{i:03d}.ipynb", "type": "notebook", "name": "",
                    "kernel": {"name": "python3"}})
                return str(doc["kernel"]["id"])
            finally:
                c.close()

        def ready(kid: str) -> None:
            # what a frontend does first: a kernel_info handshake over the kernel's own
            # channels (the server then sees busy -> idle on iopub)
            from jupyter_client import BlockingKernelClient

            kc = BlockingKernelClient(
                connection_file=str(self.server.workdir / "runtime" / f"kernel-{kid}.json"))
            kc.load_connection_file()
            # no heartbeat channel: wait_for_ready calls a kernel whose heartbeat is late on
            # a loaded machine dead; wait for the reply to our own kernel_info instead
            kc.start_channels(hb=False)
            deadline = time.monotonic() + 180
            try:
                while True:
                    msg_id = kc.kernel_info()
                    try:
                        while True:
                            reply = kc.get_shell_msg(timeout=5)
                            if reply["parent_header"].get("msg_id") == msg_id:
                                return
                    except queue.Empty:
                        if time.monotonic() > deadline:
                            raise TimeoutError(
                                f"kernel {kid} never answered kernel_info") from None
            finally:
                kc.stop_channels()

        def start_and_wait(i: int) -> str:
            kid = start(i)
            ready(kid)
            return kid

        with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
            list(pool.map(start_and_wait, todo))
        self.kernels_started = n_total
        # The server learns "idle" from the kernel's iopub status messages; one sent before
        # its subscription took hold (ZMQ slow joiner) is lost, so shake hands again.
        deadline = time.monotonic() + 90
        while True:
            time.sleep(0.5)
            kernels = self.client.json("GET", "api/kernels")
            lagging = [k["id"] for k in kernels if k.get("execution_state") != "idle"]
            if len(kernels) >= n_total and not lagging:
                break
            if time.monotonic() > deadline:
                states = [k.get("execution_state") for k in kernels]
                raise RuntimeError(f"kernels not idle: {states}")
            for kid in lagging:
                ready(kid)
        for child in self.proc.children(recursive=True):
            self.server.kernel_pids.add(child.pid)
        # costguard sees them (sampling at 1 Hz meanwhile)
        self.control(interval=1.0)
        deadline = time.monotonic() + 30
        while self.client.json("GET", "costguard/api/status")["kernel_count"] < n_total:
            if time.monotonic() > deadline:
                raise RuntimeError("costguard does not list all kernels")
            time.sleep(0.2)
        self.log(f"{n_total} kernel(s) idle after {time.monotonic() - t0:.1f}s")

    # ---- phases
    def cpu_windows(self) -> dict[str, Any]:
        a = self.args
        idle, hz = [], []
        for _ in range(a.repeats):
            self.control(interval=None)
            time.sleep(a.settle)
            idle.append(self.window(a.window))
            self.control(interval=1.0)
            hz.append(self.window(a.window))
        # the least-disturbed window of each kind (other load only ever adds CPU time:
        # on 2 vCPUs that may be SMT siblings, a busy neighbour slows every instruction)
        idle_rates = [w["cpu"] / w["wall"] for w in idle]
        hz_rates = [w["cpu"] / w["wall"] for w in hz]
        idle_rate = min(idle_rates)
        best = hz[hz_rates.index(min(hz_rates))]
        hz_rate = min(hz_rates)
        hz_ticks = [t for w in hz for t in w["ticks"]]
        return {
            "idle_rate": idle_rate, "hz_rate": hz_rate,
            "idle_rates": idle_rates, "hz_rates": hz_rates,
            "other_load": [w["other_load"] for w in idle + hz],
            "hz_samples": len(hz_ticks),
            "hz_cpu_per_sample": (hz_rate - idle_rate) * best["wall"]
            / max(1, len(best["ticks"])),
            "hz_thread_cpu_per_tick": median([t[2] for t in hz_ticks]),
        }

    def fast_window(self, idle_rate: float) -> dict[str, Any]:
        a = self.args
        self.control(interval=a.fast_interval)
        time.sleep(min(1.0, a.fast_window / 3))  # let it settle into the interval
        w = self.window(a.fast_window)
        self.control(interval=1.0)
        ticks = w["ticks"]
        n = max(1, len(ticks))
        walls = [t[1] - t[0] for t in ticks]
        return {
            "samples": len(ticks), "wall": w["wall"], "cpu": w["cpu"],
            "other_load": w["other_load"],
            "cpu_per_sample": (w["cpu"] - idle_rate * w["wall"]) / n,
            "thread_cpu_per_tick_mean": sum(t[2] for t in ticks) / n,
            "thread_cpu_per_tick_median": median([t[2] for t in ticks]),
            "gather_cpu_mean": (sum(g[1] for g in w["gathers"]) / len(w["gathers"])
                                if w["gathers"] else float("nan")),
            "tick_wall_median": median(walls), "tick_wall_p99": pct(walls, 99),
        }

    def request_cpu(self, idle_rate: float, jru_only: bool = False) -> dict[str, Any]:
        """Server CPU per request, sampling paused; blocks of sequential requests."""
        a = self.args
        self.control(interval=None, track_cpu_percent=False)
        targets: list[tuple[str, str, bool]] = []
        if not jru_only:
            targets += [("api/kernels", "api/kernels", False)]
            targets += [(f"costguard/{e}", f"costguard/api/{e}", False)
                        for e in COSTGUARD_ENDPOINTS]
        targets += [("jru metrics/v1 (track_cpu off)", "api/metrics/v1", False),
                    ("jru metrics/v1 (track_cpu on)", "api/metrics/v1", True)]
        out: dict[str, Any] = {}
        for label, path, track in targets:
            self.control(track_cpu_percent=track)
            rate = idle_rate
            if track:
                # jru's own 1 s Prometheus callback does more with track_cpu_percent on:
                # subtract an idle baseline taken in that state
                time.sleep(a.settle)
                w = self.window(a.window / 2)
                rate = w["cpu"] / w["wall"]
                out["idle_rate_track_cpu_on"] = rate
            for _ in range(3):  # warm (connection, psutil caches)
                self.client.get(path)
            lat = []
            c0, t0 = self.cpu(), time.monotonic()
            while True:
                code, _, r0, r1 = self.client.get(path)
                if code != 200:
                    raise RuntimeError(f"{path}: HTTP {code}")
                lat.append(r1 - r0)
                el = time.monotonic() - t0
                if (len(lat) >= a.requests and el >= a.min_block) or el >= a.max_block:
                    break
            c1, t1 = self.cpu(), time.monotonic()
            out[label] = {"requests": len(lat), "wall": t1 - t0, "cpu": c1 - c0,
                          "cpu_per_request": (c1 - c0 - rate * (t1 - t0)) / len(lat),
                          "median": median(lat), "p99": pct(lat, 99)}
        self.control(track_cpu_percent=False, interval=1.0)
        return out

    def latency(self) -> dict[str, Any]:
        """Sequential requests, endpoints round-robin, costguard sampling at 1 Hz."""
        a = self.args
        self.control(interval=1.0, track_cpu_percent=False)
        paths = ["api/kernels", *[f"costguard/api/{e}" for e in COSTGUARD_ENDPOINTS],
                 "api/metrics/v1"]
        lat: dict[str, list[float]] = {p: [] for p in paths}
        durations: dict[float, float] = {}
        t_end = time.monotonic() + a.max_latency_seconds
        for _ in range(a.latency_requests):
            for p in paths:
                code, body, r0, r1 = self.client.get(p)
                if code != 200:
                    raise RuntimeError(f"{p}: HTTP {code}")
                lat[p].append(r1 - r0)
                if p == "costguard/api/status":
                    doc = json.loads(body)
                    if doc.get("sample_duration_seconds") is not None:
                        durations[doc["last_sample_time"]] = doc["sample_duration_seconds"]
            if time.monotonic() > t_end:
                break
        # resource-usage with track_cpu_percent on: its own round, fewer requests; the
        # floor and a costguard endpoint ride along to show what its stall does to them
        self.control(track_cpu_percent=True)
        on_paths = ["api/metrics/v1", "api/kernels", "costguard/api/status"]
        on: dict[str, list[float]] = {p: [] for p in on_paths}
        t_end = time.monotonic() + a.max_latency_seconds / 2
        for _ in range(a.latency_requests):
            for p in on_paths:
                code, _, r0, r1 = self.client.get(p)
                on[p].append(r1 - r0)
            if time.monotonic() > t_end:
                break
        self.control(track_cpu_percent=False)
        out = {p: {"n": len(v), "median": median(v), "p99": pct(v, 99), "max": max(v)}
               for p, v in lat.items()}
        for p, v in on.items():
            out[f"{p} (track_cpu on)"] = {"n": len(v), "median": median(v),
                                          "p99": pct(v, 99), "max": max(v)}
        every = [x for v in on.values() for x in v]
        out["all (track_cpu on)"] = {"n": len(every), "median": median(every),
                                     "p99": pct(every, 99), "max": max(every),
                                     "over_100ms": sum(x > 0.1 for x in every)}
        d = list(durations.values())
        out["sample_duration_seconds"] = {"n": len(d), "median": median(d), "max": max(d)
                                          if d else float("nan")}
        return out

    def during_sample(self) -> dict[str, Any]:
        """Costguard endpoints hammered while sampling at the fast interval; requests split
        by whether they overlapped a tick on the worker thread."""
        a = self.args
        self.control(interval=a.fast_interval)
        self.ticks()
        reqs: list[tuple[float, float]] = []
        paths = [f"costguard/api/{e}" for e in COSTGUARD_ENDPOINTS]
        t_end = time.monotonic() + a.during_seconds
        i = 0
        while time.monotonic() < t_end:
            code, _, r0, r1 = self.client.get(paths[i % len(paths)])
            if code != 200:
                raise RuntimeError(f"{paths[i % len(paths)]}: HTTP {code}")
            reqs.append((r0, r1))
            i += 1
        time.sleep(a.fast_interval * 2)
        ticks, _ = self.ticks()
        self.control(interval=1.0)
        spans = sorted((t[0], t[1]) for t in ticks)
        over, clear = [], []
        j = 0
        for r0, r1 in reqs:
            while j < len(spans) and spans[j][1] < r0:
                j += 1
            hit = j < len(spans) and spans[j][0] <= r1
            (over if hit else clear).append(r1 - r0)
        busy = sum(min(e, t_end) - max(s, t_end - a.during_seconds) for s, e in spans
                   if e > t_end - a.during_seconds and s < t_end)
        return {"requests": len(reqs), "overlapping": len(over), "ticks": len(spans),
                "worker_busy_fraction": busy / a.during_seconds,
                "overlap_median": median(over), "overlap_p99": pct(over, 99),
                "overlap_max": max(over) if over else float("nan"),
                "clear_median": median(clear), "clear_p99": pct(clear, 99)}

    def profile(self) -> dict[str, Any]:
        a = self.args
        self.control(interval=a.fast_interval, profile=True)
        time.sleep(a.profile_seconds)
        self.control(interval=1.0, profile=False)
        return self.client.json("GET", "costguard-bench/profile?limit=25")

    def run_n(self, n: int, profile: bool) -> dict[str, Any]:
        self.add_kernels(n)
        time.sleep(self.args.settle)
        self.log(f"N={n}: CPU windows ({self.args.repeats} x 2 x {self.args.window}s)")
        res: dict[str, Any] = {"n": n}
        res["cpu"] = self.cpu_windows()
        idle = res["cpu"]["idle_rate"]
        # costguard per sample and resource-usage per request, in interleaved rounds; each
        # figure is the least-disturbed round (interference only ever adds CPU time)
        fasts, reqs = [], []
        for rnd in range(self.args.repeats):
            self.log(f"N={n}: round {rnd + 1}: fast window ({self.args.fast_interval}s "
                     f"interval, {self.args.fast_window}s), then request CPU")
            fasts.append(self.fast_window(idle))
            reqs.append(self.request_cpu(idle, jru_only=rnd > 0))
        res["fast"] = min(fasts, key=lambda f: f["cpu_per_sample"])
        res["fast"]["rounds"] = [f["cpu_per_sample"] for f in fasts]
        res["fast"]["other_load_rounds"] = [f["other_load"] for f in fasts]
        requests: dict[str, Any] = {}
        for rq in reqs:
            for label, v in rq.items():
                if not isinstance(v, dict):
                    requests.setdefault(label, v)
                    continue
                best = requests.get(label)
                if best is None or v["cpu_per_request"] < best["cpu_per_request"]:
                    requests[label] = {**v, "rounds": (best or {}).get("rounds", [])}
                requests[label].setdefault("rounds", []).append(v["cpu_per_request"])
        res["requests"] = requests
        self.log(f"N={n}: latency at 1 Hz")
        res["latency"] = self.latency()
        self.log(f"N={n}: requests during samples ({self.args.during_seconds}s)")
        res["during"] = self.during_sample()
        if profile:
            self.log(f"N={n}: cProfile of ticks ({self.args.profile_seconds}s)")
            res["profile"] = self.profile()
        return res


# --------------------------------------------------------------------------- report

def build_tables(results: list[dict[str, Any]]) -> tuple[list[str], list[list[str]],
                                                       list[list[str]]]:
    ns = [r["n"] for r in results]
    header = ["figure", *[f"N={n}" for n in ns]]
    rows: list[list[str]] = []

    def row(label: str, fn: Any) -> None:
        cells = []
        for r in results:
            try:
                cells.append(fn(r))
            except (KeyError, ZeroDivisionError, TypeError):
                cells.append("n/a")
        rows.append([label, *cells])

    def cps(r: dict[str, Any]) -> float:
        return float(r["fast"]["cpu_per_sample"])

    def jru(r: dict[str, Any], on: bool) -> float:
        key = "jru metrics/v1 (track_cpu on)" if on else "jru metrics/v1 (track_cpu off)"
        return float(r["requests"][key]["cpu_per_request"])

    def rates(xs: list[float]) -> str:
        return ", ".join(f"{100 * x:.2f}" for x in xs)

    row("server CPU idle, costguard paused (% core) [windows]",
        lambda r: f"{100 * r['cpu']['idle_rate']:.2f} [{rates(r['cpu']['idle_rates'])}]")
    row("server CPU, costguard at 1 Hz (% core) [windows]",
        lambda r: f"{100 * r['cpu']['hz_rate']:.2f} [{rates(r['cpu']['hz_rates'])}]")
    row("  above idle (% core)",
        lambda r: f"{100 * (r['cpu']['hz_rate'] - r['cpu']['idle_rate']):.2f}")
    row("  expected from CPU/sample x 1 Hz (% core)",
        lambda r: f"{100 * cps(r):.2f}")
    row("server CPU idle, jru track_cpu_percent on (% core)",
        lambda r: f"{100 * r['requests']['idle_rate_track_cpu_on']:.2f}")
    row("other load on the machine during CPU windows (cores, max)",
        lambda r: f"{max(r['cpu']['other_load'] + r['fast']['other_load_rounds']):.2f}")
    row("costguard CPU/sample, server process, fast window (ms) [rounds]",
        lambda r: f"{ms(cps(r))} [{', '.join(ms(x) for x in r['fast']['rounds'])}]")
    row("costguard CPU/sample, server process, 1 Hz windows (ms)",
        lambda r: ms(r["cpu"]["hz_cpu_per_sample"]))
    row("  of which worker-thread CPU/tick (ms, mean)",
        lambda r: ms(r["fast"]["thread_cpu_per_tick_mean"]))
    row("  of which IO-loop gather CPU/tick (ms, mean)",
        lambda r: ms(r["fast"]["gather_cpu_mean"]))
    row("tick wall time median / p99 (ms)",
        lambda r: f"{ms(r['fast']['tick_wall_median'])} / {ms(r['fast']['tick_wall_p99'])}")
    row("status sample_duration_seconds median / max (ms)",
        lambda r: f"{ms(r['latency']['sample_duration_seconds']['median'])} / "
                  f"{ms(r['latency']['sample_duration_seconds']['max'])}")
    for label in ["jru metrics/v1 (track_cpu off)", "jru metrics/v1 (track_cpu on)"]:
        row(f"server CPU/request {label} (ms) [rounds]",
            lambda r, label=label: f"{ms(r['requests'][label]['cpu_per_request'])} "
                                   f"[{', '.join(ms(x) for x in r['requests'][label]['rounds'])}]")
    for label in ["api/kernels", *[f"costguard/{e}" for e in COSTGUARD_ENDPOINTS]]:
        row(f"server CPU/request {label} (ms)",
            lambda r, label=label: ms(r["requests"][label]["cpu_per_request"]))
    row("ratio costguard sample CPU / jru request CPU (track_cpu off)",
        lambda r: f"{cps(r) / jru(r, False):.2f}")
    row("ratio costguard sample CPU / jru request CPU (track_cpu on)",
        lambda r: f"{cps(r) / jru(r, True):.2f}")
    lat_paths = ["api/kernels", *[f"costguard/api/{e}" for e in COSTGUARD_ENDPOINTS],
                 "api/metrics/v1"]
    for p in lat_paths:
        row(f"latency {p} median / p99 (ms)",
            lambda r, p=p: f"{ms(r['latency'][p]['median'])} / {ms(r['latency'][p]['p99'])}")
    q = "api/metrics/v1 (track_cpu on)"
    row("latency api/metrics/v1 median / p99 / max (ms), jru track_cpu_percent on",
        lambda r: f"{ms(r['latency'][q]['median'])} / {ms(r['latency'][q]['p99'])} / "
                  f"{ms(r['latency'][q]['max'])}")
    row("jru track_cpu_percent on: any request (metrics/v1, api/kernels, costguard/status) "
        "p99 / max (ms), n > 100 ms of n",
        lambda r: f"{ms(r['latency']['all (track_cpu on)']['p99'])} / "
                  f"{ms(r['latency']['all (track_cpu on)']['max'])}, "
                  f"{r['latency']['all (track_cpu on)']['over_100ms']} of "
                  f"{r['latency']['all (track_cpu on)']['n']}")
    def median_ratio(r: dict[str, Any], e: str) -> str:
        lat = r["latency"]
        return f"{lat[f'costguard/api/{e}']['median'] / lat['api/kernels']['median']:.2f}"

    for e in COSTGUARD_ENDPOINTS:
        row(f"ratio median costguard/api/{e} / api/kernels",
            lambda r, e=e: median_ratio(r, e))
    row("costguard requests overlapping a sample: n / median / p99 / max (ms)",
        lambda r: f"{r['during']['overlapping']} / {ms(r['during']['overlap_median'])} / "
                  f"{ms(r['during']['overlap_p99'])} / {ms(r['during']['overlap_max'])}")
    row("costguard requests not overlapping: median / p99 (ms)",
        lambda r: f"{ms(r['during']['clear_median'])} / {ms(r['during']['clear_p99'])}")

    # goals
    goals: list[list[str]] = []
    big = results[-1]
    for on in (False, True):
        ratio = cps(big) / jru(big, on)
        goals.append([
            f"N={big['n']}: costguard sample CPU <= 1/5 of jru request CPU "
            f"(track_cpu {'on' if on else 'off'})",
            f"{ms(cps(big))} ms vs {ms(jru(big, on))} ms = {ratio:.2f}",
            verdict(ratio <= GOAL_SAMPLE_VS_JRU)])
    for r in results:
        k = r["latency"]["api/kernels"]["median"]
        worst = max(COSTGUARD_ENDPOINTS,
                    key=lambda e: r["latency"][f"costguard/api/{e}"]["median"])
        m = r["latency"][f"costguard/api/{worst}"]["median"]
        goals.append([f"N={r['n']}: every costguard endpoint median <= 2x /api/kernels",
                      f"worst {worst} {ms(m)} ms vs {ms(k)} ms = {m / k:.2f}x",
                      verdict(all(r["latency"][f"costguard/api/{e}"]["median"]
                                  <= GOAL_MEDIAN_VS_KERNELS * k
                                  for e in COSTGUARD_ENDPOINTS))])
    for r in results:
        d = 100 * (r["cpu"]["hz_rate"] - r["cpu"]["idle_rate"])
        goals.append([f"N={r['n']}: server CPU at 1 Hz above idle < 1% of a core",
                      f"{d:.2f}%", verdict(d < GOAL_CPU_ABOVE_IDLE)])
    for r in results:
        p99s = {e: r["latency"][f"costguard/api/{e}"]["p99"] for e in COSTGUARD_ENDPOINTS}
        worst = max(p99s, key=lambda e: p99s[e])
        ov = r["during"]["overlap_p99"]
        goals.append([f"N={r['n']}: costguard p99 < 20 ms (1 Hz; overlapping a sample)",
                      f"worst {worst} {ms(p99s[worst])} ms; overlapping {ms(ov)} ms "
                      f"(n={r['during']['overlapping']})",
                      verdict(p99s[worst] * 1000 < GOAL_P99_MS
                              and (ov != ov or ov * 1000 < GOAL_P99_MS))])
    busy = max(x for r in results for x in r["cpu"]["other_load"] + r["fast"]["other_load_rounds"])
    if busy > 0.3:
        goals.append(["caution: other load on the machine during CPU windows",
                      f"up to {busy:.2f} cores", "CPU figures may be inflated; rerun when quiet"])
    return header, rows, goals


def profile_report(prof: dict[str, Any], top: int = 15) -> tuple[str, str]:
    """Hot spots: own time and cumulative time as shares of the profiled tick time."""
    if not prof or not prof.get("ticks"):
        return "", ""
    total = sum(r["tottime"] for r in prof["by_tottime"])  # lower bound; use tick entry
    for r in prof["by_cumtime"]:
        if r["function"].endswith("(tick)") and "service.py" in r["function"]:
            total = r["cumtime"]
            break
    per_tick = total / prof["ticks"]
    head = (f"cProfile over {prof['ticks']} ticks, {per_tick * 1000:.2f} ms/tick under the "
            f"profiler (profiler overhead inflates absolute times; shares are what matter)")
    own = [[r["function"], str(r["ncalls"]), f"{r['tottime'] / prof['ticks'] * 1000:.3f}",
            f"{100 * r['tottime'] / total:.1f}%"] for r in prof["by_tottime"][:top]]
    cum = [[r["function"], str(r["ncalls"]), f"{r['cumtime'] / prof['ticks'] * 1000:.3f}",
            f"{100 * r['cumtime'] / total:.1f}%"]
           for r in prof["by_cumtime"]
           if "jupyter_costguard/" in r["function"] or "json" in r["function"]
           or "sqlite" in r["function"] or "psutil" in r["function"]][:top]
    h = ["function", "calls", "ms/tick", "share"]
    txt = (head + "\n\nown time (tottime):\n" + text_table(h, own)
           + "\n\ncumulative (cumtime), costguard/json/sqlite/psutil frames:\n"
           + text_table(h, cum))
    md = (head + "\n\nOwn time:\n\n" + md_table(h, own)
          + "\n\nCumulative (costguard, json, sqlite, psutil frames):\n\n" + md_table(h, cum))
    return txt, md


# --------------------------------------------------------------------------- main

def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", default="1,10,30", help="kernel counts, ascending (default 1,10,30)")
    p.add_argument("--window", type=float, default=10.0,
                   help="seconds per idle / 1 Hz CPU window (default 10)")
    p.add_argument("--repeats", type=int, default=3,
                   help="idle/1 Hz window pairs, interleaved, and rounds of fast window + "
                        "resource-usage requests; the least-disturbed counts (default 3)")
    p.add_argument("--fast-interval", type=float, default=0.1,
                   help="sample interval of the per-sample CPU and during-sample windows")
    p.add_argument("--fast-window", type=float, default=8.0, help="seconds (default 8)")
    p.add_argument("--requests", type=int, default=200,
                   help="min requests per endpoint for request CPU (default 200)")
    p.add_argument("--min-block", type=float, default=2.0,
                   help="min seconds per request-CPU block (CPU clock ticks are 10 ms)")
    p.add_argument("--max-block", type=float, default=10.0,
                   help="max seconds per request-CPU block")
    p.add_argument("--latency-requests", type=int, default=300,
                   help="rounds of sequential requests per endpoint at 1 Hz (default 300)")
    p.add_argument("--max-latency-seconds", type=float, default=20.0)
    p.add_argument("--during-seconds", type=float, default=10.0)
    p.add_argument("--profile-seconds", type=float, default=8.0,
                   help="cProfile ticks for this long at the largest N (0: skip)")
    p.add_argument("--settle", type=float, default=1.0)
    p.add_argument("--python", help="interpreter of an env with jupyter_server, ipykernel and "
                   "jupyter-resource-usage (default: create/reuse bench/.venv)")
    p.add_argument("--venv", type=Path, default=DEFAULT_VENV)
    p.add_argument("--jru-spec", default="jupyter-resource-usage",
                   help="pip spec for jupyter-resource-usage in bench/.venv "
                        "(e.g. 'jupyter-resource-usage==1.1.1' for the interval=0.05 era)")
    p.add_argument("--json", type=Path, help="also write all figures here")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (server log)")
    p.add_argument("--quick", action="store_true", help="smoke run: N=1,3, short windows")
    args = p.parse_args(argv)
    if args.quick:
        args.n = "1,3"
        args.window, args.repeats, args.fast_window = 3.0, 1, 3.0
        args.requests, args.min_block, args.latency_requests = 30, 0.5, 30
        args.during_seconds, args.profile_seconds, args.settle = 3.0, 2.0, 0.5
    args.ns = sorted(int(x) for x in str(args.n).split(",") if x.strip())
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    log = progress_log()

    python = args.python or str(ensure_venv(args.venv, ["pyyaml>=6", args.jru_spec], log))
    reexec_in(python, str(Path(__file__).resolve()), argv)
    versions = env_versions(python, SERVER_DISTS)
    log(f"server env {python}: {versions}")
    load0 = os.getloadavg()
    workdir = Path(tempfile.mkdtemp(prefix="costguard-bench-"))
    server = Server(python, workdir, log)
    results: list[dict[str, Any]] = []

    def on_signal(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    try:
        server.start(server_config(workdir))
        log(f"server pid {server.pid} on port {server.port}; workdir {workdir}")
        bench = Bench(args, server, log)
        bench.control(interval=1.0)
        for n in args.ns:
            results.append(bench.run_n(n, profile=args.profile_seconds > 0 and n == args.ns[-1]))
        bench.client.close()
    except BaseException:
        log("failed; server log tail:\n" + server.tail())
        raise
    finally:
        server.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    load1 = os.getloadavg()
    elapsed = time.monotonic() - started

    header, rows, goals = build_tables(results)
    prof_txt, prof_md = profile_report(results[-1].get("profile", {}))
    cmd = "python bench/sampling.py " + " ".join(argv if argv is not None else sys.argv[1:])
    when = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    meta = (f"{when}; {os.cpu_count()} CPUs, {platform.platform()}; load avg before/after "
            f"{load0[0]:.2f}/{load1[0]:.2f}; server env: "
            + ", ".join(f"{k} {v}" for k, v in versions.items())
            + f"; bench took {elapsed:.0f}s")
    print("\n== costguard sampling bench ==")
    print(meta)
    print(f"command: {cmd.strip()}\n")
    print(text_table(header, rows))
    print("\ngoals:")
    print(text_table(["goal", "measured", "verdict"], goals))
    if prof_txt:
        print("\nhot spots (largest N):\n" + prof_txt)
    print("\n== markdown ==\n")
    print(f"Measured {meta}.\n\nCommand: `{cmd.strip()}`\n")
    print(md_table(header, rows))
    print()
    print(md_table(["goal", "measured", "verdict"], goals))
    if prof_md:
        print("\nHot spots at the largest N. " + prof_md)
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "command": cmd.strip(),
                                         "versions": versions, "results": results},
                                        indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
