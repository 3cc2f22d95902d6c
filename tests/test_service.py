"""The sampling service without a server: pricing from a replayed trace."""

from __future__ import annotations

from pathlib import Path

from jupyter_costguard.cost.ledger import Ledger
from jupyter_costguard.cost.pricing import PricingConfig
from jupyter_costguard.cost.service import CostService
from jupyter_costguard.sampling.replay import ReplaySource
from jupyter_costguard.sampling.telemetry import Telemetry
from tests.support.traces import write_trace


def _service(tmp_path: Path, config: PricingConfig, environ: dict[str, str]) -> CostService:
    frame = {"t": 0, "gpus": [{"utilization_percent": 1}] * 8}
    trace = write_trace(tmp_path / "t.json", [frame], gpus=8, instance_type="p4d.24xlarge")
    return CostService(Telemetry(ReplaySource(trace)), Ledger(tmp_path / "l.sqlite"), config,
                       environ=environ)


def test_instance_from_trace_is_labelled_as_such(tmp_path: Path):
    svc = _service(tmp_path, PricingConfig(), {})
    p = svc.tick([]).pricing
    assert p.source == "trace"
    assert p.instance is not None and p.instance.instance_type == "p4d.24xlarge"
    assert "replayed trace (simulated) was recorded on 'p4d.24xlarge'" in p.detail
    assert "c.CostGuard" not in p.detail


def test_configured_instance_beats_the_trace(tmp_path: Path):
    svc = _service(tmp_path, PricingConfig(instance_type="g5.xlarge"), {})
    p = svc.tick([]).pricing
    assert p.source == "config" and p.instance is not None
    assert p.instance.instance_type == "g5.xlarge"
    (tmp_path / "e").mkdir()
    env = _service(tmp_path / "e", PricingConfig(), {"COSTGUARD_INSTANCE_TYPE": "g5.xlarge"})
    assert env.tick([]).pricing.source == "environment"


def test_a_replayed_gpu_whose_recorded_user_is_not_running_draws_idle_power(tmp_path):
    """The demo's trace records kernel 1 training on GPUs 1-4 at 360 W; with only one kernel
    running those GPUs sit idle, so they must read idle power, not 360 W at 0%."""
    frames = [
        {"t": 0, "gpus": [
            {"utilization_percent": 2, "power_watts": 68,
             "processes": [{"kernel": 0, "used_memory_bytes": 1 << 30}]},
            {"utilization_percent": 93, "power_watts": 360,
             "processes": [{"kernel": 1, "used_memory_bytes": 1 << 34}]}]},
        {"t": 10, "gpus": [
            {"utilization_percent": 2, "power_watts": 70,
             "processes": [{"kernel": 0, "used_memory_bytes": 1 << 30}]},
            {"utilization_percent": 0, "power_watts": 52, "processes": []}]},
    ]
    trace = write_trace(tmp_path / "t.json", frames, duration=20)
    clock = [0.0]
    source = ReplaySource(trace, clock=lambda: clock[0])
    one_kernel = source.read([101])
    assert [g.power_watts for g in one_kernel.gpus] == [68.0, 52.0]
    assert source.read([]).gpus[0].power_watts == 52.0
    assert one_kernel.gpus[1].utilization_percent == 0.0
    both = source.read([101, 102])
    assert [g.power_watts for g in both.gpus] == [68.0, 360.0]
    # a GPU never seen unheld takes the idle draw of its model (both are A100s here)
    assert source.idle_power == [52.0, 52.0]
    # and where no GPU was ever unheld, its own lowest reading
    assert ReplaySource(write_trace(tmp_path / "u.json", frames[:1])).idle_power == [68.0, 360.0]


def test_a_replayed_gpu_bound_to_a_notebook_goes_to_that_notebooks_kernel(tmp_path):
    """Whatever the user opens first: GPU 1 belongs to train.ipynb's oldest kernel."""
    frames = [{"t": 0, "gpus": [
        {"utilization_percent": 3, "power_watts": 68,
         "processes": [{"notebook": "explore.ipynb", "used_memory_bytes": 1 << 30}]},
        {"utilization_percent": 90, "power_watts": 360,
         "processes": [{"notebook": "train.ipynb", "used_memory_bytes": 1 << 34}]}]},
        {"t": 5, "gpus": [{"utilization_percent": 0, "power_watts": 52, "processes": []},
                          {"utilization_percent": 0, "power_watts": 52, "processes": []}]}]
    source = ReplaySource(write_trace(tmp_path / "t.json", frames, duration=10),
                          clock=lambda: 0.0)
    # offload.ipynb was opened first, train.ipynb second (twice), explore.ipynb not at all
    reading = source.read([101, 102, 103], {101: "offload.ipynb", 102: "train.ipynb",
                                            103: "train.ipynb"})
    assert [[p.pid for p in g.processes] for g in reading.gpus] == [[], [102]]
    assert [g.utilization_percent for g in reading.gpus] == [0.0, 90.0]
    assert [g.power_watts for g in reading.gpus] == [52.0, 360.0]  # GPU 0: nobody's, idle
    # without notebooks (an older caller) nothing is bound by notebook
    assert all(not g.processes for g in source.read([101]).gpus)


def test_metrics_are_built_when_read_once_per_sample_and_never_from_another(tmp_path: Path):
    """A sample builds no Prometheus families until a scrape reads them; reading again
    reuses them; a snapshot republished with new alerts builds its own."""
    from jupyter_costguard.metrics.collector import build_metrics

    built: list[object] = []

    def counting(p):  # type: ignore[no-untyped-def]
        built.append(p)
        return build_metrics(p)

    frame = {"t": 0, "gpus": [{"utilization_percent": 1}] * 8}
    trace = write_trace(tmp_path / "t.json", [frame], gpus=8, instance_type="p4d.24xlarge")
    svc = CostService(Telemetry(ReplaySource(trace)), Ledger(tmp_path / "l.sqlite"),
                      PricingConfig(), environ={}, metrics_builder=counting)
    for _ in range(3):
        svc.tick([])
    assert built == []  # nobody scraped: nothing built
    first = svc.published
    families = first.metrics
    assert built == [first] and first.metrics is families
    names = {f.name for f in families}
    assert {"costguard_samples", "costguard_instance_price_per_hour"} <= names
    (samples,) = [f for f in families if f.name == "costguard_samples"]
    assert samples.samples[0].value == 3.0

    republished = svc.sync_alerts()
    assert republished is not first
    assert republished.metrics is not families and built == [first, republished]
    svc.tick([])
    (samples,) = [f for f in svc.published.metrics if f.name == "costguard_samples"]
    assert samples.samples[0].value == 4.0
