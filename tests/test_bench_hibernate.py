"""bench/hibernate.py (issue 37 item 7) still runs: its quick mode measures every approach in
real subprocesses and prints the table docs/user/hibernate.md quotes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_quick_bench_prints_a_row_per_approach(tmp_path: Path):
    pytest_env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "hibernate.py"), "--quick",
                           "--dir", str(tmp_path)], env=pytest_env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = [line.split("|")[1:-1] for line in done.stdout.splitlines()
            if line.startswith("| 10.00 MB |")]
    approaches = [cells[1].strip() for cells in rows]
    want = ["floor", "hibernate"] + (["dill"] if "no dill row" not in done.stdout else [])
    assert approaches == want, done.stdout
    for cells in rows:
        save_s, restore_s = float(cells[2]), float(cells[3])
        assert save_s >= 0 and restore_s >= 0
        assert cells[4].strip().endswith("MB")  # bytes written: about the namespace's 10 MB
    assert list(tmp_path.iterdir()) == []  # its files are removed
