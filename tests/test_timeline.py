"""The spend chart's buckets (cost/timeline.py) from a real ledger fed real samples: the
sampling service ticks on a clock of the test's (samples a few seconds apart, jittered, one
on a minute boundary, one after a stall) over two real processes standing in for kernels
that hold replayed GPUs. The buckets must add up to the ledger's totals, per notebook too,
and no bucket may read a rate above the one in force (a 60 s bucket once read 22.04/h on a
21.96/h instance: an interval that began in the minute before landed whole in the next)."""

from __future__ import annotations

import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_costguard.cost import timeline
from jupyter_costguard.cost.ledger import Ledger, minute_parts
from jupyter_costguard.cost.pricing import PricingConfig
from jupyter_costguard.cost.service import CostService
from jupyter_costguard.sampling.records import KernelInfo
from jupyter_costguard.sampling.replay import ReplaySource
from jupyter_costguard.sampling.telemetry import Telemetry
from tests.support.history import seed_history
from tests.support.traces import write_trace
from tests.support.units import GiB

RATE = 21.96
#: an epoch minute boundary
T0 = 1_800_000_000.0
#: documents round money to 1e-6 per figure
ROUNDING = 1e-6


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def kernels() -> Iterator[list[KernelInfo]]:
    """Two real processes as the kernels of train.ipynb (busy) and explore.ipynb (idle)."""
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
             for _ in range(2)]
    try:
        yield [KernelInfo("k-train", "python3", procs[0].pid, "busy", T0, 1, "train.ipynb"),
               KernelInfo("k-explore", "python3", procs[1].pid, "idle", T0, 1,
                          "explore.ipynb")]
    finally:
        for p in procs:
            p.kill()
            p.wait()


def sampled(tmp_path: Path, kernels: list[KernelInfo]) -> tuple[Ledger, float, float]:
    """A ledger after 25 minutes of samples: 5 s apart ± 0.9 s, one tick on a minute
    boundary, one after a 137 s stall. Returns it, the last sample's time and the rate."""
    # GPU 0 busy (train), GPU 1 held idle (explore: waste), GPU 2 idle and nobody's
    frame = {"t": 0, "gpus": [
        {"utilization_percent": 95, "processes": [{"notebook": "train.ipynb",
                                                   "used_memory_bytes": 20 * GiB}]},
        {"utilization_percent": 1, "processes": [{"notebook": "explore.ipynb",
                                                  "used_memory_bytes": 4 * GiB}]},
        {"utilization_percent": 0, "processes": []}]}
    trace = write_trace(tmp_path / "t.json", [frame], gpus=3, duration=3600)
    clock = Clock(T0 + 41.3)
    ledger = Ledger(tmp_path / "l.sqlite", now=clock.t)
    svc = CostService(Telemetry(ReplaySource(trace, clock=clock), clock=clock), ledger,
                      PricingConfig(hourly_rate=RATE), environ={})
    rng = random.Random(25)
    ticks = 0
    while clock.t < T0 + 25 * 60:
        published = svc.tick(kernels)
        ticks += 1
        if ticks == 40:
            clock.t = (clock.t // 60 + 1) * 60  # exactly on a minute boundary
        elif ticks == 120:
            clock.t += 137.0  # the sampler stalled
        else:
            clock.t += 5.0 + rng.uniform(-0.9, 0.9)
    assert published.pricing.rate_per_hour == pytest.approx(RATE)
    assert ledger.server.last_sample is not None
    return ledger, ledger.server.last_sample, RATE


def covered(doc: dict[str, Any]) -> list[float]:
    """Seconds of spend each bucket stands for, as the chart divides by: its length, but
    for the one holding `time` (the last sample) the time from its start to then."""
    size = doc["bucket_seconds"]
    return [doc["time"] - t if t <= doc["time"] < t + size else float(size)
            for t in doc["times"]]


def check_sums(doc: dict[str, Any], ledger: Ledger) -> None:
    """The window holds the ledger's whole life: its buckets add up to its totals."""
    n = len(doc["times"])
    total = doc["total"]
    assert sum(total["spend"]) == pytest.approx(ledger.server.spend, abs=n * ROUNDING)
    assert sum(total["waste"]) == pytest.approx(ledger.server.waste, abs=n * ROUNDING)
    series = {s["path"]: s for s in doc["series"]}
    for path in ("train.ipynb", "explore.ipynb"):
        nb = ledger.notebooks[path]
        assert sum(series[path]["spend"]) == pytest.approx(nb.spend, abs=n * ROUNDING)
        assert sum(series[path]["waste"]) == pytest.approx(nb.waste, abs=n * ROUNDING)
        assert nb.spend > 0
    assert sum(series[None]["spend"]) == pytest.approx(
        ledger.server.spend - sum(nb.spend for nb in ledger.notebooks.values()),
        abs=3 * n * ROUNDING)
    assert series["explore.ipynb"]["total_waste"] > 0.9 * series["explore.ipynb"][
        "total_spend"], "the held idle GPU is waste"
    assert sum(series[None]["spend"]) > 0, "the idle GPU nobody holds is unattributed"


def check_rates(doc: dict[str, Any], rate: float) -> None:
    """No bucket reads above the rate in force; every full bucket after the first reads
    it exactly (the ledger never stopped sampling)."""
    spend, seconds = doc["total"]["spend"], covered(doc)
    current = [i for i, t in enumerate(doc["times"]) if t <= doc["time"] < t +
               doc["bucket_seconds"]]
    assert current, "the last sample's bucket is in the window"
    first = next(i for i, s in enumerate(spend) if s > 0)
    for i, (s, secs) in enumerate(zip(spend, seconds)):
        if secs <= 0:
            assert s == pytest.approx(0, abs=ROUNDING)
            continue
        slack = ROUNDING * 3600 / secs
        assert s * 3600 / secs <= rate + slack + 1e-9, f"bucket {i} reads above the rate"
        if first < i < current[0]:
            assert s * 3600 / secs == pytest.approx(rate, abs=slack + 1e-9), f"bucket {i}"


@pytest.mark.parametrize("minutes", [360, 1440, 10080])
@pytest.mark.parametrize("fit", [False, True])
def test_buckets_add_up_to_the_ledger_and_never_exceed_the_rate(tmp_path, kernels, minutes,
                                                                 fit):
    ledger, last, rate = sampled(tmp_path, kernels)
    try:
        doc = timeline.read(ledger, last + 2.0, minutes, None, fit)
        assert doc["time"] == last
        assert doc["minutes"] == minutes
        check_sums(doc, ledger)
        if doc["bucket_seconds"] == 60:
            check_rates(doc, rate)
        for path in ("train.ipynb", "explore.ipynb"):
            one = timeline.read(ledger, last + 2.0, minutes, path, fit)
            assert [s["path"] for s in one["series"]] == [path]
            assert one["series"][0]["total_spend"] == pytest.approx(
                ledger.notebooks[path].spend, abs=len(one["times"]) * ROUNDING)
        if fit:
            # 25 minutes of ledger: minute buckets from its first minute, whatever the maximum
            assert doc["since"] == float(int((T0 + 41.3) // 60) * 60)
            assert doc["bucket_seconds"] == 60 and doc["times"][0] == doc["since"]
            assert 25 <= len(doc["times"]) <= 27
        else:
            assert doc["since"] is None and doc["times"][0] < T0 - 3600
    finally:
        ledger.close()


def test_the_window_ends_with_the_last_samples_bucket(tmp_path, kernels):
    """Read just after a minute began, before its first sample: the chart ends with the
    last sample's minute (whole), not with a new one empty so far."""
    ledger, last, _ = sampled(tmp_path, kernels)
    try:
        minute = float(int(last // 60) * 60)
        doc = timeline.read(ledger, minute + 61.0, 360, None, True)
        assert doc["times"][-1] == minute and doc["time"] == last
        assert doc["total"]["spend"][-1] > 0
        # a ledger that stopped sampling long ago ends at now: nothing since
        stale = timeline.read(ledger, last + 3600, 360, None, False)
        assert stale["times"][-1] == float(int((last + 3600) // 60) * 60)
        assert stale["total"]["spend"][-1] == 0
    finally:
        ledger.close()


def test_a_fresh_ledger_is_drawn_from_its_first_minute(tmp_path):
    """Never from before it: the demo's chart started minutes before the server did (a
    young ledger was padded to five minutes on the left)."""
    ledger = Ledger(tmp_path / "l.sqlite", now=T0)
    try:
        empty = timeline.read(ledger, T0 + 30, 360, None, True)
        # no history yet: the current minute, nothing before it
        assert empty["times"] == [T0] and empty["since"] == T0 and empty["start"] == T0
        seed_history(tmp_path / "l2.sqlite", now=T0 + 3 * 60, minutes=1, rate_per_hour=RATE)
    finally:
        ledger.close()
    seeded = Ledger(tmp_path / "l2.sqlite", now=T0 + 3 * 60)
    try:
        doc = timeline.read(seeded, T0 + 3 * 60, 360, None, True)
        assert doc["since"] == T0 + 60  # the seeded minute, two before now
        assert doc["start"] == doc["times"][0] == doc["since"]
        # it ends with the last sample's minute (the seeded one: recent)
        assert doc["times"] == [T0 + 60] and doc["bucket_seconds"] == 60
        # read a minute later (no sample since): from the first minute to now
        later = timeline.read(seeded, T0 + 5 * 60, 360, None, True)
        assert later["times"][0] == later["since"] == T0 + 60
        assert later["times"][-1] == T0 + 5 * 60
    finally:
        seeded.close()


@pytest.mark.parametrize(("minutes", "bucket"), [(360, 60), (1440, 300), (10080, 300)])
def test_a_fitted_window_grows_to_the_maximum_with_coarser_buckets(tmp_path, minutes, bucket):
    """8 hours of ledger: a 6 h maximum shows its last 6 h in minutes; 24 h and 7 d show
    all 8 h in 5-minute buckets (not a week of hours)."""
    now = T0 + 8 * 3600
    seed_history(tmp_path / "l.sqlite", now=now, minutes=8 * 60, rate_per_hour=RATE)
    ledger = Ledger(tmp_path / "l.sqlite", now=now)
    try:
        doc = timeline.read(ledger, now, minutes, None, True)
        assert doc["bucket_seconds"] == bucket
        if minutes == 360:
            assert doc["since"] is None and len(doc["times"]) == 360
        else:
            first = ledger.first_history_bucket()
            assert first is not None and doc["since"] == first * 60
            assert doc["times"][0] <= doc["since"] < doc["times"][0] + bucket
            assert doc["total"]["total_spend"] == pytest.approx(ledger.server.spend,
                                                                abs=len(doc["times"]) * 1e-6)
    finally:
        ledger.close()


def test_minute_parts_cut_an_interval_at_minute_boundaries():
    assert minute_parts(T0 + 30, 5.0) == [(T0 + 30, 5.0)]
    assert minute_parts(T0 + 30, 0.0) == [(T0 + 30, 0.0)]
    parts = minute_parts(T0 + 2, 5.0)
    assert [int(end // 60) for end, _ in parts] == [int(T0 // 60) - 1, int(T0 // 60)]
    assert [s for _, s in parts] == pytest.approx([3.0, 2.0])
    # a sample exactly on a boundary: all of it in the minute before, none in its own
    parts = minute_parts(T0, 5.0)
    assert [s for _, s in parts] == pytest.approx([5.0, 0.0]) and parts[-1][0] == T0
    # a stall over several minutes: a piece per minute, each at most 60 s
    parts = minute_parts(T0 + 10, 190.0)
    assert [s for _, s in parts] == pytest.approx([60.0, 60.0, 60.0, 10.0])
    assert sum(s for _, s in parts) == pytest.approx(190.0)
    # a very long one (a suspended VM): its last minutes only, the rest in the first of them
    parts = minute_parts(T0, 86400.0)
    assert len(parts) == 360 and sum(s for _, s in parts) == pytest.approx(86400.0)
