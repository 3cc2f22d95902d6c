"""Guard rule `training-sized-interactive` and `Catalog.cheapest_fitting`.

Unit tests drive the rule through `GuardEngine` with synthetic samples; the integration tests run a
real server with a real kernel while a replay trace shows its GPU use.
"""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

import pytest

from jupyter_costguard.cost.catalog import Catalog, InstanceType
from jupyter_costguard.guard import GuardConfig
from jupyter_costguard.guard.training import HEADROOM, TrainingSizedRule
from jupyter_costguard.sampling.records import (
    GpuSample,
    KernelSample,
)
from tests.support.guard_harness import A100_40, InstanceHarness, gpu, kernel
from tests.support.rest import get_json, start_session
from tests.support.traces import write_trace
from tests.support.units import GiB

KIND = "training-sized-interactive"
T4 = "Tesla T4"


# --- synthetic samples ---------------------------------------------------------------------


#: the shipped catalog's p4d.24xlarge price (read, so a catalog refresh does not break tests)
P4D_RATE = Catalog.load().get("p4d.24xlarge", "aws").on_demand_per_hour  # type: ignore[union-attr]

def exploring(util: float | None = 2.0, used: int = 6 * GiB, gpus: int = 8,
              name: str = A100_40, total: int = 40 * GiB) -> tuple[list[GpuSample],
                                                              list[KernelSample]]:
    """Kernel k0 (explore.ipynb) holds `used` on GPU 0 at `util`; the other GPUs are free."""
    devices = [gpu(0, util, used, total, name)] + [gpu(i, 0.0, 0, total, name)
                                                    for i in range(1, gpus)]
    return devices, [kernel("k0", "explore.ipynb", {"GPU-0": used})]


def training_rig(tmp_path: Path, **kw: Any) -> InstanceHarness:
    return InstanceHarness(tmp_path, lambda c: [TrainingSizedRule(c)], **kw)


def cheapest_by_hand(catalog: Catalog, mem_gib: float, gpus: int, vcpus: float,
                     ram_gib: float, provider: str | None = None) -> InstanceType:
    """The brute-force answer `cheapest_fitting` must agree with."""
    fits = [r for r in catalog
            if (provider is None or r.provider == provider)
            and ((gpus == 0 and mem_gib == 0) or (r.gpu_count >= max(gpus, 1)
                                                and (r.gpu_memory_gib or 0) >= mem_gib))
            and r.vcpus >= vcpus and r.memory_gib >= ram_gib]
    return min(fits, key=lambda r: r.on_demand_per_hour)


# --- Catalog.cheapest_fitting --------------------------------------------------------------


def test_cheapest_fitting_picks_the_cheapest_row_that_fits():
    catalog = Catalog.load()
    row = catalog.cheapest_fitting(6.6, 1, 3, 13.2, provider="aws")
    assert row is not None and row.name == "aws/g4dn.xlarge"  # T4 16 GB at USD 0.526
    assert row == cheapest_by_hand(catalog, 6.6, 1, 3, 13.2, "aws")
    # 22 GiB no longer fits a T4: the cheapest 24 GB GPU (L4 beats A10G)
    row = catalog.cheapest_fitting(22.0, 1, 4, 16.0, provider="AWS")
    assert row is not None and row.instance_type == "g6.xlarge"
    assert row.on_demand_per_hour < catalog.get("g5.xlarge", "aws").on_demand_per_hour
    # more vCPUs or RAM than the small sizes have
    row = catalog.cheapest_fitting(6.0, 1, 8, 30.0, provider="aws")
    assert row is not None and row.instance_type == "g4dn.2xlarge"
    # two GPUs of 33 GiB: 4x L40S is the cheapest AWS row with two such GPUs
    row = catalog.cheapest_fitting(33.0, 2, 8, 32.0, provider="aws")
    assert row is not None and row.instance_type == "g6e.12xlarge"
    assert row == cheapest_by_hand(catalog, 33.0, 2, 8, 32.0, "aws")


def test_cheapest_fitting_without_gpu_memory_allows_cpu_instances():
    catalog = Catalog.load()
    row = catalog.cheapest_fitting(0, 0, 3, 13.2, provider="aws")
    assert row is not None and not row.is_gpu and row.instance_type == "m5.xlarge"
    row = catalog.cheapest_fitting(0, 0, 8, 60.0, provider="aws")
    assert row is not None and row.instance_type == "r5.2xlarge"


def test_cheapest_fitting_filters_and_edge_cases():
    catalog = Catalog.load()
    assert catalog.cheapest_fitting(200.0, 1, 1, 1.0) is None  # no GPU that large
    assert catalog.cheapest_fitting(6.0, 1, 1, 1.0, provider="nowhere") is None
    assert catalog.cheapest_fitting(6.0, 1, 1, 1.0, currency="EUR") is None
    anywhere = catalog.cheapest_fitting(6.0, 1, 1, 1.0)
    assert anywhere is not None
    assert anywhere.on_demand_per_hour == min(
        r.on_demand_per_hour for r in catalog if r.is_gpu and (r.gpu_memory_gib or 0) >= 6)
    # spot: rows without a spot price are skipped, the spot price decides
    spot = catalog.cheapest_fitting(6.0, 1, 1, 1.0, provider="aws", market="spot")
    assert spot is not None and spot.spot_per_hour is not None
    assert spot.spot_per_hour == min(r.spot_per_hour for r in catalog
                                     if r.provider == "aws" and r.is_gpu
                                     and r.spot_per_hour is not None)
    with pytest.raises(ValueError):
        catalog.cheapest_fitting(1.0, 1, 1, 1.0, market="reserved")


def test_cheapest_fitting_is_stable_on_ties():
    def row(name: str, gpus: int) -> InstanceType:
        return InstanceType("x", name, "G", gpus, 24.0, 8, 32.0, "", "USD", 1.0, None, None,
                            "https://example.com", "2025-01-01")

    catalog = Catalog([row("b", 2), row("c", 1), row("a", 1)])
    found = catalog.cheapest_fitting(10.0, 1, 1, 1.0)
    assert found is not None and found.instance_type == "a"  # fewer GPUs, then the name


# --- the rule ------------------------------------------------------------------------------


def test_exploration_on_p4d_warns_with_the_cheapest_fitting_instance(tmp_path: Path):
    rig = training_rig(tmp_path)
    gpus, kernels = exploring()
    rig.run(1800, gpus, kernels)
    alert = rig.alert(KIND, "instance")
    assert alert is not None and alert.severity == "warning"
    assert alert.notebook == "explore.ipynb"
    assert alert.title == "Training-sized instance used interactively"
    assert [a["id"] for a in alert.actions] == ["offload", "open-panel", "snooze"]
    assert alert.actions[0]["label"] == "Offload heavy cells"
    d = alert.details
    assert d["instance_type"] == "p4d.24xlarge" and d["rate_per_hour"] == pytest.approx(P4D_RATE)
    assert d["currency"] == "USD" and d["window_seconds"] == 1800
    assert d["peak_gpu_memory_bytes"] == 6 * GiB and d["gpus_held"] == 1
    assert d["peak_cpu_cores"] == pytest.approx(2.88)  # 3% of 96
    assert d["peak_memory_bytes"] == 12 * GiB
    # 8 GPUs, one at 2%: 99.75% of the GPU capacity unused (whole percent, rounded down)
    assert d["idle_share"] == pytest.approx(0.99)
    gpu_rate = rig.pricing.gpu_rate_per_hour
    assert gpu_rate is not None
    assert d["waste_per_hour"] == pytest.approx(round(gpu_rate * d["idle_share"], 2))
    # 6 GiB (+10%) on one GPU, 3 cores, 13.2 GiB RAM: the cheapest AWS row that fits
    expected = cheapest_by_hand(rig.catalog, 6 * HEADROOM, 1, 3, 12 * HEADROOM, "aws")
    assert expected.instance_type == "g4dn.xlarge"
    s = d["suggestion"]
    assert s == {"provider": "aws", "instance_type": "g4dn.xlarge", "rate_per_hour": 0.526,
                 "gpu_model": T4, "gpu_count": 1,
                 "saving_per_hour": pytest.approx(P4D_RATE - 0.526, abs=0.005)}
    # the pop-up shows 140 characters of "title (simulated)\nmessage": the point comes first
    shown = f"{alert.title} (simulated)\n{alert.message}"[:140]
    assert "g4dn.xlarge" in shown and "99% idle" in shown
    assert f"{d['waste_per_hour']:.2f} USD/h" in shown
    assert "p4d.24xlarge" in alert.message and "6.0 GiB" in alert.message


def test_suggestion_follows_the_peak_gpu_memory(tmp_path: Path):
    rig = training_rig(tmp_path)
    gpus, kernels = exploring(used=20 * GiB)
    rig.run(1000, gpus, kernels)
    alert = rig.alert(KIND, "instance")
    assert alert is not None
    assert alert.details["suggestion"]["instance_type"] == "g6.xlarge"  # 24 GB L4 < A10G


def test_two_gpus_held_need_two_gpus(tmp_path: Path):
    rig = training_rig(tmp_path)
    gpus = [gpu(0, 3.0, 30 * GiB), gpu(1, 1.0, 30 * GiB)] + [gpu(i, 0.0) for i in range(2, 8)]
    kernels = [kernel("k0", "a.ipynb", {"GPU-0": 30 * GiB}),
               kernel("k1", "b.ipynb", {"GPU-1": 30 * GiB})]
    rig.run(1000, gpus, kernels, cpu_percent=10.0)
    alert = rig.alert(KIND, "instance")
    assert alert is not None
    d = alert.details
    assert d["gpus_held"] == 2 and d["peak_cpu_cores"] == pytest.approx(9.6)
    assert d["suggestion"]["instance_type"] == cheapest_by_hand(
        rig.catalog, 30 * HEADROOM, 2, 10, 12 * HEADROOM, "aws").instance_type
    assert d["suggestion"]["gpu_count"] >= 2
    assert alert.notebook in ("a.ipynb", "b.ipynb")


def test_busy_gpus_are_not_interactive(tmp_path: Path):
    rig = training_rig(tmp_path)
    gpus, kernels = exploring(util=90.0)
    rig.run(1800, gpus, kernels)
    assert rig.alert(KIND, "instance") is None


def test_one_gpu_training_on_a_big_box_is_not_interactive(tmp_path: Path):
    """Only the GPUs kernels hold are judged: 90% on the one held GPU is busy."""
    rig = training_rig(tmp_path)
    gpus, kernels = exploring(util=90.0, used=30 * GiB)
    rig.run(1800, gpus, kernels)
    assert rig.alert(KIND, "instance") is None


def test_small_instance_is_not_training_sized(tmp_path: Path):
    rig = training_rig(tmp_path, instance_type="g4dn.xlarge")
    gpus, kernels = exploring(gpus=1, name=T4, total=16 * GiB)
    rig.run(1800, gpus, kernels)
    assert rig.alert(KIND, "instance") is None


def test_nothing_before_the_window_is_covered(tmp_path: Path):
    rig = training_rig(tmp_path)  # 1800 s window, speaks at 50% coverage
    gpus, kernels = exploring()
    rig.run(880, gpus, kernels)
    assert rig.alert(KIND, "instance") is None
    rig.run(30, gpus, kernels)
    assert rig.alert(KIND, "instance") is not None


def test_nothing_while_no_kernel_holds_a_gpu(tmp_path: Path):
    rig = training_rig(tmp_path)
    gpus, _ = exploring(used=0)
    rig.run(1800, gpus, [kernel("k0", "explore.ipynb")])
    assert rig.alert(KIND, "instance") is None


def test_resolves_when_utilisation_rises(tmp_path: Path):
    rig = training_rig(tmp_path, config=GuardConfig(interactive_window_seconds=600))
    gpus, kernels = exploring()
    rig.run(600, gpus, kernels)
    first = rig.alert(KIND, "instance")
    assert first is not None
    busy, _ = exploring(util=90.0)
    rig.run(60, busy, kernels)  # (60×90 + 540×2)/600 ≈ 11%: still interactive
    assert rig.alert(KIND, "instance") is not None
    rig.run(120, busy, kernels)  # ≈ 29%: working
    assert rig.alert(KIND, "instance") is None
    resolved = rig.alerts.get(first.id)
    assert resolved is not None and resolved.resolved is not None


def test_no_gpu_memory_used_suggests_a_cpu_instance(tmp_path: Path):
    """A kernel that holds a GPU context but no memory (e.g. attributed by mapping libcuda
    with nothing to share) needs no GPU at all."""
    rig = training_rig(tmp_path)
    gpus = [gpu(i, 0.0) for i in range(8)]
    rig.run(1000, gpus, [kernel("k0", "explore.ipynb", {"GPU-0": 0})])
    alert = rig.alert(KIND, "instance")
    assert alert is not None
    s = alert.details["suggestion"]
    assert s["instance_type"] == "m5.xlarge" and s["gpu_count"] == 0 and s["gpu_model"] is None


def test_any_provider_when_not_restricted(tmp_path: Path):
    rig = training_rig(tmp_path, config=GuardConfig(suggest_same_provider=False))
    gpus, kernels = exploring()
    rig.run(1000, gpus, kernels)
    alert = rig.alert(KIND, "instance")
    assert alert is not None
    best = cheapest_by_hand(rig.catalog, 6 * HEADROOM, 1, 3, 12 * HEADROOM)
    s = alert.details["suggestion"]
    assert (s["provider"], s["instance_type"]) == (best.provider, best.instance_type)
    assert s["rate_per_hour"] <= 0.526


def test_no_cheaper_instance_fits(tmp_path: Path):
    """Everything the box has is in use on the host: nothing smaller fits, no suggestion."""
    rig = training_rig(tmp_path)
    gpus, kernels = exploring()
    rig.run(1000, gpus, kernels, cpu_percent=100.0, memory_used=1000 * GiB)
    alert = rig.alert(KIND, "instance")
    assert alert is not None and alert.details["suggestion"] is None
    assert "No cheaper aws instance in the catalog fits" in alert.message


def test_unpriced_server_seen_with_eight_big_gpus(tmp_path: Path):
    rig = training_rig(tmp_path, instance_type=None)
    assert rig.pricing.rate_per_hour is None
    gpus, kernels = exploring()
    rig.run(1000, gpus, kernels)
    alert = rig.alert(KIND, "instance")
    assert alert is not None
    d = alert.details
    assert d["instance_type"] is None and d["rate_per_hour"] is None
    assert d["waste_per_hour"] is None
    assert d["suggestion"]["instance_type"] is not None
    assert d["suggestion"]["saving_per_hour"] is None
    assert "unpriced" in alert.message


def test_rate_alone_makes_an_instance_training_sized(tmp_path: Path):
    gpus, kernels = exploring(gpus=2, name=T4, total=16 * GiB)
    cheap = training_rig(tmp_path / "a", instance_type=None, hourly_rate=4.0)
    cheap.run(1000, gpus, kernels)
    assert cheap.alert(KIND, "instance") is None
    dear = training_rig(tmp_path / "b", instance_type=None, hourly_rate=12.0)
    dear.run(1000, gpus, kernels)
    alert = dear.alert(KIND, "instance")
    assert alert is not None and alert.details["rate_per_hour"] == 12.0
    # ... and a rule without a rate floor ignores the rate
    off = training_rig(tmp_path / "c", instance_type=None, hourly_rate=12.0,
                       config=GuardConfig(training_min_rate_per_hour=None))
    off.run(1000, gpus, kernels)
    assert off.alert(KIND, "instance") is None


def test_unknown_utilisation_is_not_judged(tmp_path: Path):
    rig = training_rig(tmp_path)
    gpus, kernels = exploring(util=None)
    rig.run(1000, gpus, kernels)
    assert rig.alert(KIND, "instance") is None


# --- a real server and a real kernel -------------------------------------------------------


def _frame(util: float, gpus: int = 8) -> dict[str, Any]:
    return {"t": 0, "gpus": [
        {"utilization_percent": util, "power_watts": 70,
         "processes": [{"kernel": 0, "used_memory_bytes": 6 * GiB}]}
    ] + [{"utilization_percent": 0, "power_watts": 50, "processes": []}
         for _ in range(gpus - 1)]}


@pytest.fixture
def util() -> float:
    return 2.0


@pytest.fixture
def costguard_config(tmp_path: Path, util: float) -> dict[str, Any]:
    trace = write_trace(tmp_path / "p4d.json", [_frame(util)], gpus=8,
                        instance_type="p4d.24xlarge")
    return {
        "db_path": str(tmp_path / "ledger.sqlite"),
        "sample_interval": 0.25,
        "replay_trace": str(trace),
        "replay_mode": "always",
        "Guard.interactive_window_seconds": 3.0,
    }


async def _alerts(jp_fetch: Any, kind: str = KIND) -> list[dict[str, Any]]:
    doc = await get_json(jp_fetch, "costguard", "api", "alerts")
    return [a for a in doc["alerts"] if a["kind"] == kind]


async def test_server_warns_about_exploration_on_p4d(jp_fetch: Any):
    session = await start_session(jp_fetch, "explore.ipynb")
    assert session["kernel"]["id"]
    deadline = asyncio.get_running_loop().time() + 60
    found: list[dict[str, Any]] = []
    while not found and asyncio.get_running_loop().time() < deadline:
        found = await _alerts(jp_fetch)
        await asyncio.sleep(0.2)
    assert found, "no training-sized alert within 60 s"
    alert = found[0]
    assert alert["severity"] == "warning" and alert["source"] == "guard"
    assert alert["key"] == "instance" and alert["notebook"] == "explore.ipynb"
    assert {a["id"] for a in alert["actions"]} == {"offload", "open-panel", "snooze"}
    d = alert["details"]
    assert d["instance_type"] == "p4d.24xlarge"
    assert d["peak_gpu_memory_bytes"] == 6 * GiB and d["gpus_held"] == 1
    assert d["idle_share"] >= 0.99 and d["waste_per_hour"] > P4D_RATE / 2
    s = d["suggestion"]
    assert s is not None and s["provider"] == "aws" and s["gpu_count"] >= 1
    # the host figures are this machine's; the suggestion is the catalog's answer for them
    catalog = Catalog.load()
    expected = catalog.cheapest_fitting(
        6 * HEADROOM, 1, max(1, math.ceil(d["peak_cpu_cores"] - 1e-9)),
        d["peak_memory_bytes"] / GiB * HEADROOM, provider="aws")
    assert expected is not None and s["instance_type"] == expected.instance_type
    assert s["saving_per_hour"] == pytest.approx(P4D_RATE - s["rate_per_hour"], abs=0.006)
    assert s["instance_type"] in alert["message"][:100]


@pytest.mark.parametrize("util", [90.0])
async def test_server_stays_quiet_while_the_gpu_works(jp_fetch: Any, util: float):
    await start_session(jp_fetch, "train.ipynb")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60

    async def holding_since() -> float | None:
        doc = await get_json(jp_fetch, "costguard", "api", "kernels")
        return float(doc["time"]) if any(k["gpus"] for k in doc["kernels"]) else None

    start = None
    while start is None and loop.time() < deadline:
        start = await holding_since()
        await asyncio.sleep(0.2)
    assert start is not None, "the kernel never held the GPU"
    # more than two full windows (3 s each) of samples with the kernel on a 90% GPU
    last = start
    while last < start + 7 and loop.time() < deadline:
        assert await _alerts(jp_fetch) == []
        status = await get_json(jp_fetch, "costguard", "api", "status")
        last = float(status["last_sample_time"] or 0)
        await asyncio.sleep(0.25)
    assert last >= start + 7
    assert await _alerts(jp_fetch) == []
