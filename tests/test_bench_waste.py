"""bench/waste.py (issue 45 item 2): the replayed notebook day runs in CI, checks its own
invariants, and each policy behaves as the code it models (jupyter_server's kernel cull,
jupyterhub-idle-culler, costguard's idle rule with hibernation and resume on use)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
POLICIES = ["none", "jupyter-server-cull", "idle-culler", "costguard-defaults",
            "costguard-shortest"]
H = 3600.0


@pytest.fixture(scope="module")
def waste() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_waste", ROOT / "bench" / "waste.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_waste"] = module
    spec.loader.exec_module(module)
    return module


def test_the_quick_replay_writes_every_policy_and_holds_its_invariants(tmp_path: Path) -> None:
    out = tmp_path / "waste.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "waste.py"), "--quick",
                           "--json", str(out)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(out.read_text())
    assert doc["invariants"] == {"ok": True, "violations": []}
    policies = doc["policies"]
    assert list(policies) == POLICIES
    for p in policies.values():
        for key in ("idle_held_spend", "removed_share", "variables_lost",
                    "variables_lost_bytes", "busy_seconds_interrupted", "gpu_hours_held",
                    "gpu_hours_busy", "restores", "restore_wait_seconds_total"):
            assert key in p
        assert 0.0 <= p["removed_share"] <= 1.0
    assert policies["none"]["removed_share"] == 0.0
    for name in ("costguard-defaults", "costguard-shortest"):
        assert policies[name]["variables_lost"] == 0
        assert policies[name]["busy_seconds_interrupted"] == 0
        assert policies[name]["gpu_hours_busy"] == policies["none"]["gpu_hours_busy"]
    if doc["workload"]["guard_defaults"]["hibernate_idle_after_seconds"] is not None:
        # hibernation on by default (issue 44): the defaults free GPUs too
        assert policies["costguard-defaults"]["hibernations"] > 0
        assert policies["costguard-defaults"]["removed_share"] > 0
    shortest = policies["costguard-shortest"]
    assert shortest["hibernations"] > 0 and shortest["restores"] > 0
    assert shortest["removed_share"] > 0.5
    # the cullers free GPUs by throwing state (and running work) away
    assert policies["idle-culler"]["variables_lost"] > 0
    assert policies["jupyter-server-cull"]["busy_seconds_interrupted"] > 0
    assert "| costguard-shortest |" in done.stdout


def test_the_live_leg_hibernates_an_idle_kernel_and_resumes_every_variable(
        tmp_path: Path) -> None:
    """`--live`: a real server on the NVML stand-in leaves a kernel training in a thread
    alone, hibernates it once idle, and the notebook's next kernel finds every variable
    (by a fingerprint of them all) before its first cell runs (resume on use)."""
    out = tmp_path / "live.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COSTGUARD_CLOUD_METADATA": "off",
           "AWS_EC2_METADATA_DISABLED": "true"}
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "waste.py"), "--quick",
                           "--live", "--json", str(out)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    live = json.loads(out.read_text())["live"]
    assert live["ok"] and live["never_hibernated_while_training"] and live["new_kernel"]
    assert live["fingerprint_after"] == live["fingerprint_before"]
    assert {"blob", "table", "weights", "settings", "model"} <= set(live["variables_saved"])


def _replay(waste: ModuleType, user: Any, policy: str, *, hibernate_after: float | None
            = None, hours: float = 8.0, dt: float = 60.0) -> Any:
    catalog = waste.Catalog.load()
    pricing = waste.resolve_pricing(catalog, instance_type="p3.2xlarge", environ={}, gpu=None,
                                    host=None, hourly_rate=None, market="on-demand")
    config = None
    if policy == "costguard":
        config = waste.GuardConfig().replaced(
            hibernate_idle_after_seconds=hibernate_after)
    result = waste.Result(policy)
    replay = waste.Replay(user, policy, config, pricing, waste.Throughput(), result)
    for i in range(1, int(hours * H / dt) + 1):
        replay.step(waste.T0 + i * dt, dt)
    return result


def _user(waste: ModuleType, tasks: list[Any], end: str, *,
          present: list[tuple[float, float]] | None = None, unsaveable: bool = False) -> Any:
    t0 = waste.T0
    return waste.User("u", t0, t0 + H, present if present is not None else [(t0, t0 + H)],
                      tasks, end, unsaveable)


def test_a_forgotten_open_tab(waste: ModuleType) -> None:
    """A connected kernel idle for hours: jupyter_server's cull (cull_connected False) keeps
    it; the hub's culler stops the server (a hidden tab does not poll) and loses its
    variables; costguard hibernates it and the next cell gets every variable back."""
    T, t0 = waste.Task, waste.T0
    tasks = [T(t0 + 60, t0 + 120, cell=True, var_bytes=10**9),
             T(t0 + 600, t0 + 660, cell=True, var_bytes=2 * 10**9),
             T(t0 + 6 * H, t0 + 6 * H + 30, cell=True)]  # back after hours, tab still open
    user = _user(waste, tasks, "open-tab", present=[(t0, t0 + 700)])
    kept = _replay(waste, user, "jupyter-server-cull")
    assert kept.kernels_stopped == 0 and kept.variables_lost == 0
    culled = _replay(waste, user, "idle-culler")
    assert culled.kernels_stopped == 2  # and the new server, idle again after the cell
    assert culled.variables_lost == 2 and culled.variables_lost_bytes == 3 * 10**9
    saved = _replay(waste, user, "costguard", hibernate_after=1800.0)
    # hibernated, restored at the next cell with both variables, hibernated again
    assert saved.hibernations == 2 and saved.restores == 1 and saved.variables_lost == 0
    assert saved.variables_restored == 2
    assert saved.restore_wait_seconds[0] > 0
    assert saved.held_seconds < culled.held_seconds + 1800.0 + 120
    assert saved.waste_avoided > 0


def test_a_silent_training_thread_in_a_closed_tab(waste: ModuleType) -> None:
    """Training in a thread that prints nothing, the tab closed: jupyter_server's cull sees
    an idle, unconnected kernel after an hour and cuts the training; costguard's rule sees
    the GPU working and waits until the training ends."""
    T, t0 = waste.Task, waste.T0
    tasks = [T(t0 + 60, t0 + 120, cell=True, var_bytes=10**8),
             T(t0 + 120, t0 + 3 * H, cell=False, prints=False)]
    user = _user(waste, tasks, "close-tab", present=[(t0, t0 + 200)])
    culled = _replay(waste, user, "jupyter-server-cull")
    assert culled.busy_seconds_interrupted > H and culled.variables_lost == 1
    saved = _replay(waste, user, "costguard", hibernate_after=300.0)
    assert saved.busy_seconds_interrupted == 0 and saved.variables_lost == 0
    assert saved.busy_seconds == pytest.approx(3 * H - 60, abs=1)
    assert saved.hibernations == 1  # after the training ended, not during it


def test_a_value_that_cannot_be_saved_keeps_the_kernel_running(waste: ModuleType) -> None:
    """Issue 44: automatic hibernation shuts a kernel down only when everything was saved;
    the rule hears the refusal and asks again later; the kernel keeps its GPU."""
    T, t0 = waste.Task, waste.T0
    user = _user(waste, [T(t0 + 60, t0 + 120, cell=True, var_bytes=10**8)], "open-tab",
                 unsaveable=True)
    r = _replay(waste, user, "costguard", hibernate_after=600.0)
    assert r.hibernations == 0 and r.hibernations_refused >= 2
    assert r.variables_lost == 0 and r.held_seconds == pytest.approx(8 * H - 60, abs=1)


def test_the_invariants_catch_a_loss_and_a_leak(waste: ModuleType) -> None:
    none = waste.Result("none", rate_per_hour=3.6, held_seconds=H, spend=3.6,
                        kernels_spend=3.0, unattributed=0.6, busy_seconds=100.0)
    good = dataclasses.replace(none, name="costguard-defaults")
    assert waste.invariants({"none": none, "costguard-defaults": good}) == []
    lost = dataclasses.replace(good, variables_lost=3)
    assert any("lost 3 variables" in v for v in
               waste.invariants({"none": none, "costguard-defaults": lost}))
    leak = dataclasses.replace(good, kernels_spend=2.0)
    assert any("!= kernels" in v for v in
               waste.invariants({"none": none, "costguard-defaults": leak}))
