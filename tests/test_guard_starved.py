"""Guard rule `starved-gpu`: a busy kernel whose GPU waits (on data).

Unit tests drive the rule through `GuardEngine` with synthetic samples; the integration test runs
real kernels executing real code while a replay trace shows their GPUs.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from jupyter_client import BlockingKernelClient

from jupyter_costguard.guard import GuardConfig
from jupyter_costguard.guard.starved import StarvedGpuRule
from tests.support.guard_harness import InstanceHarness, gpu, kernel
from tests.support.rest import get_json, start_session
from tests.support.traces import write_trace
from tests.support.units import GiB

KIND = "starved-gpu"


def starved_rig(tmp_path: Path, **kw: Any) -> InstanceHarness:
    return InstanceHarness(tmp_path, lambda c: [StarvedGpuRule(c)], **kw)


def loading(util: float = 5.0, busy: bool = True, held: int = 10 * GiB) -> tuple[list, list]:
    """Kernel k0 (train.ipynb) holds GPU 0 at `util`; seven GPUs are free."""
    gpus = [gpu(0, util, held)] + [gpu(i, 0.0) for i in range(1, 8)]
    return gpus, [kernel("k0", "train.ipynb", {"GPU-0": held} if held else {}, busy=busy)]


def test_busy_kernel_on_an_idle_gpu_is_starved(tmp_path: Path):
    rig = starved_rig(tmp_path)
    gpus, kernels = loading()
    rig.run(100, gpus, kernels)
    assert rig.alert(KIND, "k0") is None, "not before 120 s of busy GPU time"
    rig.run(60, gpus, kernels)
    alert = rig.alert(KIND, "k0")
    assert alert is not None
    assert alert.severity == "info" and alert.kernel_id == "k0"
    assert alert.notebook == "train.ipynb" and alert.title == "GPU starved of data"
    assert [a["id"] for a in alert.actions] == ["open-panel", "snooze"]
    d = alert.details
    assert d["busy_seconds"] == 160 and d["waiting_seconds"] == 160
    assert d["waiting_share"] == 1.0 and d["gpus"] == ["GPU-0"]
    assert d["gpu_utilization_percent"] == 5.0
    # GPU 0 is one of 8: its part of the GPU rate, for the 160 s it waited
    gpu_rate = rig.pricing.gpu_rate_per_hour
    assert gpu_rate is not None
    assert d["waiting_cost"] == pytest.approx(gpu_rate / 8 * 160 / 3600, abs=0.005)
    assert d["waiting_cost_per_hour"] == pytest.approx(gpu_rate / 8, abs=0.005)
    assert d["currency"] == "USD"
    for words in ("train.ipynb", "waiting on data", "local disk", "DataLoader workers",
                  "pin_memory", "prefetch", "remote reads"):
        assert words in alert.message
    # the GPU's part of the rate for the 160 s it waited, as the message rounds it
    assert f"{d['waiting_cost']:.2f} USD" in alert.message


def test_busy_gpu_is_not_starved(tmp_path: Path):
    rig = starved_rig(tmp_path)
    gpus, kernels = loading(util=90.0)
    rig.run(600, gpus, kernels)
    assert rig.alert(KIND, "k0") is None


def test_cpu_only_busy_kernel_is_not_starved(tmp_path: Path):
    rig = starved_rig(tmp_path)
    gpus, kernels = loading(held=0)
    rig.run(600, gpus, kernels)
    assert rig.alert(KIND, "k0") is None


def test_idle_kernel_is_not_starved(tmp_path: Path):
    """Holding an idle GPU while doing nothing is the idle-kernel rule's business."""
    rig = starved_rig(tmp_path)
    gpus, kernels = loading(busy=False)
    rig.run(600, gpus, kernels)
    assert rig.alert(KIND, "k0") is None


def test_mostly_busy_gpu_is_not_starved(tmp_path: Path):
    """Waiting for 40% of the busy time is below the 50% share."""
    rig = starved_rig(tmp_path)
    idle, kernels = loading(util=5.0)
    busy, _ = loading(util=80.0)
    for _ in range(5):
        rig.run(40, idle, kernels)
        rig.run(60, busy, kernels)
    assert rig.alert(KIND, "k0") is None
    rig.run(300, idle, kernels)  # now 300 of 600 s waited
    assert rig.alert(KIND, "k0") is not None


def test_resolves_when_the_gpu_gets_fed(tmp_path: Path):
    rig = starved_rig(tmp_path)
    idle, kernels = loading()
    busy, _ = loading(util=95.0)
    rig.run(300, idle, kernels)
    first = rig.alert(KIND, "k0")
    assert first is not None
    rig.run(310, busy, kernels)  # 300 s waiting, 310 s working, in the 600 s window
    assert rig.alert(KIND, "k0") is None
    gone = rig.alerts.get(first.id)
    assert gone is not None and gone.resolved is not None


def test_resolves_when_the_kernel_is_gone(tmp_path: Path):
    rig = starved_rig(tmp_path)
    gpus, kernels = loading()
    rig.run(300, gpus, kernels)
    assert rig.alert(KIND, "k0") is not None
    rig.step(gpus, [])
    assert rig.alert(KIND, "k0") is None


def test_cost_follows_the_memory_split_of_a_shared_gpu(tmp_path: Path):
    rig = starved_rig(tmp_path)
    gpus = [gpu(0, 5.0, 8 * GiB)] + [gpu(i, 0.0) for i in range(1, 8)]
    kernels = [kernel("a", "a.ipynb", {"GPU-0": 6 * GiB}, busy=True),
               kernel("b", "b.ipynb", {"GPU-0": 2 * GiB}, busy=True)]
    rig.run(360, gpus, kernels)
    a, b = rig.alert(KIND, "a"), rig.alert(KIND, "b")
    assert a is not None and b is not None
    gpu_rate = rig.pricing.gpu_rate_per_hour
    assert gpu_rate is not None
    whole = gpu_rate / 8 * 360 / 3600
    assert a.details["waiting_cost"] == pytest.approx(whole * 0.75, abs=0.005)
    assert b.details["waiting_cost"] == pytest.approx(whole * 0.25, abs=0.005)


def test_unpriced_server_names_no_cost(tmp_path: Path):
    rig = starved_rig(tmp_path, instance_type=None)
    gpus, kernels = loading()
    rig.run(300, gpus, kernels)
    alert = rig.alert(KIND, "k0")
    assert alert is not None
    assert alert.details["waiting_cost"] is None and "cost" not in alert.message.split(".")[1]


def test_thresholds_come_from_the_config(tmp_path: Path):
    config = GuardConfig(starved_window_seconds=60, starved_min_busy_seconds=20,
                         starved_max_utilization_percent=50, starved_min_busy_share=0.9)
    rig = starved_rig(tmp_path, config=config)
    gpus, kernels = loading(util=40.0)  # below 50%
    rig.run(30, gpus, kernels)
    alert = rig.alert(KIND, "k0")
    assert alert is not None and alert.details["window_seconds"] == 60


# --- real kernels on a real server ---------------------------------------------------------


@pytest.fixture
def costguard_config(tmp_path: Path) -> dict[str, Any]:
    """Kernel 0 holds GPU 0 at 5%, kernel 1 holds GPU 1 at 90%, kernel 2 holds nothing."""
    frame = {"t": 0, "gpus": [
        {"utilization_percent": 5, "power_watts": 70,
         "processes": [{"kernel": 0, "used_memory_bytes": 10 * GiB}]},
        {"utilization_percent": 90, "power_watts": 300,
         "processes": [{"kernel": 1, "used_memory_bytes": 10 * GiB}]},
    ] + [{"utilization_percent": 0, "processes": []} for _ in range(6)]}
    trace = write_trace(tmp_path / "trace.json", [frame], gpus=8, instance_type="p4d.24xlarge")
    return {
        "db_path": str(tmp_path / "ledger.sqlite"),
        "sample_interval": 0.25,
        "replay_trace": str(trace),
        "replay_mode": "always",
        "Guard.starved_window_seconds": 4.0,
    }


async def test_real_kernel_waiting_on_its_gpu_is_flagged(jp_fetch: Any, jp_serverapp: Any):
    service = jp_serverapp.web_app.settings["costguard_service"]
    guard = jp_serverapp.web_app.settings["costguard_guard"]
    rule = next(r for r in guard.rules if isinstance(r, StarvedGpuRule))
    assert rule.config.starved_window_seconds == 4.0  # the trait reached the rule
    # starved_min_busy_seconds has no server option: shrink it to fit the 4 s window
    rule.config = rule.config.replaced(starved_min_busy_seconds=1.5)

    kids = []
    for path in ("loader.ipynb", "trainer.ipynb", "pandas.ipynb"):  # trace slots 0, 1, 2
        session = await start_session(jp_fetch, path)
        kids.append(session["kernel"]["id"])

        async def started(kid: str = kids[-1]) -> bool:
            doc = await get_json(jp_fetch, "costguard", "api", "kernels")
            return any(k["kernel_id"] == kid and k["pids"] for k in doc["kernels"])

        for _ in range(600):
            if await started():
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"kernel for {path} never started")

    async def state(kid: str) -> str:
        doc = await get_json(jp_fetch, "costguard", "api", "kernels")
        return str(next(k for k in doc["kernels"] if k["kernel_id"] == kid)["execution_state"])

    clients = []
    try:
        for kid in kids:  # every kernel runs a long cell: busy
            km = jp_serverapp.kernel_manager.get_kernel(kid)
            client = BlockingKernelClient()
            client.load_connection_info(km.get_connection_info())
            client.start_channels(hb=False)
            clients.append(client)
            # the server learns execution states from the kernel's status messages; until
            # its subscription is up a fresh kernel reads "starting": run trivial cells
            for _ in range(50):
                client.execute_interactive("pass", timeout=30)
                await asyncio.sleep(0.1)
                if await state(kid) == "idle":
                    break
            assert await state(kid) == "idle"
            client.execute("import time; time.sleep(40)")

        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while [await state(kid) for kid in kids] != ["busy"] * 3:
            assert loop.time() < deadline, "the kernels never read busy"
            await asyncio.sleep(0.1)
        alerts: list[dict[str, Any]] = []
        while loop.time() < deadline:
            doc = await get_json(jp_fetch, "costguard", "api", "alerts")
            alerts = [a for a in doc["alerts"] if a["kind"] == KIND]
            if alerts:
                break
            await asyncio.sleep(0.2)
        assert alerts, "no starved-gpu alert within 60 s"
        # the others are busy for more than a full window too, and still have no alert
        await asyncio.sleep(4.5)
        doc = await get_json(jp_fetch, "costguard", "api", "alerts")
        alerts = [a for a in doc["alerts"] if a["kind"] == KIND]
        assert [a["key"] for a in alerts] == [kids[0]]
        alert = alerts[0]
        assert alert["kernel_id"] == kids[0] and alert["notebook"] == "loader.ipynb"
        assert alert["severity"] == "info" and alert["source"] == "guard"
        d = alert["details"]
        assert d["waiting_share"] >= 0.5 and d["busy_seconds"] >= 1
        assert d["gpus"] == ["GPU-test-0"] and d["gpu_utilization_percent"] == 5.0
        assert d["waiting_cost"] >= 0 and d["waiting_cost_per_hour"] == pytest.approx(
            service.published.pricing.gpu_rate_per_hour / 8, abs=0.01)
        assert [await state(kid) for kid in kids] == ["busy"] * 3
    finally:
        for kid in kids:
            await jp_serverapp.kernel_manager.interrupt_kernel(kid)
        for client in clients:
            client.stop_channels()
