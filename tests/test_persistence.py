"""Spend survives restarts and crashes; history stays bounded."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from jupyter_costguard.cost.ledger import HISTORY_BUCKET_SECONDS, Ledger
from jupyter_costguard.cost.spend import IntervalCost, Share
from tests.support.server_proc import ServerProcess
from tests.support.traces import write_trace
from tests.support.units import GiB


def _cost(total: float, **shares: float) -> IntervalCost:
    s = {k: Share(gpu=v) for k, v in shares.items()}
    return IntervalCost(total=total, unattributed=total - sum(shares.values()),
                        unattributed_gpu=total - sum(shares.values()), shares=s)


def test_totals_continue_after_reopen(tmp_path: Path):
    db = tmp_path / "l.sqlite"
    ledger = Ledger(db, now=1000.0)
    ledger.record(1002.0, 2.0, _cost(1.0, k1=0.5), {"k1": "a.ipynb"}, {"k1": "python3"})
    ledger.record(1004.0, 2.0, _cost(1.0, k1=0.25), {"k1": "a.ipynb"}, {"k1": "python3"})
    ledger.close()

    again = Ledger(db, now=5000.0)
    assert again.server.spend == pytest.approx(2.0)
    assert again.server.since == 1000.0
    assert again.notebooks["a.ipynb"].spend == pytest.approx(0.75)
    # a new kernel for the same notebook after the restart adds to the same notebook
    again.record(5002.0, 2.0, _cost(1.0, k2=1.0), {"k2": "a.ipynb"}, {"k2": "python3"})
    assert again.notebooks["a.ipynb"].spend == pytest.approx(1.75)
    assert again.notebook_kernel_ids("a.ipynb") == {"k1", "k2"}
    assert again.recent_history("a.ipynb"), "minute history reloads"


def test_history_is_pruned_to_retention(tmp_path: Path):
    db = tmp_path / "l.sqlite"
    ledger = Ledger(db, retention_days=1.0, now=0.0)
    day = 86400.0
    for t in (10.0, day * 0.5, day * 3):
        ledger.record(t, 2.0, _cost(1.0, k=1.0), {"k": "a.ipynb"}, {"k": "python3"})
    rows = sqlite3.connect(db).execute("SELECT bucket FROM history WHERE path='a.ipynb'")
    buckets = sorted(r[0] for r in rows)
    # only what is within a day of the last write is left
    assert buckets == [int(day * 3 // HISTORY_BUCKET_SECONDS)]
    assert ledger.notebooks["a.ipynb"].spend == pytest.approx(3.0), "totals are never pruned"


@pytest.mark.timeout(180)
def test_spend_survives_kill_9(tmp_path: Path):
    frame = {"t": 0, "gpus": [{"utilization_percent": 50,
                               "processes": [{"kernel": 0, "used_memory_bytes": 2 * GiB}]}]}
    trace = write_trace(tmp_path / "trace.json", [frame], gpus=1)
    config = {"db_path": str(tmp_path / "ledger.sqlite"), "sample_interval": 0.5,
              "hourly_rate": 72.0, "gpu_share": 1.0, "replay_trace": str(trace),
              "replay_mode": "always"}
    server = ServerProcess(tmp_path / "s1", config).start()
    try:
        server.start_session("crash.ipynb")
        nb = server.wait_for("costguard/api/notebooks/crash.ipynb", lambda d: d["spend"] > 0.05)
        server.kill9()
    finally:
        server.stop()
    last_seen = nb["spend"]

    again = ServerProcess(tmp_path / "s2", config).start()
    try:
        # before any kernel of the restarted server spends, the old total is there
        status = again.get("costguard/api/status")
        detail = again.get("costguard/api/notebooks/crash.ipynb")
        interval_cost = 72.0 * 0.5 / 3600
        # at most one sample interval is lost: what we saw last is there, or one more
        # interval that was committed after our read
        assert detail["spend"] >= last_seen - interval_cost - 1e-6
        assert status["totals"]["spend"] >= detail["spend"]
        again.start_session("crash.ipynb")
        again.wait_for("costguard/api/notebooks/crash.ipynb",
                       lambda d: d["spend"] > detail["spend"] and d["kernels_seen"] == 2)
    finally:
        again.stop()
