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
from tests.support.jobs import post, submit, wait_job
from tests.support.rest import get_json, wait_for

SLURM_RATES = {"gpu_per_hour": 2.5, "cpu_per_hour": 0.04, "memory_gib_per_hour": 0.005}


@pytest.fixture
def costguard_config(costguard_config: dict[str, Any], tmp_path: Path,
                     request: pytest.FixtureRequest) -> dict[str, Any]:
    """This machine is an AWS p4d.24xlarge priced from the shipped catalog; Slurm is offered
    (estimates never reach Slurm); a test adds its own settings (indirect parametrize)."""
    return {**costguard_config, "Offload.jobs_dir": str(tmp_path / "jobs"), "hourly_rate": None,
            "instance_type": "p4d.24xlarge", "region": "us-east-1", "SlurmBackend.enabled": True,
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


async def test_the_local_backend_costs_the_share_of_this_machine_the_job_holds(jp_fetch) -> None:
    """Not the whole machine: the GPUs and CPUs it asks for, at the rates its spend is
    charged with (cost/allocation.py: a GPU is 1/8 of the GPU part, a CPU 1/96 of the rest)."""
    hourly, retrieved = catalog_on_demand("p4d.24xlarge", "us-east-1")
    status = await wait_for(jp_fetch, lambda d: d.get("time") is not None)
    assert status["rate_per_hour"] == pytest.approx(hourly)
    per_gpu, per_cpu = hourly * 0.9 / 8, hourly * 0.1 / 96  # gpu_share 0.9 (conftest)
    doc = await estimate(jp_fetch, {"backend": "local",
                                    "resources": {"gpus": 1, "time_limit_seconds": 5400}})
    # the API rounds to 6 places: half a unit there on top of the relative tolerance
    assert doc["priced"]
    assert doc["hourly_price"] == pytest.approx(per_gpu + per_cpu, rel=1e-5, abs=1e-6)
    assert doc["max_cost"] == pytest.approx(doc["hourly_price"] * 1.5)
    assert doc["currency"] == "USD" and doc["source"] == "catalog"
    assert doc["detail"].startswith(
        f"catalog: aws p4d.24xlarge on-demand, as of {retrieved} at {hourly:.4g} USD/h, the "
        f"job's share: 1 CPU of 96 × ")
    assert "1 GPU of 8" in doc["detail"]
    assert doc["retrieved"] == retrieved and isinstance(doc["age_days"], int)
    four = await estimate(jp_fetch, {"backend": "local", "resources": {"gpus": 2, "cpus": 4}})
    assert four["hourly_price"] == pytest.approx(2 * per_gpu + 4 * per_cpu, rel=1e-5, abs=1e-6)
    # asking for no GPUs: one CPU, and a note of what a GPU it uses anyway costs
    none = await estimate(jp_fetch, {"backend": "local"})
    assert none["hourly_price"] == pytest.approx(per_cpu, rel=1e-5, abs=1e-6)
    assert any("selects no GPUs" in n for n in none["notes"])


async def test_no_time_limit_has_no_most_and_the_default_backend_is_local(jp_fetch) -> None:
    doc = await estimate(jp_fetch, {})
    assert doc["backend"] == "local" and doc["priced"]
    assert doc["time_limit_seconds"] is None and doc["max_cost"] is None


@pytest.mark.parametrize("costguard_config", [{"Offload.time_limit_seconds": 1800.0}],
                         indirect=True)
async def test_a_request_without_resources_gets_the_servers_default_limit(jp_fetch) -> None:
    doc = await estimate(jp_fetch, {"backend": "local", "resources": None})
    assert doc["time_limit_seconds"] == 1800.0
    assert doc["max_cost"] == pytest.approx(doc["hourly_price"] / 2, abs=1e-6)  # each rounded


@pytest.mark.parametrize("costguard_config", [{"Offload.cluster_rates": {"slurm": SLURM_RATES}}],
                         indirect=True)
async def test_slurm_costs_the_configured_rates_of_what_the_job_asks_for(jp_fetch) -> None:
    doc = await estimate(jp_fetch, {"backend": "slurm", "resources": {
        "gpus": 2, "cpus": 8, "memory_gib": 64, "time_limit_seconds": 7200}})
    hourly = 2 * 2.5 + 8 * 0.04 + 64 * 0.005
    assert doc["priced"] and doc["hourly_price"] == pytest.approx(hourly)
    assert doc["max_cost"] == pytest.approx(2 * hourly)
    assert doc["source"] == "cluster_rates" and doc["currency"] == "USD"
    assert doc["detail"] == ("site rate for slurm (c.Offload.cluster_rates): 2 GPU × 2.5 + "
                             "8 CPU × 0.04 + 64 GiB × 0.005 per hour")
    assert doc["choice"] is None and not doc["above_cap"]


async def test_slurm_without_rates_says_it_is_not_priced(jp_fetch) -> None:
    doc = await estimate(jp_fetch, {"backend": "slurm",
                                    "resources": {"gpus": 1, "time_limit_seconds": 60}})
    assert not doc["priced"] and doc["hourly_price"] is None and doc["max_cost"] is None
    assert doc["source"] == "none"
    assert doc["detail"] == ("not priced: c.Offload.cluster_rates has no entry for 'slurm', "
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


EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.usefixtures("no_leftover_jobs")
class TestTheDemosLocalJob:
    """On the demo's config (examples/jupyter_server_config.py: the replayed p4d trace priced
    from the shipped catalog, no configured share): what the dialog estimates for a local job
    is what the job is then charged per hour, give or take what it used beyond its request
    (it was 75× apart when the estimate was the whole machine)."""

    @pytest.fixture
    def costguard_config(self, costguard_config: dict[str, Any]) -> dict[str, Any]:
        return {**costguard_config, "hourly_rate": None, "gpu_share": None,
                "instance_type": None, "region": None,
                "replay_trace": str(EXAMPLES / "gpu_trace.json"), "replay_mode": "always",
                "cloud_metadata": False, "container_share": "off"}

    async def test_the_estimate_is_kept_beside_the_charge_and_they_agree(
            self, jp_fetch, jp_root_dir) -> None:
        (jp_root_dir / "offload.ipynb").write_bytes((EXAMPLES / "offload.ipynb").read_bytes())
        await wait_for(jp_fetch, lambda d: d.get("time") is not None
                       and (d.get("instance") or {}).get("instance_type") == "p4d.24xlarge")
        shown = await estimate(jp_fetch, {"backend": "local"})
        doc = await submit(jp_fetch, "offload.ipynb", ["train"])
        done = await wait_job(jp_fetch, doc["id"])
        assert done["state"] == "succeeded", done
        kept = done["estimate"]
        assert kept["priced"] and kept["hourly_price"] == pytest.approx(shown["hourly_price"])
        assert kept["source"] == "catalog" and kept["detail"] == shown["detail"]
        charged = done["charged_per_hour"]
        assert charged is not None and done["spend"] > 0
        assert kept["hourly_price"] / 3 <= charged <= kept["hourly_price"] * 3, (kept, charged)
        # the list (the store's summary of an ended job) keeps it too
        listed = await get_json(jp_fetch, "costguard", "api", "jobs")
        row = next(j for j in listed["jobs"] if j["id"] == doc["id"])
        assert row["estimate"] == kept and row["charged_per_hour"] == charged
