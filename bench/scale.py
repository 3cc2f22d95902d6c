#!/usr/bin/env python3
"""costguard's REST API with 1,000 jobs in the store and 100 kernels: p50/p99 latency of
`GET costguard/api/jobs` (the first page), `jobs/{id}`, `notebooks` and `status`, next to the
floor `GET /api/kernels`, in the same run, from the same keep-alive client, interleaved.

One `python -m jupyter_server` process with costguard on a replayed GPU trace (no NVML, no
cloud metadata, loopback only, a fixed hourly rate), sampling at 1 Hz and following jobs as in
production. How the load is made:

- **jobs**: one real job is run first (three cells, one selected, in a real kernel), so that
  its record (code, hashes, the kernel's environment with every package) and slice are what
  the product writes. The server is stopped, the job is copied through costguard's own
  `JobStore` API to `--jobs` jobs (different notebooks, times, ends: succeeded, failed,
  cancelled), each with a copy of the real job's directory (status, log, outputs,
  results), and the server is started again on that store. All are finished, so the
  follower has no active job to poll; the API reads what it would read in production.
- **kernels**: `--real-kernels` real ipykernel kernels, the rest stand-ins: a kernelspec
  whose process is ``sleep`` (a real process the server starts, lists, and whose process
  tree costguard's sampler walks every second, but no ipykernel: 100 real ipykernels do not
  fit 2 shared cores). Every kernel is opened as a session of its own notebook.

Then `--rounds` rounds, each one GET of every endpoint in a rotating order (`jobs/{id}` of a
random job each time). The goal the output states: p99 < 50 ms for each costguard endpoint.

    python bench/scale.py               # 1,000 jobs, 100 kernels (4 real), 300 rounds
    python bench/scale.py --quick       # 100 jobs, 10 kernels (1 real), 60 rounds
    python bench/scale.py --json out.json
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import platform
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import (
    BENCH,
    REPO,
    Client,
    Log,
    Server,
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

sys.path.insert(0, str(REPO))

GOAL_P99 = 0.050  # seconds, each costguard endpoint
GiB = 1024 ** 3
ENDPOINTS = ["api/kernels", "costguard/api/jobs", "costguard/api/jobs/{id}",
             "costguard/api/notebooks", "costguard/api/status"]
STAND_IN = "costguard-bench-idle"
TEMPLATE_CELLS = [
    ("load", "import json, math, random\nrows = [random.random() for _ in range(1000)]"),
    ("noise", "print('an unrelated cell')"),
    ("train", "total = sum(math.sqrt(r) for r in rows)\nprint('total', round(total, 3))"),
]


def write_trace(path: Path, gpus: int = 8, holders: int = 16) -> Path:
    """8×A100; kernels 0..holders-1 hold memory on GPU k % gpus (as bench/sampling.py)."""
    frame_gpus = []
    for g in range(gpus):
        procs = [{"kernel": k, "used_memory_bytes": (2 + k % 3) * GiB}
                 for k in range(holders) if k % gpus == g]
        frame_gpus.append({"utilization_percent": 40 if g % 2 == 0 else 1,
                           "power_watts": 120, "processes": procs})
    doc = {"format": "costguard-trace/1", "description": "scale bench trace",
           "instance_type": "p4d.24xlarge", "duration": 60,
           "gpus": [{"uuid": f"GPU-bench-{i}", "name": "NVIDIA A100-SXM4-40GB",
                     "memory_total_bytes": 40 * GiB} for i in range(gpus)],
           "frames": [{"t": 0, "gpus": frame_gpus}]}
    path.write_text(json.dumps(doc))
    return path


def notebook(cells: list[tuple[str, str]]) -> str:
    return json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "cells": [{"id": cid, "cell_type": "code", "source": src, "metadata": {},
                   "outputs": [], "execution_count": None} for cid, src in cells]})


def config(workdir: Path) -> dict[str, Any]:
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_costguard": True}},
        "CostGuard": {"db_path": str(workdir / "ledger.sqlite"),
                      "jobs_dir": str(workdir / "jobs"), "sample_interval": 1.0,
                      "hourly_rate": 32.77, "replay_trace": str(write_trace(
                          workdir / "trace.json")), "replay_mode": "always",
                      "offload_warm_kernels": 0},
    }


def run_template_job(server: Server, log: Log) -> int:
    (server.root / "project").mkdir(parents=True, exist_ok=True)
    (server.root / "project" / "template.ipynb").write_text(notebook(TEMPLATE_CELLS))
    c = Client(server)
    try:
        doc = c.json("POST", "costguard/api/jobs", {"notebook": "project/template.ipynb",
                                                     "selected": ["train"]})
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            doc = c.json("GET", f"costguard/api/jobs/{doc['id']}")
            if doc["state"] in ("succeeded", "failed", "cancelled", "lost"):
                break
            time.sleep(0.2)
        if doc["state"] != "succeeded":
            raise RuntimeError(f"the template job did not succeed: {doc}")
        log(f"template job {doc['id']} succeeded")
        return int(doc["id"])
    finally:
        c.close()


def fill_store(jobs_dir: Path, template_id: int, n: int, log: Log) -> list[int]:
    """`n` finished jobs in all (the template included), written through `JobStore`."""
    from jupyter_costguard.offload.store import JobStore

    store = JobStore(jobs_dir / "jobs.sqlite")
    try:
        template = store.get(template_id)
        assert template is not None
        src = jobs_dir / str(template_id)
        rng = random.Random(11)
        now = time.time()
        ids = [template_id]
        for i in range(n - 1):
            nb = f"project/nb-{i % 100:03d}.ipynb"
            created = now - (n - i) * 90.0
            spec = dataclasses.replace(template.spec, notebook=nb)
            job = store.create(spec, created, dict(template.slice_doc), dict(template.record))
            took = rng.uniform(5, 600)
            state, reason = rng.choices(
                [("succeeded", None), ("failed", "cell 'train' raised ValueError: bad row"),
                 ("cancelled", "cancelled by the user")], weights=[85, 10, 5])[0]
            times = {"queued": created, "starting": created + 0.5, "running": created + 2,
                     "finishing": created + took, "done": created + took + 0.5}
            spend = round(took * 32.77 / 3600 / 8, 4)
            store.save(dataclasses.replace(
                job, state=state, phase="done", ended=times["done"], attempts=1,
                exit_reason=reason, spend=spend, phase_times=times,
                phase_spend={p: spend * k / 4 for k, p in enumerate(times)},
                record=dict(template.record)))
            shutil.copytree(src, jobs_dir / str(job.id))
            ids.append(job.id)
        log(f"job store filled: {len(ids)} finished jobs")
        return ids
    finally:
        store.close()


def add_stand_in_spec(server: Server) -> None:
    spec = server.workdir / "data" / "kernels" / STAND_IN
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": ["sleep", "infinity"], "display_name": "bench stand-in (sleep)",
        "language": "python"}))


def start_kernels(server: Server, real: int, total: int, log: Log) -> None:
    t0 = time.monotonic()
    c = Client(server)
    try:
        for i in range(total):
            name = "python3" if i < real else STAND_IN
            path = f"project/nb-{i % 100:03d}.ipynb" if i < 100 else f"extra/nb-{i}.ipynb"
            c.json("POST", "api/sessions", {"path": path, "type": "notebook", "name": "",
                                            "kernel": {"name": name}})
        deadline = time.monotonic() + 300
        while c.json("GET", "costguard/api/status")["kernel_count"] < total:
            if time.monotonic() > deadline:
                raise RuntimeError("costguard does not list every kernel")
            time.sleep(0.5)
        kernels = c.json("GET", "api/kernels")
    finally:
        c.close()
    log(f"{len(kernels)} kernels ({real} real) listed after {time.monotonic() - t0:.1f}s")


def measure(server: Server, ids: list[int], rounds: int, log: Log) -> dict[str, Any]:
    rng = random.Random(7)
    c = Client(server)
    lat: dict[str, list[float]] = {e: [] for e in ENDPOINTS}
    size: dict[str, list[int]] = {e: [] for e in ENDPOINTS}
    first_page = 0
    try:
        for e in ENDPOINTS:  # warm-up, unmeasured
            c.get(e.replace("{id}", str(ids[0])))
        for r in range(rounds):
            order = ENDPOINTS[r % len(ENDPOINTS):] + ENDPOINTS[:r % len(ENDPOINTS)]
            for e in order:
                code, body, t0, t1 = c.get(e.replace("{id}", str(rng.choice(ids))))
                if code != 200:
                    raise RuntimeError(f"GET {e}: HTTP {code}: {body[:300]!r}")
                lat[e].append(t1 - t0)
                size[e].append(len(body))
                if e == ENDPOINTS[1]:
                    first_page = len(json.loads(body)["jobs"])
    finally:
        c.close()
    log(f"{rounds} rounds measured")
    return {e: {"n": len(v), "p50": median(v), "p99": pct(v, 99), "max": max(v),
                "bytes": int(median([float(s) for s in size[e]]))} for e, v in lat.items()} | {
        "_first_page_jobs": first_page}


def report(res: dict[str, Any], meta: dict[str, Any]) -> tuple[str, str, bool]:
    floor = res["api/kernels"]["p99"]
    header = ["GET", "n", "p50 ms", "p99 ms", "max ms", "body bytes", "p99 / api/kernels",
              "goal p99 < 50 ms"]
    rows, ok = [], True
    for e in ENDPOINTS:
        r = res[e]
        goal = "(floor)" if e == "api/kernels" else verdict(r["p99"] < GOAL_P99)
        ok = ok and (e == "api/kernels" or r["p99"] < GOAL_P99)
        rows.append([e, str(r["n"]), ms(r["p50"]), ms(r["p99"]), ms(r["max"]), str(r["bytes"]),
                     f"{r['p99'] / floor:.2f}", goal])
    title = (f"{meta['jobs']} jobs in the store, {meta['kernels']} kernels "
             f"({meta['real_kernels']} real ipykernel, the rest `sleep` stand-ins), first page "
             f"of GET jobs = {res['_first_page_jobs']} jobs; {meta['rounds']} interleaved "
             f"rounds, one keep-alive client, sampling at 1 Hz. Goal: p99 < 50 ms for each "
             f"costguard endpoint: {verdict(ok)}")
    return (title + "\n" + text_table(header, rows), title + "\n\n" + md_table(header, rows),
            ok)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--kernels", type=int, default=100)
    p.add_argument("--real-kernels", type=int, default=4)
    p.add_argument("--rounds", type=int, default=300)
    p.add_argument("--limit", type=int, help="ask GET jobs for a page of this many "
                   "(?limit=N); default: the server's own first page")
    p.add_argument("--python", help="an env with jupyter_server and ipykernel (default: the "
                   "repo's .venv, else bench/.venv, made once)")
    p.add_argument("--json", type=Path, help="also write every figure here")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (server log)")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 100 jobs, 10 kernels (1 real), 60 rounds")
    args = p.parse_args(argv)
    if args.quick:
        args.jobs, args.kernels, args.real_kernels, args.rounds = 100, 10, 1, 60
    log = progress_log()
    python = args.python or (str(REPO / ".venv" / "bin" / "python")
                             if (REPO / ".venv" / "bin" / "python").exists()
                             else str(ensure_venv(BENCH / ".venv", [], log)))
    reexec_in(python, __file__, argv)
    workdir = Path(tempfile.mkdtemp(prefix="costguard-scale-"))
    started = time.monotonic()
    server = Server(python, workdir, log)
    try:
        cfg = config(workdir)
        server.start(cfg)
        template = run_template_job(server, log)
        server.stop()
        ids = fill_store(workdir / "jobs", template, args.jobs, log)
        server = Server(python, workdir, log)
        add_stand_in_spec(server)
        server.start(cfg, timeout=180)
        log("server restarted on the filled store")
        start_kernels(server, min(args.real_kernels, args.kernels), args.kernels, log)
        time.sleep(3)  # a few samples with every kernel
        if args.limit is not None:
            ENDPOINTS[1] = f"costguard/api/jobs?limit={args.limit}"
        res = measure(server, ids, args.rounds, log)
    except Exception:
        print(server.tail(), file=sys.stderr)
        raise
    finally:
        server.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            log(f"kept {workdir}")
    meta = {"jobs": args.jobs, "kernels": args.kernels, "real_kernels": args.real_kernels,
            "rounds": args.rounds, "date": dt.datetime.now(dt.timezone.utc).isoformat(
                timespec="seconds"), "machine": f"{platform.machine()}, "
            f"{os.cpu_count()} CPUs", "seconds": round(time.monotonic() - started),
            "versions": env_versions(python, ["jupyter_server", "tornado", "ipykernel"])}
    text, md, ok = report(res, meta)
    print(text)
    print(f"\n(ran {meta['seconds']} s on {meta['machine']}; {meta['versions']})")
    print("\nMarkdown:\n\n" + md)
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "latency": res, "pass": ok}, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
