#!/usr/bin/env python3
"""How fast a one-cell `print(1)` batch job starts and ends: costguard next to jupyter-scheduler.

One run, one `python -m jupyter_server` process with costguard (default offload settings)
and jupyter-scheduler loaded, a root dir with `bench.ipynb` (one code cell, `print(1)`).
After one unmeasured warm-up job per tool, R repetitions, interleaved (the order rotates
each repetition), each started when the machine is quiet:

  * costguard: `POST costguard/api/jobs` (the cell selected), then `GET jobs/N` every
    10 ms until a terminal state; must end `succeeded`;
  * jupyter-scheduler: `POST scheduler/jobs` (the notebook, ipynb output), then
    `GET scheduler/jobs/{id}` every 10 ms until a terminal status; must end `COMPLETED`.

For each job: the submit call's latency, submit -> first seen started (costguard state
`running`, jupyter-scheduler `IN_PROGRESS`), submit -> costguard phase `running` (the cells
are executing), submit -> first seen done, the latency of the status GETs, and what the
servers recorded themselves. With `c.CostGuard.offload_warm_kernels` present, costguard is
measured a second time on a second server with it at 0 (a kernel started per job).

Run `python bench/offload.py --help`; bench/README.md says how and shows a result.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from common import (
    BENCH,
    REPO,
    Client,
    Log,
    Server,
    busy_cpu,
    ensure_venv,
    env_versions,
    md_table,
    median,
    pct,
    progress_log,
    reexec_in,
    text_table,
    verdict,
)

DEFAULT_VENV = BENCH / ".venv-offload"
SERVER_DISTS = ["jupyter_server", "jupyter_scheduler", "ipykernel", "jupyter_client",
                "nbclient", "nbconvert", "nbformat", "tornado", "SQLAlchemy", "pydantic",
                "psutil"]
NOTEBOOK = "bench.ipynb"
CELL_ID = "print-one"

# goals from the issue (ratios of medians, costguard / jupyter-scheduler)
GOAL_RUNNING = 0.5  # submit -> running <= 1/2 of create -> IN_PROGRESS
GOAL_DONE = 0.6  # submit -> done <= 0.6x create -> COMPLETED

COSTGUARD_STARTED = {"running", "succeeded", "failed", "cancelled", "lost"}
COSTGUARD_TERMINAL = {"succeeded", "failed", "cancelled", "lost"}
COSTGUARD_EXECUTING = {"running", "finishing", "done"}
# jupyter-scheduler's job row reads STOPPED (its column default) from creation until the
# job's process marks it IN_PROGRESS, so STOPPED says neither started nor ended; the bench
# never stops a job, so it follows each to COMPLETED or FAILED
SCHEDULER_STARTED = {"IN_PROGRESS", "COMPLETED", "FAILED", "STOPPING"}
SCHEDULER_TERMINAL = {"COMPLETED", "FAILED"}


@dataclasses.dataclass(frozen=True)
class Variant:
    """One row of the bench: a tool on a server. Servers differ only in `costguard`
    (extra c.CostGuard settings); variants with the same settings share a server."""

    key: str
    label: str
    tool: str  # "costguard" | "scheduler"
    costguard: tuple[tuple[str, Any], ...] = ()
    #: a c.CostGuard trait the variant needs (skipped, and said so, when it is missing)
    needs_trait: str | None = None


VARIANTS = [
    Variant("costguard", "costguard (defaults)", "costguard"),
    Variant("scheduler", "jupyter-scheduler", "scheduler"),
    Variant("costguard-cold", "costguard, offload_warm_kernels=0", "costguard",
            (("offload_warm_kernels", 0),), needs_trait="offload_warm_kernels"),
]


# --------------------------------------------------------------------------- setup

def write_notebook(root: Path) -> None:
    """nbformat 4.5, one code cell with an id, kernelspec python3."""
    nb = {
        "nbformat": 4, "nbformat_minor": 5,
        "metadata": {
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
            "language_info": {"name": "python"},
        },
        "cells": [{"cell_type": "code", "id": CELL_ID, "metadata": {}, "execution_count": None,
                   "outputs": [], "source": "print(1)"}],
    }
    (root / NOTEBOOK).write_text(json.dumps(nb, indent=1))


def server_config(workdir: Path, costguard: dict[str, Any]) -> dict[str, Any]:
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_costguard": True,
                                              "jupyter_scheduler": True}},
        "CostGuard": {"db_path": str(workdir / "ledger.sqlite"), **costguard},
        "SchedulerApp": {"db_url": f"sqlite:///{workdir / 'scheduler.sqlite'}"},
    }


def costguard_traits(python: str) -> set[str]:
    """The c.CostGuard traits of the working tree, as the server env imports it."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    res = subprocess.run(
        [python, "-c", "import json\nfrom jupyter_costguard.app import CostGuard\n"
                       "print(json.dumps(sorted(CostGuard.class_trait_names(config=True))))"],
        capture_output=True, text=True, check=True, env=env, cwd=str(REPO))
    return set(json.loads(res.stdout.strip().splitlines()[-1]))


def costguard_revision() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "jupyter_costguard"],
                               cwd=REPO, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" + uncommitted changes in jupyter_costguard/" if dirty.strip() else "")


def wait_quiet(max_wait: float, cores: float, window: float = 0.25) -> tuple[float, float]:
    """Wait until the whole machine is below `cores` busy for two windows in a row (a job's
    processes exiting, a kernel being started ahead, other users), at most `max_wait`.
    Returns (seconds waited, busy cores in the last window)."""
    t0 = time.monotonic()
    quiet = 0
    busy = float("nan")
    while True:
        b0, w0 = busy_cpu(), time.monotonic()
        time.sleep(window)
        busy = (busy_cpu() - b0) / (time.monotonic() - w0)
        quiet = quiet + 1 if busy < cores else 0
        if quiet >= 2 or time.monotonic() - t0 >= max_wait:
            return time.monotonic() - t0, busy


def tree_cpu(pid: int) -> float:
    """CPU seconds of a process and all its descendants, reaped children included (a job's
    runner, kernel and jupyter-scheduler's process all descend from the server)."""
    import psutil

    total = 0.0
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return total
    for p in procs:
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


# --------------------------------------------------------------------------- one job

def follow(client: Client, path: str, t0: float, labels: Callable[[Any], list[str]],
           terminal: Callable[[Any], bool], interval: float,
           timeout: float) -> tuple[dict[str, float], Any, list[float], list[str]]:
    """GET `path` every `interval` (request starts) until `terminal(doc)`. Returns the
    time each label was first seen (response read, seconds after `t0`), the last document,
    the GET latencies and the labels in the order seen."""
    seen: dict[str, float] = {}
    order: list[str] = []
    lat: list[float] = []
    nxt = time.monotonic()
    while True:
        nxt += interval
        delay = nxt - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        else:
            nxt = time.monotonic()
        code, body, g0, g1 = client.get(path)
        if code != 200:
            raise RuntimeError(f"GET {path}: HTTP {code}: {body[:300]!r}")
        lat.append(g1 - g0)
        doc = json.loads(body)
        for lab in labels(doc):
            if lab not in seen:
                seen[lab] = g1 - t0
                order.append(lab)
        if terminal(doc):
            return seen, doc, lat, order
        if g1 - t0 > timeout:
            raise RuntimeError(f"{path}: not done after {timeout:g}s: {order}")


def first(seen: dict[str, float], prefix: str, values: set[str]) -> float | None:
    """First time any of `values` under `prefix` was seen: the job was at or past it."""
    times = [t for lab, t in seen.items()
             if lab.split(":", 1)[0] == prefix and lab.split(":", 1)[1] in values]
    return min(times) if times else None


def run_costguard(client: Client, args: argparse.Namespace) -> dict[str, Any]:
    wall0 = time.time()
    code, body, t0, t1 = client.request("POST", "costguard/api/jobs",
                                        {"notebook": NOTEBOOK, "selected": [CELL_ID]})
    if code != 201:
        raise RuntimeError(f"costguard submit: HTTP {code}: {body[:500]!r}")
    doc = json.loads(body)
    job_id = doc["id"]
    seen, last, lat, order = follow(
        client, f"costguard/api/jobs/{job_id}", t0,
        lambda d: [f"state:{d['state']}", f"phase:{d['phase']}"],
        lambda d: d["state"] in COSTGUARD_TERMINAL, args.poll, args.timeout)
    if last["state"] != "succeeded":
        raise RuntimeError(f"costguard job {job_id} ended {last['state']}: "
                           f"{last.get('exit_reason')}\n{last.get('log_tail')}")
    phases = {p["phase"]: p for p in last.get("timeline", [])}

    def recorded(phase: str) -> float | None:
        p = phases.get(phase)
        return None if p is None else float(p["start"]) - wall0

    return {
        "job": job_id, "submit_call": t1 - t0, "submit_state": doc["state"],
        "to_started": first(seen, "state", COSTGUARD_STARTED),
        "saw_started_state": "state:running" in seen,
        "to_executing": first(seen, "phase", COSTGUARD_EXECUTING),
        "saw_executing_phase": "phase:running" in seen,
        "to_done": seen[f"state:{last['state']}"],
        "poll_latency": lat, "polls": len(lat), "order": order,
        # what the runner recorded (its own clock, seconds after the client sent the POST)
        "recorded_started": recorded("starting"), "recorded_executing": recorded("running"),
        "recorded_done": None if last.get("ended") is None else last["ended"] - wall0,
        "starting_phase_seconds": (phases["starting"]["seconds"]
                                   if "starting" in phases else None),
    }


def run_scheduler(client: Client, args: argparse.Namespace, rep: int) -> dict[str, Any]:
    wall0 = time.time()
    body = {"input_uri": NOTEBOOK, "input_filename": NOTEBOOK,
            "runtime_environment_name": "python3", "output_formats": ["ipynb"],
            "name": f"bench-{rep}"}
    code, raw, t0, t1 = client.request("POST", "scheduler/jobs", body)
    if code != 200:
        raise RuntimeError(f"jupyter-scheduler create: HTTP {code}: {raw[:500]!r}")
    job_id = json.loads(raw)["job_id"]
    seen, last, lat, order = follow(
        client, f"scheduler/jobs/{job_id}", t0, lambda d: [f"status:{d['status']}"],
        lambda d: d["status"] in SCHEDULER_TERMINAL, args.poll, args.timeout)
    if last["status"] != "COMPLETED":
        raise RuntimeError(f"jupyter-scheduler job {job_id} ended {last['status']}: "
                           f"{last.get('status_message')}")

    def recorded(key: str) -> float | None:
        v = last.get(key)
        return None if v is None else v / 1000.0 - wall0

    return {
        "job": job_id, "submit_call": t1 - t0,
        "to_started": first(seen, "status", SCHEDULER_STARTED),
        "saw_started_state": "status:IN_PROGRESS" in seen,
        "to_done": seen["status:COMPLETED"],
        "poll_latency": lat, "polls": len(lat), "order": order,
        # jupyter-scheduler records milliseconds
        "recorded_started": recorded("start_time"), "recorded_done": recorded("end_time"),
        "recorded_created": recorded("create_time"),
    }


# --------------------------------------------------------------------------- the run

class Run:
    def __init__(self, args: argparse.Namespace, python: str, log: Log) -> None:
        self.args = args
        self.python = python
        self.log = log
        self.servers: dict[tuple[tuple[str, Any], ...], Server] = {}
        self.clients: dict[tuple[tuple[str, Any], ...], Client] = {}
        self.workdirs: list[Path] = []

    def server_for(self, v: Variant) -> tuple[Server, Client]:
        key = v.costguard
        if key not in self.servers:
            workdir = Path(tempfile.mkdtemp(prefix="costguard-offload-bench-"))
            self.workdirs.append(workdir)
            server = Server(self.python, workdir, self.log)
            self.servers[key] = server
            server.root.mkdir(parents=True, exist_ok=True)
            write_notebook(server.root)
            server.start(server_config(workdir, dict(key)))
            self.clients[key] = Client(server)
            self.log(f"server pid {server.pid} on port {server.port} (c.CostGuard "
                     f"{dict(key) or 'defaults'}); workdir {workdir}")
        return self.servers[key], self.clients[key]

    def one(self, v: Variant, rep: int) -> dict[str, Any]:
        server, client = self.server_for(v)
        own = time.process_time
        b0, c0, o0, w0 = busy_cpu(), tree_cpu(server.pid), own(), time.monotonic()
        if v.tool == "costguard":
            r = run_costguard(client, self.args)
        else:
            r = run_scheduler(client, self.args, rep)
        b1, c1, o1, w1 = busy_cpu(), tree_cpu(server.pid), own(), time.monotonic()
        r["server_tree_cpu"] = c1 - c0
        r["bench_cpu"] = o1 - o0  # the bench's own polling
        # what else kept the machine busy meanwhile (other users, the other server), in cores
        r["other_load"] = max(0.0, (b1 - b0) - (c1 - c0) - (o1 - o0)) / (w1 - w0)
        return r

    def measure(self, variants: list[Variant]) -> dict[str, list[dict[str, Any]]]:
        a = self.args
        for v in variants:
            self.server_for(v)
        out: dict[str, list[dict[str, Any]]] = {v.key: [] for v in variants}
        for v in variants:
            waited, busy = wait_quiet(a.settle_max, a.quiet_cores)
            r = self.one(v, -1)
            self.log(f"warm-up {v.label}: done after {r['to_done']:.2f}s, seen "
                     f"{' -> '.join(r['order'])} (waited {waited:.1f}s for quiet, "
                     f"{busy:.2f} cores busy)")
        for rep in range(a.reps):
            k = rep % len(variants)
            for v in variants[k:] + variants[:k]:
                waited, busy = wait_quiet(a.settle_max, a.quiet_cores)
                r = self.one(v, rep)
                r.update(rep=rep, quiet_wait=waited, busy_before=busy)
                out[v.key].append(r)
                started = r["to_started"]
                self.log(f"rep {rep + 1}/{a.reps} {v.label}: submit {r['submit_call'] * 1000:.1f}"
                         f" ms, started {started if started is None else round(started, 3)} s, "
                         f"done {r['to_done']:.3f} s ({busy:.2f} cores busy before)")
        return out

    def close(self) -> None:
        for c in self.clients.values():
            c.close()
        for s in self.servers.values():
            s.stop()
        if not self.args.keep:
            for d in self.workdirs:
                shutil.rmtree(d, ignore_errors=True)


# --------------------------------------------------------------------------- report

FIGURES: list[tuple[str, str, float, str]] = [
    # (key, label, scale, unit)
    ("submit_call", "submit call", 1000.0, "ms"),
    ("to_started", "submit -> started (costguard state running / IN_PROGRESS)", 1.0, "s"),
    ("to_executing", "submit -> cells executing (costguard phase running)", 1.0, "s"),
    ("to_done", "submit -> done (succeeded / COMPLETED)", 1.0, "s"),
    ("recorded_started", "  recorded by the tool: submit -> started", 1.0, "s"),
    ("recorded_executing", "  recorded by the tool: submit -> phase running", 1.0, "s"),
    ("recorded_done", "  recorded by the tool: submit -> done", 1.0, "s"),
    ("starting_phase_seconds", "  costguard phase starting (runner + kernel)", 1.0, "s"),
    ("poll_latency", "status GET latency", 1000.0, "ms"),
    ("server_tree_cpu", "CPU of the server and its processes per job", 1.0, "s"),
    ("bench_cpu", "CPU of the bench's own polling per job", 1.0, "s"),
    ("other_load", "other load on the machine during the job", 1.0, "cores"),
]


def values(rows: list[dict[str, Any]], key: str) -> list[float]:
    out: list[float] = []
    for r in rows:
        v = r.get(key)
        if isinstance(v, list):
            out += [float(x) for x in v]
        elif v is not None:
            out.append(float(v))
    return out


def stats(xs: list[float]) -> dict[str, float]:
    if not xs:
        nan = float("nan")
        return {"n": 0, "median": nan, "p90": nan, "min": nan, "max": nan}
    return {"n": len(xs), "median": median(xs), "p90": pct(xs, 90), "min": min(xs),
            "max": max(xs)}


def fmt(x: float, unit: str) -> str:
    if x != x:
        return "n/a"
    return f"{x:.2f}" if unit == "ms" else f"{x:.3f}"


def build_tables(variants: list[Variant], results: dict[str, list[dict[str, Any]]]
                 ) -> tuple[list[list[str]], list[list[str]], list[list[str]], list[str]]:
    figures: list[list[str]] = []
    for key, label, scale, unit in FIGURES:
        for v in variants:
            s = stats([x * scale for x in values(results[v.key], key)])
            if not s["n"]:
                continue
            figures.append([f"{label} ({unit})", v.label, str(s["n"]),
                            *(fmt(s[q], unit) for q in ("median", "p90", "min", "max"))])

    sched = results["scheduler"]
    cg_variants = [v for v in variants if v.tool == "costguard"]

    def med(rows: list[dict[str, Any]], key: str) -> float:
        return median(values(rows, key))

    pairs = [("submit call", "submit_call", "submit_call"),
             ("submit -> running / create -> IN_PROGRESS", "to_started", "to_started"),
             ("submit -> phase running (cells executing) / create -> IN_PROGRESS",
              "to_executing", "to_started"),
             ("submit -> done / create -> COMPLETED", "to_done", "to_done")]
    ratios = [[label, *(f"{med(results[v.key], a) / med(sched, b):.2f}" for v in cg_variants)]
              for label, a, b in pairs]

    goals: list[list[str]] = []
    for v in cg_variants:
        rows = results[v.key]
        note = "" if v.key == "costguard" else " [reference, not the shipped default]"
        for label, key, goal in (("submit -> running <= 0.5x create -> IN_PROGRESS",
                                  "to_started", GOAL_RUNNING),
                                 ("submit -> done <= 0.6x create -> COMPLETED",
                                  "to_done", GOAL_DONE)):
            ours, theirs = med(rows, key), med(sched, key)
            goals.append([f"{v.label}: {label}{note}",
                          f"{ours:.3f} s vs {theirs:.3f} s = {ours / theirs:.2f}x",
                          verdict(ours / theirs <= goal)])

    notes: list[str] = []
    for v in variants:
        rows = results[v.key]
        missed = sum(1 for r in rows if not r["saw_started_state"])
        if missed:
            what = "state running" if v.tool == "costguard" else "IN_PROGRESS"
            notes.append(f"{v.label}: {missed} of {len(rows)} jobs were never seen in {what} "
                         "(it went from queued to done between two status reads); for those "
                         "'started' is when the client first saw the job at or past it, "
                         "i.e. its done time")
        missed = sum(1 for r in rows if v.tool == "costguard" and not r["saw_executing_phase"])
        if missed:
            notes.append(f"{v.label}: {missed} of {len(rows)} jobs were never seen in phase "
                         "running; 'cells executing' is when it was first seen at or past it")
    busy = [r["busy_before"] for rows in results.values() for r in rows]
    if busy and max(busy) >= 0.3:
        notes.append(f"the machine was not quiet before some jobs (up to {max(busy):.2f} cores "
                     "busy after the wait limit); those jobs may be slower")
    other = [r["other_load"] for rows in results.values() for r in rows]
    loaded = sum(1 for x in other if x >= 0.3)
    if loaded:
        notes.append(f"{loaded} of {len(other)} jobs ran while something else kept the "
                     f"machine busy (up to {max(other):.2f} cores); medians, not means, "
                     "are compared for that reason")
    return figures, ratios, goals, notes


# --------------------------------------------------------------------------- main

def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=10, help="measured jobs per variant (default 10)")
    p.add_argument("--poll", type=float, default=0.01,
                   help="seconds between status GETs (request starts; default 0.01)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per job")
    p.add_argument("--settle-max", type=float, default=15.0,
                   help="at most this long to wait for a quiet machine before each job")
    p.add_argument("--quiet-cores", type=float, default=0.3,
                   help="quiet: the whole machine below this many busy cores (default 0.3)")
    p.add_argument("--python", help="interpreter of an env with jupyter_server, ipykernel, "
                   "nbclient and jupyter-scheduler (default: create/reuse bench/.venv-offload)")
    p.add_argument("--venv", type=Path, default=DEFAULT_VENV)
    p.add_argument("--scheduler-spec", default="jupyter-scheduler",
                   help="pip spec for jupyter-scheduler in the bench env")
    p.add_argument("--json", type=Path, help="also write every raw figure here")
    p.add_argument("--keep", action="store_true", help="keep the temp dirs (server logs)")
    p.add_argument("--quick", action="store_true", help="smoke run: 2 repetitions")
    args = p.parse_args(argv)
    if args.quick:
        args.reps = 2
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    log = progress_log()

    python = args.python or str(ensure_venv(args.venv, [args.scheduler_spec], log))
    reexec_in(python, str(Path(__file__).resolve()), argv)
    versions = env_versions(python, SERVER_DISTS)
    versions["jupyter_costguard"] = costguard_revision()
    log(f"server env {python}: {versions}")
    traits = costguard_traits(python)
    variants = [v for v in VARIANTS if v.needs_trait is None or v.needs_trait in traits]
    skipped = [v for v in VARIANTS if v not in variants]
    for v in skipped:
        log(f"skipping {v.label}: this costguard has no c.CostGuard.{v.needs_trait}")

    def on_signal(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    load0 = os.getloadavg()
    run = Run(args, python, log)
    try:
        results = run.measure(variants)
    except BaseException:
        for s in run.servers.values():
            log(f"failed; server {s.pid} log tail:\n{s.tail()}")
        raise
    finally:
        run.close()
    load1 = os.getloadavg()
    elapsed = time.monotonic() - started

    figures, ratios, goals, notes = build_tables(variants, results)
    notes += [f"not measured: {v.label} (no c.CostGuard.{v.needs_trait} in this costguard)"
              for v in skipped]
    cmd = "python bench/offload.py " + " ".join(argv if argv is not None else sys.argv[1:])
    when = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    meta = (f"{when}; {os.cpu_count()} CPUs, {platform.platform()}; load avg before/after "
            f"{load0[0]:.2f}/{load1[0]:.2f}; {args.reps} repetitions, status polled every "
            f"{args.poll * 1000:g} ms; server env: "
            + ", ".join(f"{k} {v}" for k, v in versions.items())
            + f"; bench took {elapsed:.0f}s")
    fig_head = ["figure", "tool", "n", "median", "p90", "min", "max"]
    ratio_head = ["ratio of medians vs jupyter-scheduler",
                  *[v.label for v in variants if v.tool == "costguard"]]
    goal_head = ["goal", "measured (medians)", "verdict"]
    print("\n== offload bench: one-cell print(1) job ==")
    print(meta)
    print(f"command: {cmd.strip()}\n")
    print(text_table(fig_head, figures))
    print()
    print(text_table(ratio_head, ratios))
    print("\ngoals:")
    print(text_table(goal_head, goals))
    for n in notes:
        print(f"note: {n}")
    print("\n== markdown ==\n")
    print(f"Measured {meta}.\n\nCommand: `{cmd.strip()}`\n")
    print(md_table(fig_head, figures))
    print()
    print(md_table(ratio_head, ratios))
    print()
    print(md_table(goal_head, goals))
    if notes:
        print()
        print("\n".join(f"- {n}" for n in notes))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(
            {"meta": meta, "command": cmd.strip(), "versions": versions,
             "variants": [dataclasses.asdict(v) for v in variants],
             "goals": goals, "notes": notes, "results": results}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
