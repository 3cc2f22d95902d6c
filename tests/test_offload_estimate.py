"""`POST jobs/estimate` on a real server: what a job would cost on each backend before it is
submitted, each figure with its source and currency (the offload dialog shows it). The
SkyPilot backend's estimate is tested without SkyPilot in tests/test_skypilot_estimate.py and
against the real SkyPilot in tests/test_skypilot_e2e.py."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

import jupyter_costguard
from tests.support.jobs import post
from tests.support.rest import get_json

SLURM_RATES = {"gpu_per_hour": 2.5, "cpu_per_hour": 0.04, "memory_gib_per_hour": 0.005}


@pytest.fixture
def costguard_config(costguard_config: dict[str, Any], tmp_path: Path,
                     request: pytest.FixtureRequest) -> dict[str, Any]:
    """This machine is an AWS p4d.24xlarge priced from the shipped catalog; Slurm is offered
    (estimates never reach Slurm); a test adds its own settings (indirect parametrize)."""
    return {**costguard_config, "jobs_dir": str(tmp_path / "jobs"), "hourly_rate": None,
            "instance_type": "p4d.24xlarge", "region": "us-east-1", "slurm_enabled": True,
            **getattr(request, "param", {})}


def catalog_on_demand(instance_type: str, region: str) -> tuple[float, str]:
    """The shipped catalog's on-demand price of an AWS type in a region, and its date."""
    path = Path(jupyter_costguard.__file__).parent / "data" / "catalog.csv"
    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    for row in csv.DictReader(lines):
        if (row["provider"], row["instance_type"], row["region"]) == \
                ("aws", instance_type, region):
            return float(row["on_demand_per_hour"]), row["retrieved"]
    raise AssertionError(f"no catalog row for {instance_type} in {region}")


async def estimate(jp_fetch: Any, body: Any) -> dict[str, Any]:
    doc: dict[str, Any] = await post(jp_fetch, "jobs", "estimate", body=body)
    return doc


async def test_the_local_backend_costs_this_machines_catalog_price(jp_fetch) -> None:
    hourly, retrieved = catalog_on_demand("p4d.24xlarge", "us-east-1")
    doc = await estimate(jp_fetch, {"backend": "local",
                                    "resources": {"gpus": 1, "time_limit_seconds": 5400}})
    assert doc["priced"] and doc["hourly_price"] == pytest.approx(hourly)
    assert doc["max_cost"] == pytest.approx(hourly * 1.5)
    assert doc["currency"] == "USD" and doc["source"] == "catalog"
    assert doc["detail"] == f"catalog: aws p4d.24xlarge on-demand, as of {retrieved}"
    assert doc["retrieved"] == retrieved and isinstance(doc["age_days"], int)
    status = await get_json(jp_fetch, "costguard", "api", "status")
    assert doc["hourly_price"] == pytest.approx(status["rate_per_hour"])  # what spend uses


async def test_no_time_limit_has_no_most_and_the_default_backend_is_local(jp_fetch) -> None:
    doc = await estimate(jp_fetch, {})
    assert doc["backend"] == "local" and doc["priced"]
    assert doc["time_limit_seconds"] is None and doc["max_cost"] is None


@pytest.mark.parametrize("costguard_config", [{"offload_time_limit_seconds": 1800.0}],
                         indirect=True)
async def test_a_request_without_resources_gets_the_servers_default_limit(jp_fetch) -> None:
    doc = await estimate(jp_fetch, {"backend": "local", "resources": None})
    assert doc["time_limit_seconds"] == 1800.0
    assert doc["max_cost"] == pytest.approx(doc["hourly_price"] / 2)


@pytest.mark.parametrize("costguard_config", [{"cluster_rates": {"slurm": SLURM_RATES}}],
                         indirect=True)
async def test_slurm_costs_the_configured_rates_of_what_the_job_asks_for(jp_fetch) -> None:
    doc = await estimate(jp_fetch, {"backend": "slurm", "resources": {
        "gpus": 2, "cpus": 8, "memory_gib": 64, "time_limit_seconds": 7200}})
    hourly = 2 * 2.5 + 8 * 0.04 + 64 * 0.005
    assert doc["priced"] and doc["hourly_price"] == pytest.approx(hourly)
    assert doc["max_cost"] == pytest.approx(2 * hourly)
    assert doc["source"] == "cluster_rates" and doc["currency"] == "USD"
    assert doc["detail"] == ("site rate for slurm (c.CostGuard.cluster_rates): 2 GPU × 2.5 + "
                             "8 CPU × 0.04 + 64 GiB × 0.005 per hour")
    assert doc["choice"] is None and not doc["above_cap"]


async def test_slurm_without_rates_says_it_is_not_priced(jp_fetch) -> None:
    doc = await estimate(jp_fetch, {"backend": "slurm",
                                    "resources": {"gpus": 1, "time_limit_seconds": 60}})
    assert not doc["priced"] and doc["hourly_price"] is None and doc["max_cost"] is None
    assert doc["source"] == "none"
    assert doc["detail"] == ("not priced: c.CostGuard.cluster_rates has no entry for 'slurm', "
                             "so the job's spend will not be priced either")


@pytest.mark.parametrize(("body", "needle"), [
    ({"backend": "slurm", "resources": {"gpus": -1}}, "resources.gpus"),
    ({"resources": {"time_limit_seconds": 0}}, "time_limit_seconds"),
    ({"backend": "nowhere"}, "unknown backend 'nowhere'; configured: local, slurm"),
    ({"notebook": "n.ipynb", "selected": ["a"]}, "notebook"),
    ([1, 2], "object"),
    # integers of 400 digits are valid JSON with no float: a clear 400, never a 500
    ({"resources": {"memory_gib": 10**400}}, "resources.memory_gib"),
    ({"resources": {"cpus": 10**400}}, "resources.cpus"),
    ({"resources": {"time_limit_seconds": 10**400}}, "resources.time_limit_seconds"),
    ({"resources": {"gpus": 10**400}}, "resources.gpus"),
])
async def test_a_malformed_body_is_refused_with_what_to_change(jp_fetch, body, needle) -> None:
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("costguard", "api", "jobs", "estimate", method="POST",
                       body=json.dumps(body))
    assert e.value.code == 400
    assert e.value.response is not None
    message = json.loads(e.value.response.body)["message"]
    assert needle in message, message


async def test_not_json_is_refused(jp_fetch) -> None:
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("costguard", "api", "jobs", "estimate", method="POST", body="{nope")
    assert e.value.code == 400


async def test_an_unauthenticated_request_is_refused(jp_fetch) -> None:
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("costguard", "api", "jobs", "estimate", method="POST",
                       body=json.dumps({"backend": "local"}), headers={"Authorization": ""})
    assert e.value.code == 403


def test_resources_refuse_an_integer_too_large_for_a_float_with_a_spec_error() -> None:
    """The kernel side parses resources without the server's schema in front of it."""
    from jupyter_costguard.offload.spec import Resources, SpecError
    for name in ("cpus", "memory_gib", "time_limit_seconds"):
        with pytest.raises(SpecError, match=f"resources.{name}"):
            Resources.parse({name: 10**400})
