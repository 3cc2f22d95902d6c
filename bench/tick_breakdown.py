#!/usr/bin/env python3
"""Where one `CostService.tick` spends its CPU, without a profiler's distortion.

An in-process harness: N real ipykernel processes (jupyter_client), a `CostService` over a
replayed 8-GPU trace, a real SQLite ledger in a temp dir, the guard's rules and the
Prometheus builder, ticked `--ticks` times back to back. Stage CPU times (thread CPU, this
harness is one thread) come from thin wrappers around the stages; a second part times
alternatives for the kernel process-tree walk, the largest stage. Run it with the bench
env's interpreter:

    bench/.venv/bin/python bench/tick_breakdown.py --n 30

(bench/sampling.py creates bench/.venv; the repo root is put on sys.path here.)
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH.parent), str(BENCH)]

import psutil  # noqa: E402
from jupyter_client import KernelManager  # noqa: E402
from sampling import write_trace  # noqa: E402

from jupyter_costguard.cost import ledger as ledger_mod  # noqa: E402
from jupyter_costguard.cost import service as service_mod  # noqa: E402
from jupyter_costguard.guard.budget import NotebookBudgets  # noqa: E402
from jupyter_costguard.guard.config import GuardConfig  # noqa: E402
from jupyter_costguard.guard.engine import GuardEngine  # noqa: E402
from jupyter_costguard.guard.rules import default_rules  # noqa: E402
from jupyter_costguard.metrics import collector as metrics  # noqa: E402
from jupyter_costguard.sampling import telemetry as tele_mod  # noqa: E402
from jupyter_costguard.sampling.records import KernelInfo  # noqa: E402
from jupyter_costguard.sampling.replay import ReplaySource  # noqa: E402

CPU: dict[str, float] = defaultdict(float)
CALLS: dict[str, int] = defaultdict(int)


def timed(name: str, fn: Any) -> Any:
    def wrapper(*a: Any, **kw: Any) -> Any:
        c0 = time.thread_time()
        try:
            return fn(*a, **kw)
        finally:
            CPU[name] += time.thread_time() - c0
            CALLS[name] += 1

    return wrapper


def profile(svc: Any, infos: list[Any], ticks: int, top: int) -> int:
    """cProfile `ticks` ticks (the profiler inflates times; the shares are what compare)."""
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(ticks):
        svc.tick(infos)
    prof.disable()
    stats = pstats.Stats(prof)
    stats.strip_dirs()
    for key in ("tottime", "cumulative"):
        stats.sort_stats(key).print_stats(top)
    stats.sort_stats("tottime").print_callers(min(top, 8))
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=30)
    p.add_argument("--ticks", type=int, default=200)
    p.add_argument("--profile", type=int, default=0, metavar="K",
                   help="instead of stage times, cProfile the ticks and print the K functions "
                        "with the most own and cumulative time")
    args = p.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="costguard-tick-"))
    kms: list[KernelManager] = []
    try:
        print(f"starting {args.n} kernels ...", file=sys.stderr)
        for _ in range(args.n):
            km = KernelManager(kernel_name="python3")
            km.start_kernel()
            kms.append(km)
        for km in kms:
            kc = km.client()
            kc.start_channels()
            kc.wait_for_ready(timeout=120)
            kc.stop_channels()
        pids = [km.provisioner.pid for km in kms]  # type: ignore[union-attr]
        threads = [psutil.Process(pid).num_threads() for pid in pids]
        now = time.time()
        infos = [KernelInfo(kernel_id=f"k{i}", name="python3", pid=pid, execution_state="idle",
                            last_activity=now, connections=1, path=f"nb-{i:03d}.ipynb")
                 for i, pid in enumerate(pids)]

        # stage wrappers (harness-only monkeypatching; nothing on disk changes)
        tele_mod.Telemetry.sample = timed("telemetry.sample", tele_mod.Telemetry.sample)
        tele_mod.KernelProbe.measure = timed("telemetry.sample › probe.measure (all kernels)",
                                             tele_mod.KernelProbe.measure)
        tele_mod._ProcTree.descendants = timed(
            "telemetry.sample › measure › _ProcTree.descendants", tele_mod._ProcTree.descendants)
        tele_mod.attribute_gpus = timed("telemetry.sample › attribute_gpus",
                                        tele_mod.attribute_gpus)
        tele_mod.host_memory = timed("telemetry.sample › host_memory",
                                     tele_mod.host_memory)
        service_mod.split_interval = timed("split_interval", service_mod.split_interval)
        ledger_mod.Ledger.record = timed("ledger.record", ledger_mod.Ledger.record)
        ledger_mod.Ledger._persist = timed("ledger.record › _persist (SQLite)",
                                           ledger_mod.Ledger._persist)
        service_mod.build_views = timed("build_views", service_mod.build_views)
        builder = timed("build_metrics", metrics.build_metrics)

        svc = service_mod.CostService(
            tele_mod.Telemetry(ReplaySource(write_trace(tmp / "trace.json"))),
            ledger_mod.Ledger(tmp / "ledger.sqlite", now=now),
            service_mod.PricingConfig(hourly_rate=32.77),
            sample_interval=1.0, metrics_builder=builder,
        )
        # the guard's rules, as the server runs them (budgets read from notebook metadata)
        config = GuardConfig()
        guard = GuardEngine(config, default_rules(config), svc.alerts, svc.ledger, svc.catalog,
                      notebook_budgets=NotebookBudgets(tmp))
        svc.after_sample = [timed("guard.evaluate", guard.evaluate)]
        for _ in range(5):  # warm: psutil.Process objects, pricing, SQLite pages
            svc.tick(infos)
        CPU.clear()
        CALLS.clear()
        if args.profile:
            return profile(svc, infos, args.ticks, args.profile)
        total = 0.0
        walls = []
        gc_cpu = [0.0, 0.0]  # start of the collection in progress, CPU in collections

        def gc_timer(phase: str, info: dict[str, Any]) -> None:
            if phase == "start":
                gc_cpu[0] = time.thread_time()
            else:
                gc_cpu[1] += time.thread_time() - gc_cpu[0]
                CALLS[f"gc gen{info['generation']}"] += 1

        gc.callbacks.append(gc_timer)
        for _ in range(args.ticks):
            c0, w0 = time.thread_time(), time.perf_counter()
            svc.tick(infos)
            total += time.thread_time() - c0
            walls.append(time.perf_counter() - w0)
        per = total / args.ticks
        gc.callbacks.remove(gc_timer)
        counts = ", ".join(f"{k}: {v}" for k, v in sorted(CALLS.items()) if k.startswith("gc "))
        print(f"\ncyclic GC inside the ticks: {gc_cpu[1] / args.ticks * 1000:.3f} ms CPU/tick "
              f"({counts or 'no collection'})", file=sys.stderr)
        print(f"\nN={args.n} kernels ({statistics.median(threads)} threads each, median), "
              f"{args.ticks} ticks: {per * 1000:.2f} ms CPU/tick, wall median "
              f"{statistics.median(walls) * 1000:.2f} ms\n")
        print("| stage | ms CPU/tick | share |\n|---|---:|---:|")
        for name in CPU:
            print(f"| {name} | {CPU[name] / args.ticks * 1000:.3f} | "
                  f"{100 * CPU[name] / total:.1f}% |")

        # alternatives for the process-tree walk, same PIDs
        print("\nprocess-tree walk alternatives for the same kernels (ms CPU per tick):\n")
        print("| method | ms/tick | opens/tick | equivalent? |\n|---|---:|---:|---|")
        tree = tele_mod._ProcTree()
        reps = 50

        def bench(fn: Any) -> float:
            c0 = time.thread_time()
            for _ in range(reps):
                for pid in pids:
                    fn(pid)
            return (time.thread_time() - c0) / reps * 1000

        def main_thread_only(pid: int) -> list[int]:
            try:
                with open(f"/proc/{pid}/task/{pid}/children") as f:
                    return [int(x) for x in f.read().split()]
            except OSError:
                return []

        def psutil_children(pid: int) -> list[int]:
            return [c.pid for c in psutil.Process(pid).children(recursive=True)]

        opens = sum(threads)
        print(f"| _ProcTree.descendants (per-thread children files, now) | "
              f"{bench(tree.descendants):.3f} | {opens} + {len(pids)} listdir | yes |")
        print(f"| main thread's children file only | {bench(main_thread_only):.3f} | "
              f"{len(pids)} | no: misses children forked by other threads |")
        print(f"| psutil children(recursive=True) (scans all /proc ppids) | "
              f"{bench(psutil_children):.3f} | {len(psutil.pids())} per kernel | yes |")

        procs = {pid: psutil.Process(pid) for pid in pids}

        def oneshot(pid: int) -> None:
            pr = procs[pid]
            with pr.oneshot():
                pr.cpu_times()
                pr.memory_info()

        def raw_stat(pid: int) -> None:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            int(fields[11]), int(fields[12]), int(fields[21])  # utime, stime, rss pages

        print(f"\nper-process CPU+RSS read (ms per tick for {len(pids)} processes): psutil "
              f"oneshot cpu_times+memory_info {bench(oneshot):.3f}; one /proc/PID/stat read "
              f"{bench(raw_stat):.3f}")
        print(f"(host has {len(psutil.pids())} processes; {os.cpu_count()} CPUs)")
        svc.ledger.close()
    finally:
        for km in kms:
            try:
                km.shutdown_kernel(now=True)
            except Exception:
                pass
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
