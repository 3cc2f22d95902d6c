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
servers recorded themselves. With `c.LocalBackend.warm_kernels` present, costguard is
measured a second time on a second server with it at 0 (a kernel started per job).

With `--skypilot`, the same job also goes to costguard's SkyPilot backend, measured in the
same run on a server of its own: the real SkyPilot 0.14.1 with its Slurm infra over SSH on
loopback, driving a single-node Slurm cluster, as tests/test_skypilot_e2e.py does (its harness,
tests/support/skypilot_infra.py and slurm_cluster.py, is reused). That needs root, Slurm
(slurmctld, slurmd, munge), sshd and rsync, a Python 3.10, and no other SkyPilot API server on
this machine (port 46580: run it under `flock /tmp/costguard-skypilot.lock`, as the e2e test
does). A SkyPilot job launches a machine (here a Slurm allocation) per job, so it takes
minutes, not a second: it gets fewer repetitions (`--skypilot-reps`), slower polling and a
longer timeout, and is left out of the ratios and goals; a table says where its time goes
(the client's view of SkyPilot's state, and SkyPilot's own provision.log). Nothing leaves
this machine.

Run `python bench/offload.py --help`; bench/README.md says how and shows a result.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import platform
import re
import shutil
import signal
import socket
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

SKYPILOT_VERSION = "0.14.1"
SKYPILOT_LOCK = "/tmp/costguard-skypilot.lock"
#: SkyPilot's API server listens here, on every machine: one at a time
SKYPILOT_API_PORT = 46580
#: the job document's `backend_detail.skypilot_status` before SkyPilot has a managed job
SKY_NO_JOB = {"LAUNCHING", "UNKNOWN"}


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
    #: costguard's backend for the job: "local", or "skypilot" (`--skypilot`, its own server)
    backend: str = "local"


VARIANTS = [
    Variant("costguard", "costguard (defaults)", "costguard"),
    Variant("scheduler", "jupyter-scheduler", "scheduler"),
    Variant("costguard-cold", "costguard, offload_warm_kernels=0", "costguard",
            (("offload_warm_kernels", 0),), needs_trait="offload_warm_kernels"),
]
SKYPILOT_VARIANT = Variant(
    "skypilot", f"costguard, backend skypilot (SkyPilot {SKYPILOT_VERSION}, Slurm infra on "
    "loopback)", "costguard", needs_trait="skypilot_enabled", backend="skypilot")


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
    """The c.CostGuard names of the working tree, as the server env imports it (its traits,
    and the old names of those moved to a component's class, which still work)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    res = subprocess.run(
        [python, "-c", "import json\nfrom jupyter_costguard.app import CostGuard\n"
                       "names = set(CostGuard.class_trait_names(config=True))\n"
                       "names |= set(getattr(CostGuard, 'moved_options', {}))\n"
                       "print(json.dumps(sorted(names)))"],
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


# --------------------------------------------------------------------------- SkyPilot

def sky_harness() -> tuple[Any, Any]:
    """tests/support's SkyPilot and Slurm harness (the e2e test's), from the repo root (first
    on the path: some wheels install a top-level `tests` package of their own)."""
    if sys.path[:1] != [str(REPO)]:
        sys.path.insert(0, str(REPO))
    from tests.support import skypilot_infra, slurm_cluster

    return skypilot_infra, slurm_cluster


def api_server_busy() -> str | None:
    """Another SkyPilot API server on this machine (the e2e test's, another bench's), if any:
    its port is fixed, so two cannot run at once."""
    import psutil

    for p in psutil.process_iter(["pid", "cmdline"]):
        if "sky.server.server" in " ".join(p.info["cmdline"] or []):
            return f"a SkyPilot API server is running (pid {p.info['pid']})"
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", SKYPILOT_API_PORT)) == 0:
            return f"port {SKYPILOT_API_PORT} (SkyPilot's API server) is in use"
    return None


def skypilot_unavailable() -> str | None:
    """Why `--skypilot` cannot run here, or None: what the e2e test needs, plus a free API
    server port."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "it needs root (slurmd runs the jobs, sshd logs in as root)"
    try:
        skypilot_infra, slurm_cluster = sky_harness()
    except ImportError as e:
        return f"cannot import the test harness from {REPO / 'tests/support'}: {e}"
    for why in (slurm_cluster.unavailable(), skypilot_infra.unavailable()):
        if why:
            return str(why)
    if not (REPO / ".venv" / "bin" / "python").exists():
        return f"no {REPO / '.venv/bin/python'} (the task's Python on the Slurm \"machine\")"
    busy = api_server_busy()
    if busy:
        return (f"{busy}: only one can run on a machine; wait for it to end, and run the "
                f"bench under `flock {SKYPILOT_LOCK}` as the e2e test does")
    return None


class SkyRig:
    """One Slurm cluster (8 CPUs declared, so SkyPilot's allocations share the machine) and
    one SkyPilot infra (sshd on loopback, a throw-away HOME, SkyPilot's API server) for the
    whole run; `stop` ends both, also after a failure."""

    def __init__(self, log: Log, keep: bool) -> None:
        self.log = log
        self.keep = keep
        self.cluster: Any = None
        self.infra: Any = None
        self.root: Path | None = None

    def start(self) -> SkyRig:
        skypilot_infra, slurm_cluster = sky_harness()
        self.log(f"SkyPilot {SKYPILOT_VERSION}: client venv and remote wheelhouse under "
                 f"{skypilot_infra.cache_dir()} (built once, ~4 min, when missing)")
        cache = skypilot_infra.ensure_environments()
        try:
            self.cluster = slurm_cluster.SlurmCluster(cpus=8).start()
            self.root = Path(tempfile.mkdtemp(prefix="costguard-offload-sky-"))
            self.infra = skypilot_infra.SkyPilotInfra(self.root, self.cluster.conf,
                                                      cache).start()
        except BaseException:
            self.stop()
            raise
        self.log(f"Slurm cluster {self.cluster.root}, SkyPilot API server on port "
                 f"{SKYPILOT_API_PORT}, sshd on 127.0.0.1:{self.infra.port}, HOME "
                 f"{self.infra.home}")
        return self

    @property
    def python(self) -> str:
        return str(self.infra.python)

    def server_env(self) -> dict[str, str]:
        """What the Jupyter server needs on top of the bench's environment: SkyPilot's
        throw-away HOME, its venv first on PATH, the network-check hook on PYTHONPATH."""
        env = {k: v for k, v in self.infra.env.items() if os.environ.get(k) != v}
        env["PYTHONPATH"] = os.pathsep.join([self.infra.env["PYTHONPATH"], str(REPO)])
        return env

    def server_config(self, workdir: Path) -> dict[str, Any]:
        """The e2e test's server, for one job at a time: managed jobs on the Slurm infra,
        on-demand, results through a file:// store, the task run by the repo's venv."""
        store = workdir / "store"
        store.mkdir(parents=True, exist_ok=True)
        return {
            "ServerApp": {"jpserver_extensions": {"jupyter_costguard": True}},
            "CostGuard": {
                "db_path": str(workdir / "ledger.sqlite"), "jobs_dir": str(workdir / "jobs"),
                "catalog_refresh_hours": 0, "offload_warm_kernels": 0,
                "skypilot_enabled": True, "skypilot_infra": ["slurm"],
                "skypilot_use_spot": False, "skypilot_storage_url": f"file://{store}",
                "skypilot_python": str(REPO / ".venv" / "bin" / "python"),
                "skypilot_env": {"COSTGUARD_CLOUD_METADATA": "off"},
                "skypilot_query_interval": 2.0},
        }

    def provision_logs(self, job_id: int) -> list[Path]:
        """SkyPilot's provision.log of each cluster launched for costguard job `job_id`."""
        if self.infra is None:
            return []
        needle = f"'costguard-job-{job_id}-"
        found = []
        for path in sorted(self.infra.home.glob("sky_logs/sky-*/provision.log")):
            try:
                if needle in path.read_text(errors="replace"):
                    found.append(path)
            except OSError:
                continue
        return found

    def logs(self) -> str:
        return str(self.infra.logs()) if self.infra is not None else ""

    def stop(self) -> None:
        if self.infra is not None:
            self.log("stopping SkyPilot's API server and sshd")
            self.infra.stop()
            self.infra = None
        if self.cluster is not None:
            self.log("stopping the Slurm cluster")
            self.cluster.stop()
            self.cluster = None
        if self.root is not None and not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)


#: a line of SkyPilot's logs: "D 12-03 14:11:25.331 PID=27075 provisioner.py:279] text"
SKY_LOG_LINE = re.compile(r"^[DIWE] (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)\.(\d+) \S+ \S+\] ?(.*)$")
SKY_STAGE = re.compile(r"-+(Start|End): +(\S+) -+")


def provision_marks(paths: list[Path], wall0: float) -> dict[str, float]:
    """Times in SkyPilot's provision.log (local wall clock, seconds after the submit at
    `wall0`): its first and last lines, when the instance was up ("Provisioning ... took"),
    and each stage's start and end (internal_file_mounts, setup_runtime_on_cluster, ...).
    A recovered job has several logs: the first launch is the one read."""
    marks: dict[str, float] = {}
    if not paths:
        return marks
    year = dt.datetime.fromtimestamp(wall0).year
    for line in paths[0].read_text(errors="replace").splitlines():
        m = SKY_LOG_LINE.match(line)
        if not m:
            continue
        mo, d, h, mi, sec, frac, text = m.groups()
        t = dt.datetime(year, int(mo), int(d), int(h), int(mi), int(sec),
                        int(frac.ljust(6, "0")[:6])).timestamp() - wall0
        marks.setdefault("first", t)
        marks["last"] = t
        if text.startswith("Provisioning '") and " took " in text:
            marks["provisioned"] = t
        stage = SKY_STAGE.search(text)
        if stage:
            marks[f"{stage.group(1).lower()}:{stage.group(2)}"] = t
    return marks


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


def costguard_labels(doc: dict[str, Any]) -> list[str]:
    """A job document's state and phase, and SkyPilot's status of its managed job once
    there is one (`backend_detail`, in the documents of jobs that have not ended)."""
    labels = [f"state:{doc['state']}", f"phase:{doc['phase']}"]
    sky = (doc.get("backend_detail") or {}).get("skypilot_status")
    if sky and sky not in SKY_NO_JOB:
        labels.append(f"sky:{sky}")
    return labels


def run_costguard(client: Client, args: argparse.Namespace,
                  backend: str = "local") -> dict[str, Any]:
    wall0 = time.time()
    body: dict[str, Any] = {"notebook": NOTEBOOK, "selected": [CELL_ID]}
    sky = backend == "skypilot"
    if sky:
        body.update(backend="skypilot", resources={"cpus": 1})
    code, raw, t0, t1 = client.request("POST", "costguard/api/jobs", body)
    if code != 201:
        raise RuntimeError(f"costguard submit: HTTP {code}: {raw[:500]!r}")
    doc = json.loads(raw)
    job_id = doc["id"]
    seen, last, lat, order = follow(
        client, f"costguard/api/jobs/{job_id}", t0, costguard_labels,
        lambda d: d["state"] in COSTGUARD_TERMINAL,
        args.skypilot_poll if sky else args.poll,
        args.skypilot_timeout if sky else args.timeout)
    if last["state"] != "succeeded":
        raise RuntimeError(f"costguard job {job_id} ended {last['state']}: "
                           f"{last.get('exit_reason')}\n{last.get('log_tail')}")
    phases = {p["phase"]: p for p in last.get("timeline", [])}

    def recorded(phase: str) -> float | None:
        p = phases.get(phase)
        return None if p is None else float(p["start"]) - wall0

    extra = sky_seen(client, job_id, seen, wall0) if sky else {}
    return {
        **extra,
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


def sky_seen(client: Client, job_id: int, seen: dict[str, float],
             wall0: float) -> dict[str, Any]:
    """What the client saw of SkyPilot's side of a job (first seen with a managed job, in
    STARTING, in RUNNING) and the job log's costguard lines (whole seconds, wall clock)."""
    sky_times = [t for lab, t in seen.items() if lab.startswith("sky:")]
    code, raw, _, _ = client.get(f"costguard/api/jobs/{job_id}/log?limit=1000000")
    text = json.loads(raw)["text"] if code == 200 else ""
    events = []
    day = dt.datetime.fromtimestamp(wall0).date()
    for line in text.splitlines():
        m = re.match(r"^\[costguard (\d\d):(\d\d):(\d\d)\] (.*)$", line)
        if m:
            h, mi, sec = (int(x) for x in m.groups()[:3])
            at = dt.datetime.combine(day, dt.time(h, mi, sec))
            events.append([round(at.timestamp() - wall0, 1), m.group(4)])
    return {"wall0": wall0, "to_sky_job": min(sky_times) if sky_times else None,
            "to_sky_starting": seen.get("sky:STARTING"),
            "to_sky_running": seen.get("sky:RUNNING"), "log_events": events}


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

ServerKey = tuple[str, tuple[tuple[str, Any], ...]]


class Run:
    def __init__(self, args: argparse.Namespace, python: str, log: Log,
                 sky: SkyRig | None = None) -> None:
        self.args = args
        self.python = python
        self.log = log
        self.sky = sky
        self.servers: dict[ServerKey, Server] = {}
        self.clients: dict[ServerKey, Client] = {}
        self.workdirs: list[Path] = []

    def server_for(self, v: Variant) -> tuple[Server, Client]:
        key = (v.backend, v.costguard)
        if key not in self.servers:
            workdir = Path(tempfile.mkdtemp(prefix="costguard-offload-bench-"))
            self.workdirs.append(workdir)
            if v.backend == "skypilot":
                assert self.sky is not None
                server = Server(self.sky.python, workdir, self.log, env=self.sky.server_env())
                config, timeout = self.sky.server_config(workdir), 180.0
            else:
                server = Server(self.python, workdir, self.log)
                config, timeout = server_config(workdir, dict(v.costguard)), 90.0
            self.servers[key] = server
            server.root.mkdir(parents=True, exist_ok=True)
            write_notebook(server.root)
            server.start(config, timeout)
            self.clients[key] = Client(server)
            self.log(f"server pid {server.pid} on port {server.port} (backend {v.backend}, "
                     f"c.CostGuard {dict(v.costguard) or 'defaults'}); workdir {workdir}")
        return self.servers[key], self.clients[key]

    def one(self, v: Variant, rep: int) -> dict[str, Any]:
        server, client = self.server_for(v)
        own = time.process_time
        b0, c0, o0, w0 = busy_cpu(), tree_cpu(server.pid), own(), time.monotonic()
        if v.tool == "costguard":
            r = run_costguard(client, self.args, v.backend)
        else:
            r = run_scheduler(client, self.args, rep)
        b1, c1, o1, w1 = busy_cpu(), tree_cpu(server.pid), own(), time.monotonic()
        if v.backend == "skypilot" and self.sky is not None:
            r.update(sky_stages(self.sky.provision_logs(r["job"]), r))
            self.log(f"{v.label} job {r['job']}: " + "; ".join(
                f"+{max(t, 0):.0f}s {text}" for t, text in r["log_events"]))
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
        def reps(v: Variant) -> int:
            return int(a.skypilot_reps if v.backend == "skypilot" else a.reps)

        for rep in range(max(reps(v) for v in variants)):
            this = [v for v in variants if rep < reps(v)]
            k = rep % len(this)
            for v in this[k:] + this[:k]:
                waited, busy = wait_quiet(a.settle_max, a.quiet_cores)
                r = self.one(v, rep)
                r.update(rep=rep, quiet_wait=waited, busy_before=busy)
                out[v.key].append(r)
                started = r["to_started"]
                self.log(f"rep {rep + 1}/{reps(v)} {v.label}: submit "
                         f"{r['submit_call'] * 1000:.1f} ms, started "
                         f"{started if started is None else round(started, 3)} s, "
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
    ("to_sky_job", "  SkyPilot: submit -> a managed job in its queue (first seen)", 1.0, "s"),
    ("to_sky_starting", "  SkyPilot: submit -> STARTING (first seen)", 1.0, "s"),
    ("to_sky_running", "  SkyPilot: submit -> RUNNING (first seen)", 1.0, "s"),
    ("sky_provision_start", "  SkyPilot provision.log: submit -> provisioning starts", 1.0, "s"),
    ("sky_provisioned", "  SkyPilot provision.log: submit -> instance ready", 1.0, "s"),
    ("sky_provision_end", "  SkyPilot provision.log: submit -> its last line (skylet)", 1.0,
     "s"),
    ("recorded_started", "  recorded by the tool: submit -> started", 1.0, "s"),
    ("recorded_executing", "  recorded by the tool: submit -> phase running", 1.0, "s"),
    ("recorded_done", "  recorded by the tool: submit -> done", 1.0, "s"),
    ("starting_phase_seconds", "  costguard phase starting (runner + kernel)", 1.0, "s"),
    ("poll_latency", "status GET latency", 1000.0, "ms"),
    ("server_tree_cpu", "CPU of the server and its processes per job", 1.0, "s"),
    ("bench_cpu", "CPU of the bench's own polling per job", 1.0, "s"),
    ("other_load", "other load on the machine during the job", 1.0, "cores"),
]


#: a SkyPilot job's time, span by span: (mark that ends the span, what the span is); each
#: span runs from the previous mark the job has (the first from the submit)
SKY_SPANS = [
    ("sky_provision_start", "submit -> SkyPilot starts provisioning (launch request, managed "
     "job, its jobs controller)"),
    ("sky_provisioned", "provisioning: a Slurm allocation over SSH until the instance is up"),
    ("sky_provision_end", "setup after provisioning: file mounts, SkyPilot's runtime, skylet "
     "(to provision.log's last line)"),
    ("recorded_started", "provision.log's last line -> costguard's runner started on the "
     "machine (the task's file mounts, submitted, run)"),
    ("recorded_executing", "runner started -> the cell executing (a kernel started)"),
    ("recorded_done", "cell executing -> the runner done (outputs pushed to the store)"),
    ("to_done", "runner done -> the client sees succeeded (the server pulls the store)"),
]


def sky_stages(paths: list[Path], r: dict[str, Any]) -> dict[str, Any]:
    """The figures from SkyPilot's provision.log of a job (`provision_marks`): when it
    started, when the instance was up, its last line (skylet's start: the task's own launch
    that follows is not in it), and each stage's seconds."""
    marks = provision_marks(paths, r["wall0"])
    out: dict[str, Any] = {"sky_provision_start": marks.get("first"),
                           "sky_provisioned": marks.get("provisioned"),
                           "sky_provision_end": marks.get("last"),
                           "provision_logs": [str(p) for p in paths]}
    for key, t in marks.items():
        if key.startswith("start:") and f"end:{key[6:]}" in marks:
            out[f"sky_stage:{key[6:]}"] = marks[f"end:{key[6:]}"] - t
    return out


def sky_span_table(rows: list[dict[str, Any]], label: str) -> tuple[list[list[str]], str]:
    """Where a SkyPilot job's time goes: each span's median over the jobs, its share of
    submit -> done, and the setup stages within; and a sentence on what dominates."""
    spans: dict[str, list[float]] = {}
    for r in rows:
        prev = 0.0
        for key, _ in SKY_SPANS:
            if r.get(key) is not None:
                spans.setdefault(key, []).append(float(r[key]) - prev)
                prev = float(r[key])
    done = median(values(rows, "to_done"))
    table: list[list[str]] = []
    for key, text in SKY_SPANS:
        xs = spans.get(key, [])
        if not xs:
            continue
        table.append([text, str(len(xs)), fmt(median(xs), "s"), fmt(min(xs), "s"),
                      fmt(max(xs), "s"), f"{median(xs) / done:.0%}"])
        if key == "sky_provision_end":
            stages = sorted({k for r in rows for k in r if k.startswith("sky_stage:")})
            for st in stages:
                ys = values(rows, st)
                table.append([f"  of which stage {st.split(':', 1)[1]}", str(len(ys)),
                              fmt(median(ys), "s"), fmt(min(ys), "s"), fmt(max(ys), "s"),
                              f"{median(ys) / done:.0%}"])
    ranked = sorted(((median(xs), key) for key, xs in spans.items()), reverse=True)
    texts = dict(SKY_SPANS)
    what = "; ".join(f"{texts[k]}: {m:.1f} s ({m / done:.0%})" for m, k in ranked[:3])
    longest = sorted(((median(values(rows, k)), k.split(":", 1)[1]) for k in
                      {k for r in rows for k in r if k.startswith("sky_stage:")}), reverse=True)
    if longest:
        what += f"; the longest setup stage: {longest[0][1]} ({longest[0][0]:.1f} s)"
    sentence = (f"{label}: not comparable in speed with the rows above and left out of the "
                "ratios and goals: every job launches a machine of its own (here a Slurm "
                "allocation reached over SSH on loopback, SkyPilot's runtime installed on it), "
                f"and tears it down. Its submit -> done is {done:.1f} s (median of "
                f"{len(rows)}); the largest parts: {what or 'n/a (no SkyPilot log found)'}")
    return table, sentence


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
    cg_variants = local_costguard(variants)

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
    other = [r["other_load"] for v in variants for r in results[v.key]
             if v.backend == "local"]
    loaded = sum(1 for x in other if x >= 0.3)
    if loaded:
        notes.append(f"{loaded} of {len(other)} local jobs ran while something else kept the "
                     f"machine busy (up to {max(other):.2f} cores); medians, not means, "
                     "are compared for that reason")
    if any(v.backend == "skypilot" for v in variants):
        notes.append(f"{SKYPILOT_VARIANT.label}: 'CPU of the server' is the Jupyter server "
                     "alone; SkyPilot's API server and jobs controller, sshd, Slurm and the "
                     "job's allocation are not its children and count in 'other load', with "
                     "anything else the machine ran")
    return figures, ratios, goals, notes


def local_costguard(variants: list[Variant]) -> list[Variant]:
    """The costguard rows compared with jupyter-scheduler (the ratios, the goals)."""
    return [v for v in variants if v.tool == "costguard" and v.backend == "local"]


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
    sky = p.add_argument_group(
        "SkyPilot", f"opt-in: costguard's SkyPilot backend in the same run (SkyPilot "
        f"{SKYPILOT_VERSION} over its Slurm\ninfra, SSH on loopback), as "
        "tests/test_skypilot_e2e.py runs it. Needs root, Slurm (slurmctld,\nslurmd, munge), "
        "sshd, ssh-keygen and rsync, a Python 3.10 and the repo's .venv. Only one\nSkyPilot "
        f"API server can run on a machine (port {SKYPILOT_API_PORT}): run under\n`flock "
        f"{SKYPILOT_LOCK} python bench/offload.py --skypilot ...`.\nSkyPilot's cached "
        "client venv is built on first use (~4 min).")
    sky.add_argument("--skypilot", action="store_true",
                     help="also measure the SkyPilot backend (a job takes ~90 s)")
    sky.add_argument("--skypilot-reps", type=int, default=2,
                     help="measured SkyPilot jobs (default 2), interleaved with the first "
                     "rounds of the others")
    sky.add_argument("--skypilot-poll", type=float, default=0.5,
                     help="seconds between status GETs of a SkyPilot job (default 0.5)")
    sky.add_argument("--skypilot-timeout", type=float, default=900.0,
                     help="seconds per SkyPilot job (default 900)")
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
    if args.skypilot:
        why = skypilot_unavailable()
        if why:
            print(f"offload.py --skypilot cannot run here: {why}", file=sys.stderr)
            return 2
    versions = env_versions(python, SERVER_DISTS)
    versions["jupyter_costguard"] = costguard_revision()
    log(f"server env {python}: {versions}")
    traits = costguard_traits(python)
    wanted = [*VARIANTS, *([SKYPILOT_VARIANT] if args.skypilot else [])]
    variants = [v for v in wanted if v.needs_trait is None or v.needs_trait in traits]
    skipped = [v for v in wanted if v not in variants]
    for v in skipped:
        log(f"skipping {v.label}: this costguard has no c.CostGuard.{v.needs_trait}")

    def on_signal(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    load0 = os.getloadavg()
    sky = SkyRig(log, args.keep) if any(v.backend == "skypilot" for v in variants) else None
    run = Run(args, python, log, sky)
    try:
        if sky is not None:
            sky.start()
            versions["skypilot"] = SKYPILOT_VERSION
        results = run.measure(variants)
    except BaseException:
        for s in run.servers.values():
            log(f"failed; server {s.pid} log tail:\n{s.tail()}")
        if sky is not None:
            log(f"SkyPilot's API server log tail:\n{sky.logs()}")
        raise
    finally:
        run.close()
        if sky is not None:
            sky.stop()
    load1 = os.getloadavg()
    elapsed = time.monotonic() - started
    cmd = "python bench/offload.py " + " ".join(argv if argv is not None else sys.argv[1:])
    when = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    reps = f"{args.reps} repetitions" + (f" ({args.skypilot_reps} of SkyPilot's, its status "
                                         f"polled every {args.skypilot_poll * 1000:g} ms)"
                                         if sky is not None else "")
    meta = (f"{when}; {os.cpu_count()} CPUs, {platform.platform()}; load avg before/after "
            f"{load0[0]:.2f}/{load1[0]:.2f}; {reps}, status polled every "
            f"{args.poll * 1000:g} ms; server env: "
            + ", ".join(f"{k} {v}" for k, v in versions.items())
            + f"; bench took {elapsed:.0f}s")
    report(args, variants, skipped, results, meta, cmd.strip(), versions)
    return 0


def report(args: argparse.Namespace, variants: list[Variant], skipped: list[Variant],
           results: dict[str, list[dict[str, Any]]], meta: str, cmd: str,
           versions: dict[str, str]) -> None:
    """The tables, as text and as Markdown, and `--json`."""
    figures, ratios, goals, notes = build_tables(variants, results)
    notes += [f"not measured: {v.label} (no c.CostGuard.{v.needs_trait} in this costguard)"
              for v in skipped]
    sky_rows: list[list[str]] = []
    if any(v.backend == "skypilot" for v in variants):
        sky_rows, sentence = sky_span_table(results[SKYPILOT_VARIANT.key],
                                            SKYPILOT_VARIANT.label)
        notes.append(sentence)
    fig_head = ["figure", "tool", "n", "median", "p90", "min", "max"]
    ratio_head = ["ratio of medians vs jupyter-scheduler",
                  *[v.label for v in local_costguard(variants)]]
    goal_head = ["goal", "measured (medians)", "verdict"]
    sky_head = ["SkyPilot job, span by span (s)", "n", "median", "min", "max",
                "share of submit -> done"]
    print("\n== offload bench: one-cell print(1) job ==")
    print(meta)
    print(f"command: {cmd}\n")
    print(text_table(fig_head, figures))
    print()
    print(text_table(ratio_head, ratios))
    print("\ngoals:")
    print(text_table(goal_head, goals))
    if sky_rows:
        print()
        print(text_table(sky_head, sky_rows))
    for n in notes:
        print(f"note: {n}")
    print("\n== markdown ==\n")
    print(f"Measured {meta}.\n\nCommand: `{cmd}`\n")
    for head, rows in ((fig_head, figures), (ratio_head, ratios), (goal_head, goals),
                       (sky_head, sky_rows)):
        if rows:
            print(md_table(head, rows))
            print()
    if notes:
        print("\n".join(f"- {n}" for n in notes))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(
            {"meta": meta, "command": cmd, "versions": versions,
             "variants": [dataclasses.asdict(v) for v in variants],
             "goals": goals, "sky_spans": sky_rows, "notes": notes, "results": results},
            indent=1, default=str))

if __name__ == "__main__":
    sys.exit(main())
