#!/usr/bin/env python3
"""What hibernating a kernel costs against the floor (issue 37 item 7): save and restore
time, bytes written and peak extra memory for namespaces of ~10 MB, ~1 GB and ~4 GB, side by
side in one run:

- **floor**: the same values written and read the plainest way, one file each: arrays with
  `numpy.save`/`numpy.load`, the frame and the dict with `pickle` protocol 5, each file
  fsynced (a snapshot is fsynced too);
- **hibernate**: `jupyter_costguard.kernel.hibernate.save`/`restore` of this tree;
- **dill**: `dill.dump_session`/`dill.load_session` of the same values in `__main__`, the file
  fsynced after the dump;
- **hibernate at REV** (with `--before REV`, repeatable): the library as committed at REV.

The namespace is a mix: numpy arrays (four dtypes, the largest 40% of the whole), a pandas
DataFrame (25%), a dict of small objects, and torch CPU tensors when torch is importable.

Every save and every restore runs in a fresh subprocess, in a fixed order (for each repeat,
for each approach: save, then restore, then the files are removed); each figure is the
median of the repeats. The load average (`os.getloadavg`, what `uptime` shows) is printed
at the start and the end, and kept with each run in `--json`: other work on the cores moves
the figures. The page cache is not dropped (that needs root): a restore reads what its save
just wrote, for every approach alike; with `--cold` the saved files' pages are evicted first
(`posix_fadvise`, no root needed), so the restore reads the disk.

Peak memory is the process's high-water RSS (`VmHWM`, reset through `/proc/self/clear_refs`
just before the operation, after `malloc_trim` gave back the heap's free pages) above its RSS
before it, less, for a restore, the namespace's own
size: the goal is that this stays under one object's copy (the largest value).

    python bench/hibernate.py                       # 10MB, 1GB, 4GB, 3 repeats
    python bench/hibernate.py --quick               # 10MB, 1 repeat (seconds)
    python bench/hibernate.py --sizes 1GB --before HEAD~1 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))

from common import md_table, median  # noqa: E402

APPROACHES = ("floor", "hibernate", "dill")
#: the goal (issue 45): save at most the floor's time, restore at most 1.2× it (issue 37's
#: was 1.5× for both)
GOAL_SAVE = 1.0
GOAL_RESTORE = 1.2
UNITS = {"KB": 10**3, "MB": 10**6, "GB": 10**9}


def parse_size(text: str) -> int:
    text = text.strip().upper()
    for unit, factor in UNITS.items():
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * factor)
    return int(text)


def human(n: float) -> str:
    for unit in ("GB", "MB", "KB"):
        if abs(n) >= UNITS[unit]:
            return f"{n / UNITS[unit]:.2f} {unit}"
    return f"{n:.0f} B"


# --------------------------------------------------------------------------- the namespace

def build_namespace(size: int) -> dict[str, Any]:
    """About `size` bytes of a notebook's values, the same for every approach (seeded)."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(37)
    ns: dict[str, Any] = {}
    n_items = max(500, min(50_000, size // 20_000))
    ns["records"] = {f"row-{i}": {"id": i, "name": f"item {i}", "tags": ["a", "b", str(i % 7)],
                                  "score": i * 0.5, "ok": i % 3 == 0}
                     for i in range(n_items)}
    arrays = size * 73 // 100
    ns["embeddings"] = rng.random((arrays * 40 // 73 // 4 // 256, 256), dtype=np.float32)
    ns["signal"] = rng.standard_normal(arrays * 20 // 73 // 8)
    ns["labels"] = rng.integers(0, 1 << 40, arrays * 10 // 73 // 8, dtype=np.int64)
    ns["image"] = rng.integers(0, 255, (arrays * 3 // 73 // (64 * 64 * 3), 64, 64, 3),
                               dtype=np.uint8)
    rows = size // 4 // 44  # 5 float/int64 columns, an int32 and a category: ~44 bytes/row
    ns["frame"] = pd.DataFrame({
        "x": rng.random(rows), "y": rng.random(rows), "z": rng.standard_normal(rows),
        "n": rng.integers(0, 1000, rows), "t": rng.integers(0, 1 << 50, rows),
        "k": rng.integers(0, 100, rows, dtype=np.int32),
        "group": pd.Categorical.from_codes(rng.integers(0, 4, rows),
                                           ["train", "test", "val", "hold"]),
    })
    try:
        import torch
    except ImportError:
        pass
    else:
        ns["weights"] = torch.from_numpy(rng.random(size // 50 // 4, dtype=np.float32))
    return ns


def own_size(value: Any) -> int:
    """Bytes a value holds in memory: exact for arrays, frames and tensors; for containers
    of small objects, the sum of `sys.getsizeof` over everything reachable."""
    import numpy as np
    import pandas as pd

    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, pd.DataFrame):
        return int(value.memory_usage(deep=True).sum())
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        return int(value.nelement() * value.element_size())
    seen: set[int] = set()
    total = 0
    stack = [value]
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        total += sys.getsizeof(v)
        if isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, (list, tuple, set, frozenset)):
            stack.extend(v)
    return total


# --------------------------------------------------------------------------- the child

def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak() -> None:
    """Give the heap's free pages back (building the namespace freed temporaries that a copy
    made during the operation would otherwise reuse unseen), then reset VmHWM to the RSS."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL(None).malloc_trim(0)  # glibc
    except (OSError, AttributeError):
        pass
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def floor_save(ns: dict[str, Any], out: Path) -> None:
    import pickle

    import numpy as np

    out.mkdir()
    for name, value in ns.items():
        if isinstance(value, np.ndarray):
            path = out / f"{name}.npy"
            with open(path, "wb") as f:
                np.save(f, value, allow_pickle=False)
                f.flush()
                os.fsync(f.fileno())
        else:  # the frame, the dict (and a torch tensor): pickle protocol 5
            path = out / f"{name}.pkl"
            with open(path, "wb") as f:
                pickle.dump(value, f, protocol=5)
                f.flush()
                os.fsync(f.fileno())
    _fsync(out)


def floor_restore(ns: dict[str, Any], src: Path) -> None:
    import pickle

    import numpy as np

    for path in sorted(src.iterdir()):
        if path.suffix == ".npy":
            ns[path.stem] = np.load(path, allow_pickle=False)
        else:
            with open(path, "rb") as f:
                ns[path.stem] = pickle.load(f)


def hibernate_save(ns: dict[str, Any], out: Path) -> None:
    from jupyter_costguard.kernel.hibernate import save

    manifest = save(ns, out, 1 << 50)
    if manifest.skipped:
        raise RuntimeError(f"hibernate skipped {manifest.skipped}")


def hibernate_restore(ns: dict[str, Any], src: Path) -> None:
    from jupyter_costguard.kernel.hibernate import restore

    result = restore(ns, src)
    if result.skipped:
        raise RuntimeError(f"hibernate did not restore {result.skipped}")


def dill_save(ns: dict[str, Any], out: Path) -> None:
    import warnings

    import dill

    main = sys.modules["__main__"]
    for name, value in ns.items():
        setattr(main, name, value)
    out.mkdir()
    path = out / "session.pkl"
    with warnings.catch_warnings():  # dump_session is dump_module's old name
        warnings.simplefilter("ignore")
        dill.dump_session(str(path))
    _fsync(path)
    _fsync(out)


def dill_restore(ns: dict[str, Any], src: Path) -> None:
    import warnings

    import dill

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dill.load_session(str(src / "session.pkl"))
    main = sys.modules["__main__"]
    for name in ("records", "embeddings", "signal", "labels", "image", "frame", "weights"):
        if hasattr(main, name):
            ns[name] = getattr(main, name)


OPS = {("floor", "save"): floor_save, ("floor", "restore"): floor_restore,
       ("hibernate", "save"): hibernate_save, ("hibernate", "restore"): hibernate_restore,
       ("dill", "save"): dill_save, ("dill", "restore"): dill_restore}


def evict(path: Path) -> None:
    """Drop the (fsynced, so clean) pages of every file under `path` from the page cache, as
    after hours of other work: `posix_fadvise(DONTNEED)` needs no root."""
    for p in path.rglob("*"):
        if p.is_file():
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def child(approach: str, op: str, size: int, path: Path, profile: str | None,
          cold: bool = False) -> None:
    """One measurement; prints its figures as one JSON line."""
    import numpy  # noqa: F401  imported before the clock starts, for every approach
    import pandas  # noqa: F401

    if approach.startswith("hibernate"):
        import jupyter_costguard.kernel.hibernate  # noqa: F401
    if approach == "dill":
        import dill  # noqa: F401
    fn = OPS[("hibernate" if approach.startswith("hibernate") else approach, op)]
    ns: dict[str, Any] = build_namespace(size) if op == "save" else {}
    sizes = {name: own_size(v) for name, v in ns.items()}
    _reset_peak()
    rss0 = _status("VmRSS")
    if profile:
        import cProfile

        prof = cProfile.Profile()
        c0 = time.process_time()
        t0 = time.perf_counter()
        prof.runcall(fn, ns, path)
        took = time.perf_counter() - t0
        prof.dump_stats(profile)
    else:
        c0 = time.process_time()
        t0 = time.perf_counter()
        fn(ns, path)
        took = time.perf_counter() - t0
    cpu = time.process_time() - c0  # every thread's: the work, whatever else runs
    peak = _status("VmHWM")
    if op == "restore":
        sizes = {name: own_size(v) for name, v in ns.items()}
    total = sum(sizes.values())
    extra = peak - rss0 - (total if op == "restore" else 0)
    written = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    if cold and op == "save":
        evict(path)
    print(json.dumps({"seconds": took, "cpu": cpu, "extra": extra, "bytes": written, "own": total,
                      "largest": max(sizes.values()), "names": sorted(sizes)}))


# --------------------------------------------------------------------------- the parent

def run_child(python: str, approach: str, op: str, size: int, path: Path,
              pythonpath: str, profile: str | None = None, cold: bool = False
              ) -> dict[str, Any]:
    cmd = [python, str(Path(__file__).resolve()), "--child", approach, op, str(size),
           str(path)]
    if profile:
        cmd += ["--profile", profile]
    if cold:
        cmd += ["--cold"]
    env = {**os.environ, "PYTHONPATH": pythonpath}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{approach} {op} at {human(size)} failed:\n{done.stderr[-3000:]}")
    doc: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return doc


def default_dir() -> str:
    """The system temp folder if it is on the same disk as the repository, else beside it."""
    tmp = tempfile.gettempdir()
    return tmp if os.stat(tmp).st_dev == os.stat(REPO).st_dev else str(REPO.parent)


def measure(python: str, sizes: list[int], approaches: dict[str, str], repeats: int,
            work: Path, cold: bool) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """{size label: {approach: [{"save": doc, "restore": doc, "load": 1/5/15 min}, ...]}}."""
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for size in sizes:
        label = human(size)
        results[label] = {a: [] for a in approaches}
        for r in range(repeats):
            for approach, pythonpath in approaches.items():
                out = work / f"{approach.replace(' ', '-')}-{size}"
                shutil.rmtree(out, ignore_errors=True)
                try:
                    saved = run_child(python, approach, "save", size, out, pythonpath,
                                      cold=cold)
                    restored = run_child(python, approach, "restore", size, out, pythonpath)
                finally:
                    shutil.rmtree(out, ignore_errors=True)
                results[label][approach].append({"save": saved, "restore": restored,
                                                 "load": os.getloadavg()})
                print(f"{label} repeat {r + 1}/{repeats} {approach}: save "
                      f"{saved['seconds']:.2f} s, restore {restored['seconds']:.2f} s",
                      file=sys.stderr, flush=True)
    return results


def table(results: dict[str, dict[str, list[dict[str, Any]]]]) -> tuple[list[str],
                                                                         list[list[str]]]:
    header = ["size", "approach", "save s", "restore s", "bytes written",
              "peak extra memory save / restore", "largest value", "× floor save / restore",
              f"goal: save ≤ {GOAL_SAVE:g}×, restore ≤ {GOAL_RESTORE:g}× floor, extra ≤ largest",
              "CPU s save / restore"]
    rows: list[list[str]] = []
    for label, by_approach in results.items():
        fig = {a: {op: median([run[op]["seconds"] for run in runs])
                   for op in ("save", "restore")}
               for a, runs in by_approach.items()}
        floor = fig["floor"]
        for approach, runs in by_approach.items():
            save_s, restore_s = fig[approach]["save"], fig[approach]["restore"]
            extra_s = median([run["save"]["extra"] for run in runs])
            extra_r = median([run["restore"]["extra"] for run in runs])
            largest = runs[0]["save"]["largest"]
            ratios = (save_s / floor["save"], restore_s / floor["restore"])
            fast = ratios[0] <= GOAL_SAVE and ratios[1] <= GOAL_RESTORE
            small = max(extra_s, extra_r) <= largest
            rows.append([
                label, approach, f"{save_s:.2f}", f"{restore_s:.2f}",
                human(median([run["save"]["bytes"] for run in runs])),
                f"{human(max(0, extra_s))} / {human(max(0, extra_r))}", human(largest),
                f"{ratios[0]:.2f} / {ratios[1]:.2f}",
                "—" if approach == "floor" else
                "met" if fast and small else
                "not met: " + " and ".join(x for x, ok in (("time", fast), ("memory", small))
                                           if not ok),
                " / ".join(f"{median([run[op].get('cpu', 0.0) for run in runs]):.2f}"
                           for op in ("save", "restore")),
            ])
    return header, rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="10MB,1GB,4GB", help="comma-separated, e.g. 10MB,1GB")
    p.add_argument("--quick", action="store_true", help="10 MB only, one repeat")
    p.add_argument("--repeats", type=int, default=None, help="default 3 (1 with --quick)")
    p.add_argument("--dir", help="where the files are written (default: a temp folder on "
                                 "the repository's disk, removed after)")
    p.add_argument("--before", action="append", default=[],
                   help="also measure the hibernate library at this git revision (repeatable)")
    p.add_argument("--cold", action="store_true",
                   help="evict the saved files from the page cache before each restore")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--json", help="also write every figure here")
    p.add_argument("--profile", help="cProfile one hibernate save of the first size into "
                                     "this file (and print its top entries), then stop")
    p.add_argument("--child", nargs=4, metavar=("APPROACH", "OP", "SIZE", "PATH"),
                   help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        approach, op, size, path = args.child
        child(approach, op, int(size), Path(path), args.profile, args.cold)
        return 0
    sizes = [parse_size(s) for s in ("10MB" if args.quick else args.sizes).split(",")]
    repeats = args.repeats or (1 if args.quick else 3)
    base = Path(args.dir) if args.dir else Path(default_dir())
    base.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="costguard-hibernate-bench-", dir=base))
    approaches = {a: str(REPO) for a in APPROACHES if a != "dill" or _importable("dill")}
    trees: list[Path] = []
    try:
        for i, rev in enumerate(args.before):
            tree = work / f"before-tree-{i}"
            subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q",
                            str(tree), rev], check=True)
            trees.append(tree)
            approaches[f"hibernate at {rev}"] = str(tree)
        if args.profile:
            return profile(args.python, sizes[0], work, args.profile)
        started = time.monotonic()
        load = [os.getloadavg()]
        results = measure(args.python, sizes, approaches, repeats, work, args.cold)
        load.append(os.getloadavg())
        took = time.monotonic() - started
    finally:
        for tree in trees:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force",
                            str(tree)], check=False)
        shutil.rmtree(work, ignore_errors=True)
    header, rows = table(results)
    torch = "torch CPU tensors" if _importable("torch") else "no torch (not importable)"
    dill = "" if "dill" in approaches else "; no dill row (pip install dill)"
    cache = ("restores read from disk (pages evicted after each save)" if args.cold
             else "restores read what the save left in the page cache")
    print(f"\n{repeats} repeat(s), median; {platform.machine()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}; files in {base}; {torch}{dill}; {cache}; "
          f"{took:.0f} s; load average (1, 5, 15 min) {_load(load[0])} at the start, "
          f"{_load(load[1])} at the end\n")
    print(md_table(header, rows))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


def _load(avg: tuple[float, float, float]) -> str:
    return " ".join(f"{x:.2f}" for x in avg)


def profile(python: str, size: int, work: Path, stats: str) -> int:
    import pstats

    out = work / "profiled"
    doc = run_child(python, "hibernate", "save", size, out, str(REPO), profile=stats)
    print(f"hibernate save of {human(size)}: {doc['seconds']:.2f} s under cProfile")
    pstats.Stats(stats).sort_stats("tottime").print_stats(15)
    return 0


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


if __name__ == "__main__":
    sys.exit(main())
