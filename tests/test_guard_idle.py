"""Guard rule `idle-gpu-kernel`: synthetic samples through the real Guard, ledger and alert
store (fast, simulated time), then a real server whose real kernel is culled."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from jupyter_costguard.guard import Act
from jupyter_costguard.guard.idle import IdleKernelRule, clock_time
from tests.support.guard_harness import T0, K, SpendHarness
from tests.support.openapi_check import validate
from tests.support.rest import get_json, start_session
from tests.support.units import GiB

KIND = "idle-gpu-kernel"


def idle_harness(tmp_path: Path, **config: Any) -> SpendHarness:
    """The rule's warning and cull; hibernation (on by default since issue 44) off unless a
    test asks: `test_guard_idle_hibernate.py` tests it and its default."""
    return SpendHarness(tmp_path, lambda c: [IdleKernelRule(c)],
                        **{"hibernate_idle_after_seconds": None, **config})


# --- the rule, in simulated time -----------------------------------------------------------


def test_fires_after_the_threshold_and_not_before(tmp_path: Path):
    h = idle_harness(tmp_path, idle_kernel_seconds=900)
    k = K("k1", "explore.ipynb", last_activity=T0)
    h.run(T0 + 890, 10, [k])
    assert h.alert(KIND, "k1") is None
    h.step(10, [k])  # idle for exactly 900 s
    a = h.alert(KIND, "k1")
    assert a is not None and a.severity == "warning"
    assert a.notebook == "explore.ipynb" and a.kernel_id == "k1"
    assert "explore.ipynb" in a.title
    assert "15 min" in a.message and "4.0 GiB on GPU 0 (NVIDIA A100-SXM4-80GB)" in a.message
    # the money spent idle: this kernel's waste, the same the ledger holds for it
    waste = h.ledger.kernels[("k1", "explore.ipynb")].waste
    assert waste > 0
    assert a.details["idle_waste"] == pytest.approx(waste)
    assert f"{waste:.2f} USD" in a.message and "while idle" in a.message
    assert a.details["gpus"] == [{"uuid": "GPU-a", "index": 0,
                                  "name": "NVIDIA A100-SXM4-80GB", "memory_bytes": 4 * GiB}]
    assert a.details["gpu_memory_bytes"] == 4 * GiB
    assert a.details["idle_seconds"] == 900
    assert a.details["cull"]["enabled"] is False
    assert [x["id"] for x in a.actions] == ["hibernate", "shutdown-kernel", "restart-kernel",
                                            "snooze"]
    assert all(x["args"] == {"kernel_id": "k1"} for x in a.actions[:3])
    assert a.actions[0]["label"] == "Hibernate: free 1 GPU, keep your variables"
    assert h.acts == []


def test_no_alert_about_a_kernel_whose_gpu_activity_is_unknown(tmp_path: Path):
    """A MIG instance reports no utilisation: the kernel's GPU may be working where nobody
    can see, so the rule does not call it idle (nor cull it), and the ledger books its GPU
    cost as spend, not waste."""
    h = idle_harness(tmp_path, idle_kernel_seconds=600, cull_idle_kernels=True,
                     cull_after_seconds=900, cull_warning_seconds=120)
    h.gpu_util = None
    k = K("k1", "mig.ipynb", last_activity=T0)
    assert h.run(T0 + 3600, 10, [k]) == []
    assert h.alert(KIND, "k1") is None
    totals = h.ledger.kernels[("k1", "mig.ipynb")]
    assert totals.spend > 0 and totals.waste == 0
    # once its GPU reports utilisation (idle), the same kernel is judged as any other
    h.gpu_util = 0.0
    h.step(10, [k])
    assert h.alert(KIND, "k1") is not None


def test_a_busy_gpu_is_never_idle_whatever_the_kernels_state(tmp_path: Path):
    """Issue 44: a kernel back at its prompt whose GPU works (a training loop in a thread or
    a child process) is idle by no measure: no warning, no cull, no hibernation, and its GPU
    cost is not waste. Once the GPU stops, the idle clock starts from then, not from the
    kernel's last activity hours before."""
    h = idle_harness(tmp_path, idle_kernel_seconds=600, cull_idle_kernels=True,
                     cull_after_seconds=900, cull_warning_seconds=120,
                     hibernate_idle_after_seconds=700)
    h.gpu_util = 90.0
    k = K("k1", "train.ipynb", state="idle", last_activity=T0)
    assert h.run(T0 + 4 * 3600, 10, [k]) == []
    assert h.alert(KIND, "k1") is None
    assert h.ledger.kernels[("k1", "train.ipynb")].waste == 0
    stopped = h.now
    h.gpu_util = 0.0
    assert h.run(stopped + 590, 10, [k]) == []
    assert h.alert(KIND, "k1") is None, "idle time counts from the GPU's last work"
    h.run(stopped + 620, 10, [k])
    a = h.alert(KIND, "k1")
    assert a is not None and a.details["idle_seconds"] < 700
    acts = h.run(stopped + 3600, 10, [k])
    assert [x.action for x in acts] == ["hibernate-kernel"]


def test_idle_waste_counts_from_when_the_kernel_went_idle(tmp_path: Path):
    h = idle_harness(tmp_path, idle_kernel_seconds=600)
    k = K("k1", "a.ipynb", state="busy", last_activity=T0)
    h.run(T0 + 300, 10, [k])  # busy: GPU cost, no waste
    assert h.ledger.kernels[("k1", "a.ipynb")].waste == 0
    k.state, k.last_activity = "idle", h.now
    before = h.ledger.kernels[("k1", "a.ipynb")].spend
    h.run(T0 + 300 + 600, 10, [k])
    a = h.alert(KIND, "k1")
    assert a is not None
    spent_idle = h.ledger.kernels[("k1", "a.ipynb")].spend - before
    assert a.details["idle_waste"] == pytest.approx(spent_idle)
    assert a.details["idle_waste_since"] == T0 + 300


def test_only_kernels_holding_a_gpu(tmp_path: Path):
    h = idle_harness(tmp_path, idle_kernel_seconds=60, cull_idle_kernels=True,
                     cull_after_seconds=120, cull_warning_seconds=30)
    cpu_only = K("cpu", "cpu.ipynb", gpu={})
    holder = K("gpu", "gpu.ipynb", gpu={"GPU-b": 2 * GiB})
    acts = h.run(T0 + 3600, 30, [cpu_only, holder])
    assert h.alert(KIND, "cpu") is None
    assert [a.kernel_id for a in acts] == ["gpu"]
    a = h.alert(KIND, "gpu")
    assert a is not None and "GPU 1" in a.message


def test_any_state_but_busy_is_idle(tmp_path: Path):
    """A kernel started without a client stays "starting"."""
    h = idle_harness(tmp_path, idle_kernel_seconds=60)
    k = K("k1", "s.ipynb", state="starting")
    h.run(T0 + 60, 10, [k])
    a = h.alert(KIND, "k1")
    assert a is not None and a.details["execution_state"] == "starting"


def test_resolves_when_busy_and_a_new_idle_period_starts_over(tmp_path: Path):
    h = idle_harness(tmp_path, idle_kernel_seconds=300)
    k = K("k1", "a.ipynb")
    h.run(T0 + 400, 10, [k])
    first = h.alert(KIND, "k1")
    assert first is not None
    k.state = "busy"
    h.step(10, [k])
    assert h.alert(KIND, "k1") is None
    stored = h.alerts.get(first.id)
    assert stored is not None and stored.resolved is not None
    k.state, k.last_activity = "idle", h.now
    h.run(h.now + 290, 10, [k])
    assert h.alert(KIND, "k1") is None
    h.run(h.now + 10, 10, [k])
    second = h.alert(KIND, "k1")
    assert second is not None and second.id != first.id
    assert second.details["idle_seconds"] == 300


def test_activity_between_samples_resolves_too(tmp_path: Path):
    """A cell that ran between two samples is never seen busy: last_activity moves."""
    h = idle_harness(tmp_path, idle_kernel_seconds=300)
    k = K("k1", "a.ipynb")
    h.run(T0 + 400, 10, [k])
    assert h.alert(KIND, "k1") is not None
    k.last_activity = h.now + 5
    h.step(10, [k])
    assert h.alert(KIND, "k1") is None


def test_a_kernel_that_goes_away_resolves(tmp_path: Path):
    h = idle_harness(tmp_path, idle_kernel_seconds=60)
    h.run(T0 + 60, 10, [K("k1", "a.ipynb")])
    assert h.alert(KIND, "k1") is not None
    h.step(10, [])
    assert h.alert(KIND, "k1") is None


def test_no_cull_unless_opted_in(tmp_path: Path):
    h = idle_harness(tmp_path, idle_kernel_seconds=900, cull_after_seconds=3600,
                     cull_warning_seconds=600)
    acts = h.run(T0 + 5 * 3600, 60, [K("k1", "a.ipynb")])
    assert acts == [] and h.acts == []
    a = h.alert(KIND, "k1")
    assert a is not None and a.severity == "warning"
    assert "shut down at" not in a.message


def test_cull_is_warned_first_and_requested_once(tmp_path: Path):
    h = idle_harness(tmp_path, idle_kernel_seconds=900, cull_idle_kernels=True,
                     cull_after_seconds=3600, cull_warning_seconds=600)
    k = K("k1", "a.ipynb")
    h.run(T0 + 900, 60, [k])
    a = h.alert(KIND, "k1")
    assert a is not None and a.severity == "warning"
    # with culling on, even the first warning says when
    assert f"will be shut down at {clock_time(T0 + 3600)} unless used" in a.message

    assert h.run(T0 + 2940, 60, [k]) == []
    a = h.alert(KIND, "k1")
    assert a is not None and a.severity == "warning"
    h.step(60, [k])  # idle 3000 s: 600 s before the cull
    a = h.alert(KIND, "k1")
    assert a is not None and a.severity == "critical"
    assert f"will be shut down at {clock_time(T0 + 3600)} unless used" in a.message
    assert a.details["cull"]["warned_at"] == T0 + 3000
    assert a.details["cull"]["at"] == T0 + 3600

    assert h.run(T0 + 3540, 60, [k]) == []
    acts = h.step(60, [k])
    assert acts == [Act(action="shutdown-kernel", reason=acts[0].reason, kernel_id="k1")]
    assert "a.ipynb" in acts[0].reason
    a = h.alert(KIND, "k1")
    assert a is not None and a.severity == "critical" and "being shut down" in a.message
    # the kernel lingers a little while it stops: asked once, not every sample
    assert h.run(T0 + 3900, 10, [k]) == []
    assert [x.action for x in h.acts] == ["shutdown-kernel"]
    h.step(10, [])
    assert h.alert(KIND, "k1") is None


def test_a_late_warning_postpones_the_cull(tmp_path: Path):
    """The server started (or the rule first saw the kernel) after the kernel had been idle
    past the cull time: warn now, cull only once the warning has been up long enough."""
    h = idle_harness(tmp_path, idle_kernel_seconds=900, cull_idle_kernels=True,
                     cull_after_seconds=3600, cull_warning_seconds=600)
    k = K("k1", "a.ipynb", last_activity=T0 - 7200)
    assert h.step(2, [k]) == []
    a = h.alert(KIND, "k1")
    assert a is not None and a.severity == "critical"
    assert f"will be shut down at {clock_time(T0 + 2 + 600)}" in a.message
    # counted only from when it was first seen idle
    assert "since the server started watching it" in a.message
    assert a.details["idle_waste_since"] == T0
    assert h.run(T0 + 600, 10, [k]) == []
    assert [x.kernel_id for x in h.step(2, [k])] == ["k1"]


def test_use_cancels_a_pending_cull(tmp_path: Path):
    h = idle_harness(tmp_path, idle_kernel_seconds=900, cull_idle_kernels=True,
                     cull_after_seconds=3600, cull_warning_seconds=600)
    k = K("k1", "a.ipynb")
    h.run(T0 + 3300, 60, [k])
    a = h.alert(KIND, "k1")
    assert a is not None and a.severity == "critical"
    k.state = "busy"
    h.step(60, [k])
    assert h.alert(KIND, "k1") is None
    k.state, k.last_activity = "idle", h.now
    start = h.now
    # a fresh idle period: no cull before its own full hour (and its own warning)
    assert h.run(start + 3599, 60, [k]) == []
    a = h.alert(KIND, "k1")
    assert a is not None and a.details["cull"]["warned_at"] == pytest.approx(start + 3000,
                                                                             abs=60)
    assert [x.kernel_id for x in h.run(start + 3700, 60, [k])] == ["k1"]


def test_dismissing_does_not_cancel_a_cull(tmp_path: Path):
    h = idle_harness(tmp_path, idle_kernel_seconds=900, cull_idle_kernels=True,
                     cull_after_seconds=3600, cull_warning_seconds=600)
    k = K("k1", "a.ipynb")
    h.run(T0 + 1000, 60, [k])
    a = h.alert(KIND, "k1")
    assert a is not None
    h.alerts.dismiss(a.id)
    assert [x.kernel_id for x in h.run(T0 + 3700, 60, [k])] == ["k1"]


def test_no_cull_while_the_kernel_restarts(tmp_path: Path):
    h = idle_harness(tmp_path, idle_kernel_seconds=60, cull_idle_kernels=True,
                     cull_after_seconds=120, cull_warning_seconds=30)
    k = K("k1", "a.ipynb", state="restarting")
    assert h.run(T0 + 600, 10, [k]) == []
    k.state = "idle"
    assert [x.kernel_id for x in h.step(10, [k])] == ["k1"]


def test_kernel_without_a_notebook_is_named_by_id(tmp_path: Path):
    h = idle_harness(tmp_path, idle_kernel_seconds=60)
    h.run(T0 + 60, 10, [K("0123456789abcdef", None)])
    a = h.alert(KIND, "0123456789abcdef")
    assert a is not None and a.notebook is None and "kernel 01234567" in a.message


# --- a real server, a real kernel ----------------------------------------------------------


@pytest.fixture
def cull() -> bool:
    return True


@pytest.fixture
def costguard_config(costguard_config: dict[str, Any], cull: bool) -> dict[str, Any]:
    return {**costguard_config, "Guard.idle_kernel_seconds": 1.0, "Guard.cull_idle_kernels": cull,
            "Guard.cull_after_seconds": 3.0, "Guard.cull_warning_seconds": 1.5}


async def _alerts(jp_fetch: Any) -> list[dict[str, Any]]:
    doc = await get_json(jp_fetch, "costguard", "api", "alerts", params={"include": "all"})
    validate("/alerts", 200, doc)
    return [a for a in doc["alerts"] if a["kind"] == KIND]


async def _kernel_ids(jp_fetch: Any) -> set[str]:
    return {k["id"] for k in await get_json(jp_fetch, "api", "kernels")}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("cull", [True])
async def test_idle_gpu_kernel_is_warned_then_culled(jp_fetch: Any, cull: bool):
    session = await start_session(jp_fetch, "idle.ipynb")
    kid = session["kernel"]["id"]
    seen: dict[str, dict[str, Any]] = {}  # severity -> the alert as first seen so
    deadline = time.monotonic() + 90
    while kid in await _kernel_ids(jp_fetch):
        assert time.monotonic() < deadline, f"kernel not culled; alerts seen: {seen}"
        for a in await _alerts(jp_fetch):
            if a["key"] == kid and a["resolved"] is None:
                seen.setdefault(a["severity"], a)
        await asyncio.sleep(0.1)
    # it was announced, as a critical alert naming the time, before it went
    assert "critical" in seen, seen
    warning = seen["critical"]
    assert "will be shut down at" in warning["message"] and "unless used" in warning["message"]
    assert warning["notebook"] == "idle.ipynb" and warning["kernel_id"] == kid
    assert warning["details"]["gpus"][0]["uuid"] == "GPU-test-0"
    assert warning["details"]["gpu_memory_bytes"] == 4 * GiB
    assert warning["details"]["cull"]["warned_at"] is not None
    # and once the kernel is gone the alert is resolved
    deadline = time.monotonic() + 30
    while True:
        mine = [a for a in await _alerts(jp_fetch) if a["key"] == kid]
        if mine and all(a["resolved"] is not None for a in mine):
            break
        assert time.monotonic() < deadline, mine
        await asyncio.sleep(0.1)
    assert len(mine) == 1  # one alert, escalated in place


@pytest.mark.timeout(120)
@pytest.mark.parametrize("cull", [False])
async def test_idle_gpu_kernel_survives_without_cull(jp_fetch: Any, cull: bool):
    session = await start_session(jp_fetch, "kept.ipynb")
    kid = session["kernel"]["id"]
    deadline = time.monotonic() + 60
    alert: dict[str, Any] | None = None
    while True:  # until the alert itself says the kernel is idle past the cull time
        alert = next((a for a in await _alerts(jp_fetch)
                      if a["key"] == kid and a["resolved"] is None), None)
        if alert is not None and alert["details"]["idle_seconds"] >= 4.0:
            break
        assert time.monotonic() < deadline, alert
        await asyncio.sleep(0.1)
    assert alert["severity"] == "warning" and "shut down at" not in alert["message"]
    assert json.dumps(alert["actions"])  # serialisable as sent
    assert kid in await _kernel_ids(jp_fetch)


@pytest.mark.parametrize(("state", "idle"), [("idle", 100.0), ("starting", 100.0),
                                             ("busy", 0.0)])
def test_the_api_counts_idle_time_as_the_idle_rule_does(tmp_path, state, idle):
    """A kernel started without a client stays "starting": idle to the rule, and so to the
    kernels document (it used to say 0)."""
    from jupyter_costguard.cost.catalog import Catalog
    from jupyter_costguard.cost.ledger import Ledger
    from jupyter_costguard.cost.pricing import resolve_pricing
    from jupyter_costguard.cost.views import build_views
    from jupyter_costguard.sampling.records import (
        GpuReading,
        HostSample,
        KernelInfo,
        KernelSample,
        Sample,
    )

    now = 1_700_000_000.0
    info = KernelInfo(kernel_id="k", name="python3", pid=1, execution_state=state,
                      last_activity=now - 100.0, connections=0, path="a.ipynb")
    sample = Sample(time=now, interval=2.0, gpu=GpuReading(status="no-gpu", gpus=()),
                    host=HostSample(cpu_count=4, cpu_percent=0.0, memory_total_bytes=1 << 34,
                                    memory_used_bytes=1 << 30),
                    kernels=(KernelSample(info=info, pids=(1,), cpu_seconds=0.0, rss_bytes=0,
                                          gpu_memory_bytes={}),), simulated=False)
    pricing = resolve_pricing(Catalog.load(), instance_type=None, environ={}, gpu=None,
                              host=None, hourly_rate=1.0)
    views = build_views(sample, None, pricing, Ledger(tmp_path / "l.sqlite", now=now), 2.0, 5.0)
    assert views.data["kernels"]["kernels"][0]["idle_seconds"] == idle
