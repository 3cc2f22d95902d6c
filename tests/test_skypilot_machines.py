"""A SkyPilot job's spend comes from the machines it really ran on.

The remote side records each machine it starts on (its cloud identity, read from the metadata
service as the server reads its own: here a loopback stand-in), and the server charges each
machine's time at that instance's catalog price. No SkyPilot needed: the end-to-end run is in
test_skypilot_e2e.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jupyter_costguard.cost.catalog import Catalog
from jupyter_costguard.cost.pricing import price_machine
from jupyter_costguard.offload.accounting import Accounting
from jupyter_costguard.offload.backends.skypilot import remote
from jupyter_costguard.offload.spec import Job, JobSpec, Resources, SpecCell
from tests.support.metadata_standin import MetadataStandin, env_for

CATALOG = Catalog.load()


def _job(resources: Resources | None = None) -> Job:
    spec = JobSpec(notebook="n.ipynb", cwd="/tmp", kernel_name="python3",
                   cells=(SpecCell("c", 0, True, "x = 1", "x = 1"),),
                   resources=resources or Resources(cpus=2), backend="skypilot")
    return Job(id=3, spec=spec, state="running", phase="running", created=0.0)


def _accounting() -> Accounting:
    return Accounting({"skypilot": {"cpu_per_hour": 0.5}}, lambda k: 0.0, lambda k: None,
                      lambda *machine: price_machine(CATALOG, *machine))


def test_each_machine_the_job_starts_on_is_recorded_with_its_cloud_identity(
        tmp_path: Path) -> None:
    with MetadataStandin("aws", instance_type="p3.2xlarge", region="us-east-1",
                         market="spot") as aws:
        environ = {**env_for(aws=aws), "COSTGUARD_CLOUD_METADATA": "on"}
        first = remote.start_machine(tmp_path, 0, environ)
    assert [(m["provider"], m["instance_type"], m["region"], m["market"], m["restart"])
            for m in first] == [("aws", "p3.2xlarge", "us-east-1", "spot", 0)]
    remote.mark_machine(tmp_path, first)
    assert "end" not in first[-1] and first[-1]["seen"] >= first[-1]["start"]

    # a recovery on a machine with no metadata (lookups off): kept apart, with why
    machines = remote.start_machine(tmp_path, 1, {"COSTGUARD_CLOUD_METADATA": "off"})
    remote.mark_machine(tmp_path, machines, ended=True)
    saved = json.loads((tmp_path / remote.MACHINES).read_text())
    assert [m["provider"] for m in saved] == ["aws", None]
    assert "off" in saved[1]["detail"] and saved[1]["restart"] == 1
    assert saved[1]["end"] == saved[1]["seen"] >= saved[1]["start"]
    assert "end" not in saved[0]  # the preempted machine: its last sight is all there is


def test_spend_is_each_machines_time_at_its_own_instances_price() -> None:
    spot = price_machine(CATALOG, "aws", "p3.2xlarge", "us-east-1", "spot")
    on_demand = price_machine(CATALOG, "aws", "p3.2xlarge", "us-east-1", "on-demand")
    assert spot is not None and on_demand is not None
    assert spot.market == "spot" and spot.rate_per_hour < on_demand.rate_per_hour
    machines: list[dict[str, Any]] = [
        # preempted after an hour: priced to its last sight
        {"provider": "aws", "instance_type": "p3.2xlarge", "region": "us-east-1",
         "market": "spot", "start": 1000.0, "seen": 4600.0},
        # the recovery: no identity (a Slurm or Kubernetes infra): the site's rate, 2 CPUs
        {"provider": None, "start": 5000.0, "seen": 6700.0, "end": 6800.0},
        # a type the catalog lacks: the site's rate too, and the record says why
        {"provider": "aws", "instance_type": "x9.huge", "region": "us-east-1",
         "market": "on-demand", "start": 7000.0, "end": 7360.0},
    ]
    acc = _accounting()
    priced = acc.priced_machines(_job(), machines)
    assert [m["seconds"] for m in priced] == [3600.0, 1800.0, 360.0]
    assert priced[0]["rate_per_hour"] == pytest.approx(spot.rate_per_hour)
    assert spot.detail == priced[0]["price_source"]
    assert [m["rate_per_hour"] for m in priced[1:]] == [1.0, 1.0]  # 2 CPUs x 0.5
    assert "no cloud identity" in priced[1]["price_source"]
    assert "x9.huge is not in the catalog" in priced[2]["price_source"]
    total = spot.rate_per_hour + 1800 / 3600 + 360 / 3600
    assert acc.spend(_job(), False, {"starting": 0.0}, 9999.0, machines) == pytest.approx(total)
    # without machine records: the allocation at the site's rate, as before
    assert acc.spend(_job(), False, {"starting": 0.0, "done": 3600.0}, 9999.0) == \
        pytest.approx(1.0)


def test_a_machine_is_priced_where_it_ran_or_says_whose_price_it_took() -> None:
    home = CATALOG.get("p3.2xlarge", "aws")
    assert home is not None
    elsewhere = price_machine(CATALOG, "aws", "p3.2xlarge", "mars-north-1", "on-demand")
    assert elsewhere is not None
    assert elsewhere.rate_per_hour == pytest.approx(home.on_demand_per_hour)
    assert "mars-north-1 not in the catalog" in elsewhere.detail
    assert price_machine(CATALOG, "aws", "no-such.type", "us-east-1", "spot") is None
    # a spot machine whose type has no spot figure: on-demand, and it says so
    # (Azure's H100 v5 rows publish none: tests/test_spot.py pins that gap list)
    no_spot = CATALOG.get("Standard_ND96isr_H100_v5", "azure")
    assert no_spot is not None and no_spot.spot_per_hour is None
    p = price_machine(CATALOG, no_spot.provider, no_spot.instance_type, no_spot.region, "spot")
    assert p is not None and p.market == "on-demand"
    assert p.rate_per_hour == pytest.approx(no_spot.on_demand_per_hour)
    assert "spot" in p.detail
