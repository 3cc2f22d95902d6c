#!/usr/bin/env python3
"""Does asking the cloud which machine this is slow the server's start? Time from starting
`python -m jupyter_server` to the first answer of `costguard/api/status` (for the floor,
`api/status`), side by side, interleaved, in one run:

- **jupyter_server alone**: no costguard (the floor);
- **before**: costguard as it was before the cloud lookups (a git worktree of ``--before``,
  default the last commit before them), on the same trace;
- **after, lookups off**: ``COSTGUARD_CLOUD_METADATA=off``;
- **after, refused**: lookups on, all three endpoints at closed loopback ports (a machine
  off any cloud whose metadata address refuses at once);
- **after, blackhole**: lookups on, all three endpoints at a loopback listener that accepts
  and never answers (an address that swallows packets: each request waits its timeout).

Then `jupyter costguard detect` in the last three settings (goal: under 2 s).

Nothing leaves the machine: every endpoint is on 127.0.0.1.

    python bench/startup.py                 # 8 rounds
    python bench/startup.py --rounds 3 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))

from common import NO_CLOUD, free_port, md_table, median, pct  # noqa: E402

BEFORE = "ad3a9bf"  # main before issue 12 (cloud identity, regions, containers)


def closed_port() -> int:
    return free_port()  # bound, then closed: nothing listens there


class Blackhole:
    """Accepts connections and never answers (what a dropped-packet address looks like,
    on loopback)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)


def endpoints(port: int) -> dict[str, str]:
    return {"COSTGUARD_CLOUD_METADATA": "on", "AWS_EC2_METADATA_DISABLED": "false",
            "AWS_EC2_METADATA_SERVICE_ENDPOINT": f"http://127.0.0.1:{port}",
            "GCE_METADATA_HOST": f"127.0.0.1:{port}",
            "COSTGUARD_AZURE_IMDS_ENDPOINT": f"http://127.0.0.1:{port}"}


def start_time(python: str, work: Path, *, costguard: bool, env: dict[str, str],
               pythonpath: str, trace: Path) -> float:
    """Seconds from spawn to the first 200 of the status route."""
    shutil.rmtree(work, ignore_errors=True)
    (work / "root").mkdir(parents=True)
    port, token = free_port(), "bench-token"
    config: dict[str, Any] = {
        "ServerApp": {"port": port, "port_retries": 0, "ip": "127.0.0.1",
                      "open_browser": False, "root_dir": str(work / "root"),
                      "allow_root": True, "jpserver_extensions": {
                          "jupyter_costguard": costguard}},
        "IdentityProvider": {"token": token},
        "CostGuard": {"db_path": str(work / "ledger.sqlite"), "replay_trace": str(trace),
                      "replay_mode": "always", "offload_warm_kernels": 0,
                      "cloud_metadata_timeout": 1.0},
    }
    cfg = work / "jupyter_server_config.json"
    cfg.write_text(json.dumps(config))
    full_env = {**os.environ, **NO_CLOUD, **env, "PYTHONPATH": pythonpath,
                "JUPYTER_CONFIG_DIR": str(work / "config"),
                "JUPYTER_RUNTIME_DIR": str(work / "runtime"),
                "JUPYTER_DATA_DIR": str(work / "data"), "JUPYTER_PLATFORM_DIRS": "1"}
    route = "costguard/api/status" if costguard else "api/status"
    req = urllib.request.Request(f"http://127.0.0.1:{port}/{route}",
                                 headers={"Authorization": f"token {token}"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    t0 = time.perf_counter()
    proc = subprocess.Popen([python, "-m", "jupyter_server", f"--config={cfg}"],
                            env=full_env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited ({proc.returncode}) in {work}")
            try:
                with opener.open(req, timeout=5) as r:
                    if r.status == 200:
                        return time.perf_counter() - t0
            except (urllib.error.URLError, OSError):
                pass
            if time.perf_counter() - t0 > 120:
                raise RuntimeError("no answer in 120 s")
            time.sleep(0.02)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def detect_time(python: str, env: dict[str, str], work: Path) -> tuple[float, str]:
    full_env = {**os.environ, **NO_CLOUD, **env, "PYTHONPATH": str(REPO),
                "JUPYTER_CONFIG_DIR": str(work / "config"),
                "JUPYTER_DATA_DIR": str(work / "data"), "JUPYTER_PLATFORM_DIRS": "1"}
    t0 = time.perf_counter()
    done = subprocess.run([python, "-m", "jupyter_costguard.cli", "detect", "--json"],
                          env=full_env, capture_output=True, text=True, timeout=60,
                          check=True)
    took = time.perf_counter() - t0
    return took, json.loads(done.stdout)["tried"][0]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--before", default=BEFORE, help="git revision to compare with")
    p.add_argument("--python", default=str(REPO / ".venv" / "bin" / "python"))
    p.add_argument("--json", help="also write every figure here")
    args = p.parse_args()
    python = args.python if Path(args.python).exists() else sys.executable
    tmp = Path(tempfile.mkdtemp(prefix="costguard-startup-"))
    before = tmp / "before"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(before),
                    args.before], check=True)
    hole = Blackhole()
    trace = REPO / "examples" / "gpu_trace.json"
    variants: dict[str, dict[str, Any]] = {
        "jupyter_server alone": {"costguard": False, "env": {}, "path": str(REPO)},
        f"before ({args.before})": {"costguard": True, "env": {}, "path": str(before)},
        "after, lookups off": {"costguard": True, "env": {}, "path": str(REPO)},
        "after, refused": {"costguard": True, "env": endpoints(closed_port()),
                           "path": str(REPO)},
        "after, blackhole": {"costguard": True, "env": endpoints(hole.port),
                             "path": str(REPO)},
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    try:
        for r in range(args.rounds):
            order = list(variants)[r % len(variants):] + list(variants)[:r % len(variants)]
            for name in order:
                v = variants[name]
                times[name].append(start_time(python, tmp / "w", costguard=v["costguard"],
                                              env=v["env"], pythonpath=v["path"],
                                              trace=trace))
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
        detects = {name: detect_time(python, variants[name]["env"], tmp / "d")
                   for name in ("after, lookups off", "after, refused", "after, blackhole")}
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force",
                        str(before)], check=False)
        shutil.rmtree(tmp, ignore_errors=True)
    floor = median(times["jupyter_server alone"])
    ref = median(times[f"before ({args.before})"])
    header = ["start-up to first status", "n", "median s", "p90 s", "max s", "/ before",
              "/ alone"]
    rows = [[name, str(len(v)), f"{median(v):.2f}", f"{pct(v, 90):.2f}", f"{max(v):.2f}",
             f"{median(v) / ref:.2f}", f"{median(v) / floor:.2f}"]
            for name, v in times.items()]
    drows = [[name, f"{took:.2f}", "PASS" if took < 2.0 else "FAIL", first]
             for name, (took, first) in detects.items()]
    print(f"\n{args.rounds} interleaved rounds on {platform.machine()}, "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}\n")
    print(md_table(header, rows))
    print()
    print(md_table(["jupyter costguard detect", "s", "goal < 2 s", "first step"], drows))
    if args.json:
        Path(args.json).write_text(json.dumps({"startup": times, "detect": {
            k: v[0] for k, v in detects.items()}}, indent=2))
    return 0 if all(d[0] < 2.0 for d in detects.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
