"""Issue 12 on a real server: the price from the cloud's metadata (loopback stand-ins that
speak each provider's protocol), the user catalog under Jupyter's data directory, the age of
a price, a container's share with conservation, and `jupyter costguard detect`."""

from __future__ import annotations

import csv
import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from jupyter_costguard.cost.catalog import COLUMNS, Catalog
from tests.support.metadata_standin import MetadataStandin, env_for
from tests.support.openapi_check import validate
from tests.support.server_proc import ServerProcess
from tests.support.traces import write_trace
from tests.support.units import GiB

#: lookups on, every endpoint at a stand-in or a closed loopback port (never the real one)
LOOKUPS_ON = {"COSTGUARD_CLOUD_METADATA": "on", "AWS_EC2_METADATA_DISABLED": "false"}


def config(tmp_path: Path, gpus: int = 8, **extra: Any) -> dict[str, Any]:
    frame = {"t": 0, "gpus": [{"utilization_percent": 0, "processes": []}] * gpus}
    frame["gpus"][0] = {"utilization_percent": 50, "processes": [
        {"kernel": 0, "used_memory_bytes": 4 * GiB}]}
    trace = write_trace(tmp_path / "trace.json", [frame], gpus=gpus)
    return {"db_path": str(tmp_path / "ledger.sqlite"), "sample_interval": 0.25,
            "replay_trace": str(trace), "replay_mode": "always", "Offload.enabled": False,
            "cloud_metadata_timeout": 2.0, **extra}


def user_catalog(workdir: Path, rows: list[dict[str, Any]]) -> Path:
    """The file `jupyter costguard catalog update` writes, where the server looks for it."""
    path = workdir / "data" / "costguard" / "catalog.csv"
    path.parent.mkdir(parents=True)
    with path.open("w", newline="") as f:
        f.write("# fetched: 2026-11-20T06:00:00Z\n")
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({c: r.get(c, "") for c in COLUMNS})
    return path


P4D_EU = {"provider": "aws", "instance_type": "p4d.24xlarge", "gpu_model":
          "NVIDIA A100-SXM4-40GB", "gpu_count": 8, "gpu_memory_gib": 40, "vcpus": 96,
          "memory_gib": 1152, "region": "eu-north-1", "currency": "USD",
          "on_demand_per_hour": 19.5, "spot_per_hour": 7.25,
          "source_url": "gpuhunt catalog (test)", "retrieved": "2026-11-20"}


def test_aws_spot_in_another_region_priced_from_metadata_and_the_user_catalog(tmp_path):
    with MetadataStandin("aws", instance_type="p4d.24xlarge", region="eu-north-1",
                         zone="eu-north-1b", market="spot") as aws:
        workdir = tmp_path / "s"
        user_catalog(workdir, [P4D_EU])
        server = ServerProcess(workdir, config(tmp_path),
                               env={**env_for(aws=aws), **LOOKUPS_ON}).start()
        try:
            status = server.wait_for("costguard/api/status",
                                     lambda d: d["price_source"] == "metadata", timeout=60)
        finally:
            server.stop()
    validate("/status", 200, status)
    price = status["price"]
    assert status["rate_per_hour"] == 7.25 and status["market"] == "spot"
    assert status["instance"]["region"] == "eu-north-1"
    assert (price["provider"], price["instance_type"]) == ("aws", "p4d.24xlarge")
    assert (price["region"], price["region_source"], price["region_priced"]) == (
        "eu-north-1", "metadata", "eu-north-1")
    assert price["market_source"] == "metadata" and price["region_note"] is None
    age = (dt.datetime.now(dt.timezone.utc).date() - dt.date(2026, 11, 20)).days
    assert price["retrieved"] == "2026-11-20" and price["age_days"] == age
    assert price["stale"] is (age > 90) and price["stale_after_days"] == 90
    assert "jupyter costguard catalog update" == price["refresh_hint"]
    assert any(t.startswith("aws: ") for t in price["tried"])
    # IMDSv2 as documented: a session token first, then the reads with it
    methods = [(m, p) for m, p, _ in aws.requests]
    assert methods[0] == ("PUT", "/latest/api/token")
    assert ("GET", "/latest/meta-data/instance-life-cycle") in methods


def test_a_region_the_catalog_lacks_and_an_old_price_are_said(tmp_path):
    with MetadataStandin("gcp", instance_type="a2-highgpu-1g", region="me-central2",
                         zone="me-central2-a") as gcp:
        server = ServerProcess(tmp_path / "s", config(tmp_path, gpus=1, **{
            "price_stale_after_days": 30}), env={**env_for(gcp=gcp), **LOOKUPS_ON}).start()
        try:
            status = server.wait_for("costguard/api/status",
                                     lambda d: d["price_source"] == "metadata", timeout=60)
        finally:
            server.stop()
    price = status["price"]
    home = Catalog.load().get("a2-highgpu-1g", "gcp")
    assert home is not None
    assert status["rate_per_hour"] == home.on_demand_per_hour
    assert price["region"] == "me-central2" and price["region_priced"] == home.region
    assert price["region_note"] == (f"price of {home.region}; me-central2 not in the catalog "
                                    f"for gcp/a2-highgpu-1g")
    assert price["retrieved"] == home.retrieved and price["stale"] is True
    assert price["stale_after_days"] == 30


def test_a_slow_metadata_service_does_not_hold_up_the_server(tmp_path):
    """The lookup runs on its own thread: the server answers, priced from what it has,
    while the stand-in still holds the request; the timeout then says so."""
    with MetadataStandin("aws", delay=6.0) as aws:
        server = ServerProcess(tmp_path / "s", config(tmp_path, hourly_rate=2.0, **{
            "cloud_metadata_timeout": 3.0}), env={**env_for(aws=aws), **LOOKUPS_ON}).start()
        try:
            first = server.get("costguard/api/status")
            later = server.wait_for(
                "costguard/api/status",
                lambda d: any("timed out" in t for t in d["price"]["tried"]), timeout=60)
        finally:
            server.stop()
    assert first["price_source"] == "hourly_rate" and first["rate_per_hour"] == 2.0
    assert first["price"]["tried"][0] == "cloud metadata: not asked (yet)"
    assert later["price_source"] == "hourly_rate"  # no answer: nothing else changed


def test_a_pod_pays_its_share_and_spend_is_conserved(tmp_path):
    """2 of a p4d's 8 GPUs in a container (this machine's cgroup has no v2 limits, so the
    host part is the whole host's): rate = R*g*2/8 + R*(1-g), and the totals add up."""
    row = Catalog.load().get("p4d.24xlarge", "aws")
    assert row is not None
    g = row.gpu_share
    rate = row.on_demand_per_hour * (g * 2 / 8 + (1 - g))
    server = ServerProcess(tmp_path / "s", config(tmp_path, gpus=2), env={
        "COSTGUARD_CONTAINER_SHARE": "on", "COSTGUARD_INSTANCE_TYPE": "p4d.24xlarge"}).start()
    try:
        server.start_session("a.ipynb")
        server.wait_for("costguard/api/notebooks",
                        lambda d: any(n["spend"] > 0 for n in d["notebooks"]), timeout=60)
        status = server.get("costguard/api/status")
        notebooks = server.get("costguard/api/notebooks")
    finally:
        server.stop()
    validate("/status", 200, status)
    assert status["rate_per_hour"] == pytest.approx(rate, rel=1e-9)
    share = status["price"]["share"]
    assert (share["gpus_held"], share["gpus_instance"], share["host_share"]) == (2, 8, 1.0)
    assert share["fraction"] == pytest.approx(rate / row.on_demand_per_hour)
    assert status["price"]["instance_rate_per_hour"] == row.on_demand_per_hour
    totals = status["totals"]
    assert totals["spend"] == pytest.approx(rate * totals["seconds"] / 3600, abs=2e-5)
    spent = sum(n["spend"] for n in notebooks["notebooks"])
    assert spent > 0
    assert spent + totals["unattributed"] == pytest.approx(
        totals["spend"], abs=rate * 2 * 0.25 / 3600 + 1e-5)


def detect(env: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jupyter_costguard.cli", "detect", *args],
        capture_output=True, text=True, timeout=60, cwd=cwd, check=False,
        env={**os.environ, "JUPYTER_CONFIG_DIR": str(cwd / "config"),
             "JUPYTER_DATA_DIR": str(cwd / "data"), "JUPYTER_PLATFORM_DIRS": "1", **env})


def test_detect_prints_what_the_server_would_decide(tmp_path):
    with MetadataStandin("gcp", instance_type="a2-highgpu-1g", region="us-central1",
                         zone="us-central1-f", market="spot", spot_via="preemptible") as gcp:
        (tmp_path / "config").mkdir()
        (tmp_path / "config" / "jupyter_server_config.json").write_text(json.dumps(
            {"CostGuard": {"hourly_rate": 9.0}}))
        user_catalog(tmp_path, [{**P4D_EU, "provider": "gcp", "instance_type": "a2-highgpu-1g",
                                 "gpu_count": 1, "vcpus": 12, "memory_gib": 85,
                                 "region": "us-central1", "on_demand_per_hour": 3.67,
                                 "spot_per_hour": 1.1}])
        done = detect({**env_for(gcp=gcp), **LOOKUPS_ON}, "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert {k: doc[k] for k in ("provider", "instance_type", "region", "market",
                                "rate_per_hour", "currency", "source", "share")} == {
        "provider": "gcp", "instance_type": "a2-highgpu-1g", "region": "us-central1",
        "market": "spot", "rate_per_hour": 1.1, "currency": "USD", "source": "metadata",
        "share": None}
    assert doc["price_date"] == "2026-11-20" and any("gcp: " in t for t in doc["tried"])


def test_detect_off_any_cloud_uses_the_server_config_and_says_why(tmp_path):
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "jupyter_server_config.json").write_text(json.dumps(
        {"CostGuard": {"hourly_rate": 9.0, "currency": "EUR"}}))
    done = detect({}, cwd=tmp_path)  # the suite's environment: lookups off
    assert done.returncode == 0, done.stderr
    assert "rate:      9 EUR/h (hourly_rate)" in done.stdout
    assert "off (COSTGUARD_CLOUD_METADATA=off)" in done.stdout
    as_json = json.loads(detect({}, "--json", cwd=tmp_path).stdout)
    assert as_json["source"] == "hourly_rate" and as_json["currency"] == "EUR"


def test_detect_reads_the_config_packages_drop_into_jupyter_server_config_d(tmp_path):
    """Where `pip install` puts an extension's config, and a platform team its site config
    (failed before: only jupyter_server_config.json was read)."""
    drop_in = tmp_path / "config" / "jupyter_server_config.d"
    drop_in.mkdir(parents=True)
    (drop_in / "a-site.json").write_text(json.dumps({"CostGuard": {"hourly_rate": 5.0}}))
    (drop_in / "b-site.json").write_text(json.dumps({"CostGuard": {"currency": "EUR"}}))
    done = detect({}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "rate:      5 EUR/h (hourly_rate)" in done.stdout
    # the folder's own file wins over its drop-ins, as in the server
    (tmp_path / "config" / "jupyter_server_config.json").write_text(json.dumps(
        {"CostGuard": {"hourly_rate": 7.0}}))
    assert "rate:      7 EUR/h (hourly_rate)" in detect({}, cwd=tmp_path).stdout
