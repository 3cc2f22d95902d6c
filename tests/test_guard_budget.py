"""Guard rule `budget`: synthetic samples through the real Guard and ledger (simulated time),
the notebook metadata reader, then real servers: alerts escalate, and with enforcement a
real kernel running a long cell is interrupted."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import pytest

from jupyter_costguard.guard.budget import BudgetRule, NotebookBudgets
from tests.support.attach import attach
from tests.support.guard_harness import GPU_SHARE, HOURLY_RATE, T0, K, SpendHarness
from tests.support.openapi_check import validate
from tests.support.rest import get_json, start_session
from tests.support.server_proc import ServerProcess
from tests.support.units import GiB

KIND = "budget"
NB = "notebook:train.ipynb"
# 36/h, 90% for 2 GPUs: a kernel holding one GPU (and no CPU) spends 0.0045 per second
PER_SECOND = HOURLY_RATE * GPU_SHARE / 2 / 3600


def budget_harness(tmp_path: Path, **config: Any) -> tuple[SpendHarness, BudgetRule]:
    h = SpendHarness(tmp_path, lambda c: [BudgetRule(c)], **config)
    rule = h.rules[0]
    assert isinstance(rule, BudgetRule)
    return h, rule


def spend(h: SpendHarness, path: str) -> float:
    t = h.ledger.notebooks.get(path)
    return t.spend if t is not None else 0.0


def write_notebook(path: Path, metadata: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"cells": [], "metadata": metadata, "nbformat": 4,
                                "nbformat_minor": 5}))
    return path


# --- the rule, in simulated time -----------------------------------------------------------


def test_warns_at_the_fraction_then_escalates_at_100(tmp_path: Path):
    h, _ = budget_harness(tmp_path, notebook_budget=1.0)
    k = K("k1", "train.ipynb")
    while spend(h, "train.ipynb") + 10 * PER_SECOND < 0.8 - 1e-9:
        h.step(10, [k])
        assert h.alert(KIND, NB) is None
    h.step(10, [k])
    assert spend(h, "train.ipynb") >= 0.8
    warning = h.alert(KIND, NB)
    assert warning is not None and warning.severity == "warning"
    assert warning.notebook == "train.ipynb" and warning.kernel_id == "k1"
    assert "80% of budget spent" in warning.title
    assert "of its 1.00 USD budget" in warning.message
    assert warning.details["budget_source"] == "config"
    assert warning.details["fraction"] >= 0.8

    while spend(h, "train.ipynb") + 10 * PER_SECOND < 1.0 - 1e-9:
        h.step(10, [k])
        a = h.alert(KIND, NB)
        assert a is not None and a.severity == "warning"
    h.step(10, [k])
    critical = h.alert(KIND, NB)
    assert critical is not None and critical.severity == "critical"
    assert critical.id == warning.id  # the same alert, escalated
    assert critical.title == "Over budget: train.ipynb"
    assert "over its budget of 1.00 USD" in critical.message
    assert h.acts == []  # not enforced


def test_server_budget_counts_everything(tmp_path: Path):
    # unattributed spend counts too: here no kernel holds a GPU, the server still costs
    h, _ = budget_harness(tmp_path, server_budget=0.36)  # 36/h: 36 s
    h.run(T0 + 28, 1, [K("k1", "a.ipynb", gpu={})])
    assert h.alert(KIND, "server") is None
    h.run(T0 + 30, 1, [K("k1", "a.ipynb", gpu={})])
    a = h.alert(KIND, "server")
    assert a is not None and a.severity == "warning" and a.notebook is None
    assert a.details["scope"] == "server"
    h.run(T0 + 40, 1, [])
    a = h.alert(KIND, "server")
    assert a is not None and a.severity == "critical" and "This server" in a.message


def test_the_server_budget_starts_again_each_period(tmp_path: Path):
    # T0 is 22:13:20 UTC; the day's budget of 0.36 is 36 s at 36/h
    midnight = 1_700_006_400.0
    h, _ = budget_harness(tmp_path, server_budget=0.36, server_budget_period="day")
    h.run(T0 + 40, 1, [])
    a = h.alert(KIND, "server")
    assert a is not None and a.severity == "critical"
    assert "per day since 2023-11-14 UTC" in a.details["budget_source"]
    h.run(midnight - 10, 10, [])
    assert h.alert(KIND, "server").severity == "critical"
    # a new day: the period's spend starts from what the server had spent at midnight
    h.run(midnight + 20, 1, [])
    assert h.alert(KIND, "server") is None
    assert h.ledger.period_spend(midnight) == pytest.approx(20 * 0.01, abs=0.02)
    h.run(midnight + 40, 1, [])
    a = h.alert(KIND, "server")
    assert a is not None and a.severity == "critical"
    assert "since 2023-11-15 UTC" in a.details["budget_source"]


def test_the_period_mark_survives_a_restart(tmp_path: Path):
    from jupyter_costguard.cost.ledger import Ledger
    ledger = Ledger(tmp_path / "l.sqlite", now=T0 - 86400 * 3)
    ledger.server.spend = 5.0
    assert ledger.period_spend(T0) == 0.0  # the ledger began before the period: marked now
    ledger.server.spend = 7.5
    assert ledger.period_spend(T0) == 7.5 - 5.0
    ledger.db.close()
    again = Ledger(tmp_path / "l.sqlite", now=T0)
    again.server.spend = 8.0
    assert again.period_spend(T0) == pytest.approx(3.0)
    # a ledger begun inside the period counts all of its spend
    fresh = Ledger(tmp_path / "f.sqlite", now=T0 + 5)
    fresh.server.spend = 1.25
    assert fresh.period_spend(T0) == 1.25


def test_no_budget_no_alert(tmp_path: Path):
    h, rule = budget_harness(tmp_path, budget_enforce=True)
    h.run(T0 + 3600, 60, [K("k1", "a.ipynb", state="busy")])
    assert h.alerts.active() == [] and h.acts == []
    assert rule.refuses("a.ipynb") is None


def test_enforce_interrupts_busy_kernels_once_per_crossing(tmp_path: Path):
    h, rule = budget_harness(tmp_path, notebook_budget=0.5, budget_enforce=True)
    busy = K("busy", "train.ipynb", state="busy")
    idle = K("idle", "train.ipynb", state="idle", gpu={"GPU-b": GiB})
    other = K("other", "other.ipynb", state="busy", gpu={})
    kernels = [busy, idle, other]
    acts = h.run(T0 + 50, 10, kernels)
    assert acts == [] and rule.refuses("train.ipynb") is None
    acts = h.run(T0 + 200, 10, kernels)  # train.ipynb crosses 0.5 in here
    assert [(a.action, a.kernel_id) for a in acts] == [("interrupt-kernel", "busy")]
    assert "0.50 USD" in acts[0].reason
    a = h.alert(KIND, NB)
    assert a is not None and a.severity == "critical"
    assert "interrupted 1 running kernel and refuses new batch jobs" in a.message
    assert a.details["interrupted_kernels"] == 1 and a.details["offloads_refused"] is True
    assert a.kernel_id is None  # two kernels serve the notebook
    # still over budget, still busy: not interrupted again on every sample
    assert h.run(T0 + 600, 10, kernels) == []
    refusal = rule.refuses("train.ipynb")
    assert refusal is not None and "budget is spent" in refusal and "0.50 USD" in refusal
    assert rule.refuses("/train.ipynb") == refusal
    assert rule.refuses("other.ipynb") is None and rule.refuses(None) is None


def test_a_raised_budget_ends_the_crossing(tmp_path: Path):
    h, rule = budget_harness(tmp_path, notebook_budget=0.5, budget_enforce=True)
    overrides: dict[str, float] = {}
    h.guard.notebook_budgets = lambda: overrides
    k = K("k1", "train.ipynb", state="busy")
    assert len(h.run(T0 + 200, 10, [k])) == 1
    overrides["train.ipynb"] = 2.0  # raised: under budget again (not even at 80%)
    h.step(10, [k])
    assert h.alert(KIND, NB) is None and rule.refuses("train.ipynb") is None
    overrides["train.ipynb"] = 0.6  # lowered below what is spent: a new crossing
    assert [a.kernel_id for a in h.step(10, [k])] == ["k1"]
    a = h.alert(KIND, NB)
    assert a is not None and a.details["budget_source"] == "notebook metadata"
    assert a.details["budget"] == 0.6


def test_without_enforce_nothing_is_interrupted_or_refused(tmp_path: Path):
    h, rule = budget_harness(tmp_path, notebook_budget=0.1)
    h.run(T0 + 300, 10, [K("k1", "train.ipynb", state="busy")])
    a = h.alert(KIND, NB)
    assert a is not None and a.severity == "critical"
    assert h.acts == [] and rule.refuses("train.ipynb") is None
    assert "refuse" not in a.message


def test_server_budget_enforced_interrupts_every_busy_kernel(tmp_path: Path):
    h, rule = budget_harness(tmp_path, server_budget=0.1, budget_enforce=True)
    kernels = [K("a", "a.ipynb", state="busy"), K("b", None, state="busy", gpu={}),
               K("c", "c.ipynb", state="idle")]
    acts = h.run(T0 + 20, 1, kernels)
    assert sorted(a.kernel_id or "" for a in acts) == ["a", "b"]
    assert rule.refuses("anything.ipynb") == rule.refuses("a.ipynb") is not None


def test_notebook_alert_resolves_when_its_kernels_stop(tmp_path: Path):
    h, _ = budget_harness(tmp_path, notebook_budget=0.1)
    h.run(T0 + 100, 10, [K("k1", "train.ipynb")])
    assert h.alert(KIND, NB) is not None
    h.step(10, [])
    assert h.alert(KIND, NB) is None
    h.step(10, [K("k2", "train.ipynb")])  # reopened, still over
    a = h.alert(KIND, NB)
    assert a is not None and a.severity == "critical"


def test_metadata_override_beats_config(tmp_path: Path):
    root = tmp_path / "root"
    write_notebook(root / "sub" / "cheap.ipynb", {"costguard": {"budget": 0.05}})
    write_notebook(root / "rich.ipynb", {"costguard": {"budget": 100}})
    h, _ = budget_harness(tmp_path, notebook_budget=0.5)
    h.guard.notebook_budgets = NotebookBudgets(root)
    h.run(T0 + 200, 10, [K("k1", "sub/cheap.ipynb"), K("k2", "rich.ipynb", gpu={"GPU-b": 1}),
                         K("k3", "plain.ipynb", gpu={})])
    cheap = h.alert(KIND, "notebook:sub/cheap.ipynb")
    assert cheap is not None and cheap.severity == "critical"
    assert cheap.details["budget"] == 0.05
    assert cheap.details["budget_source"] == "notebook metadata"
    assert spend(h, "rich.ipynb") > 0.5
    assert h.alert(KIND, "notebook:rich.ipynb") is None
    assert h.alert(KIND, "notebook:plain.ipynb") is None


@pytest.mark.parametrize("section", [
    {"budget": "12.5"}, {"budget": -3}, {"budget": 0}, {"budget": True}, {"budget": [1]},
    {"budget": float("inf")}, "12.5", 7,
])
def test_malformed_metadata_is_logged_once_and_ignored(tmp_path: Path, section: Any,
                                                      caplog: pytest.LogCaptureFixture):
    root = tmp_path / "root"
    nb = root / "bad.ipynb"
    nb.parent.mkdir(parents=True)
    nb.write_text(json.dumps({"cells": [], "metadata": {"costguard": section},
                              "nbformat": 4, "nbformat_minor": 5}, allow_nan=True))
    h, _ = budget_harness(tmp_path, notebook_budget=0.1)
    h.guard.notebook_budgets = NotebookBudgets(root)
    with caplog.at_level(logging.WARNING, logger="jupyter_costguard"):
        h.run(T0 + 300, 10, [K("k1", "bad.ipynb")])
        # saved again with the same bad value: still logged only once
        os.utime(nb, ns=(time.time_ns(), time.time_ns() + 10**9))
        h.run(T0 + 310, 10, [K("k1", "bad.ipynb")])
    logged = [r for r in caplog.records if r.getMessage().startswith("costguard: bad.ipynb")]
    assert len(logged) == 1, [r.getMessage() for r in logged]
    assert "ignored" in logged[0].getMessage()
    a = h.alert(KIND, "notebook:bad.ipynb")  # the configured budget applies
    assert a is not None and a.details["budget"] == 0.1 and a.details["budget_source"] == "config"


def test_notebook_budgets_reader(tmp_path: Path):
    root = tmp_path / "root"
    reader = NotebookBudgets(root)
    overrides = reader()
    nb = write_notebook(root / "a.ipynb", {"costguard": {"budget": 12.5}})
    assert overrides.get("a.ipynb") == 12.5 and overrides.get("/a.ipynb") == 12.5
    assert dict(overrides) == {"a.ipynb": 12.5}
    # re-read when the file changes (cached by mtime and size otherwise)
    write_notebook(nb, {"costguard": {"budget": 3}})
    os.utime(nb, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert overrides.get("a.ipynb") == 3.0
    write_notebook(nb, {"kernelspec": {"name": "python3"}})
    os.utime(nb, ns=(time.time_ns(), time.time_ns() + 2 * 10**9))
    assert overrides.get("a.ipynb") is None
    write_notebook(nb, {"costguard": {"budget": None, "note": "x"}})
    os.utime(nb, ns=(time.time_ns(), time.time_ns() + 3 * 10**9))
    assert overrides.get("a.ipynb") is None
    # nothing outside the root, nothing but notebooks, nothing that isn't there
    write_notebook(tmp_path / "outside.ipynb", {"costguard": {"budget": 1}})
    assert overrides.get("../outside.ipynb") is None
    (root / "script.py").write_text('costguard = {"budget": 1}')
    assert overrides.get("script.py") is None
    assert overrides.get("missing.ipynb") is None
    # a notebook mid-write (not JSON) keeps the last good value
    write_notebook(nb, {"costguard": {"budget": 4}})
    os.utime(nb, ns=(time.time_ns(), time.time_ns() + 4 * 10**9))
    assert overrides.get("a.ipynb") == 4.0
    nb.write_text('{"metadata": {"costguard": {"budget": 5}')
    assert overrides.get("a.ipynb") == 4.0


# --- real servers, real kernels --------------------------------------------------------------


@pytest.fixture
def costguard_config(costguard_config: dict[str, Any]) -> dict[str, Any]:
    # 3600/h: the whole server costs 1 per second; kernel 0's GPU is 0.45 of it
    return {**costguard_config, "hourly_rate": 3600.0, "Guard.notebook_budget": 2.5,
            "Guard.budget_warn_fraction": 0.5}


@pytest.mark.timeout(120)
async def test_notebook_budget_warns_then_goes_critical(jp_fetch: Any, jp_root_dir: Path):
    write_notebook(jp_root_dir / "priced.ipynb", {"costguard": {"budget": 10_000}})
    await start_session(jp_fetch, "budgeted.ipynb")
    await start_session(jp_fetch, "priced.ipynb")
    seen: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + 90
    while "critical" not in seen:
        assert time.monotonic() < deadline, seen
        doc = await get_json(jp_fetch, "costguard", "api", "alerts")
        validate("/alerts", 200, doc)
        for a in doc["alerts"]:
            if a["kind"] == KIND:
                assert a["key"] == "notebook:budgeted.ipynb", a  # priced.ipynb: 10000
                seen.setdefault(a["severity"], a)
        await asyncio.sleep(0.1)
    assert set(seen) == {"warning", "critical"}
    assert seen["warning"]["id"] == seen["critical"]["id"]
    assert seen["warning"]["details"]["budget"] == 2.5
    assert 1.25 <= seen["warning"]["details"]["spend"] < 2.5
    assert seen["critical"]["details"]["spend"] >= 2.5
    assert seen["critical"]["notebook"] == "budgeted.ipynb"
    detail = await get_json(jp_fetch, "costguard", "api", "notebooks", "budgeted.ipynb")
    assert detail["alerts"]["highest_severity"] == "critical"


def test_enforced_budget_interrupts_a_running_cell(tmp_path: Path, trace_file: Path):
    config = {"db_path": str(tmp_path / "ledger.sqlite"), "sample_interval": 0.25,
              "hourly_rate": 3600.0, "gpu_share": 0.9, "replay_trace": str(trace_file),
              "replay_mode": "always", "Guard.notebook_budget": 0.01, "Guard.budget_enforce": True}
    workdir = tmp_path / "srv"
    # the notebook's metadata raises its budget far above the configured 0.01
    nb = write_notebook(workdir / "root" / "enforce.ipynb", {"costguard": {"budget": 10_000}})
    server = ServerProcess(workdir, config).start()
    try:
        kid = server.start_session("enforce.ipynb")["kernel"]["id"]
        # attached to the kernel's own channels once the server hears its status messages:
        # a cell run before then read "starting" for its whole 60 s on a loaded machine
        client = attach(workdir / "runtime" / f"kernel-{kid}.json",
                        lambda: str(server.get(f"api/kernels/{kid}")["execution_state"]))
        try:
            msg_id = client.execute("import time; time.sleep(60)")

            def kernel(doc: dict[str, Any]) -> dict[str, Any] | None:
                return next((k for k in doc["kernels"] if k["kernel_id"] == kid), None)

            server.wait_for("costguard/api/kernels",
                            lambda d: (k := kernel(d)) is not None
                            and k["execution_state"] == "busy" and k["spend"] > 0.05)
            # over the configured budget, well under its own: nothing happens
            assert not [a for a in server.get("costguard/api/alerts")["alerts"]
                        if a["kind"] == KIND]
            # the notebook's budget is lowered below what it has spent: a crossing
            write_notebook(nb, {"costguard": {"budget": 0.05}})
            reply = client.get_shell_msg(timeout=60)
            assert reply["parent_header"]["msg_id"] == msg_id
            assert reply["content"]["status"] == "error"
            assert reply["content"]["ename"] == "KeyboardInterrupt"

            alerts = server.wait_for(
                "costguard/api/alerts",
                lambda d: any(a["kind"] == KIND and a["severity"] == "critical"
                              for a in d["alerts"]))
            a = next(a for a in alerts["alerts"] if a["kind"] == KIND)
            assert a["key"] == "notebook:enforce.ipynb"
            assert a["details"]["budget_source"] == "notebook metadata"
            assert a["details"]["interrupted_kernels"] == 1
            assert "interrupted 1 running kernel" in a["message"]

            # once per crossing: the next cell runs to its end
            again = client.execute_interactive("import time; time.sleep(1.5); 'done'",
                                               timeout=60)
            assert again["content"]["status"] == "ok"
        finally:
            client.stop_channels()
    finally:
        server.stop()
    assert "interrupt-kernel" in server.log()

