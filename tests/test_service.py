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
