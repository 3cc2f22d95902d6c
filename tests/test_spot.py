"""Issue 26, part 1: a spot machine is named spot and priced at the spot rate; without a spot
price it says so and how to fix it; the server refreshes the catalog in the background.

Real processes throughout: `jupyter costguard detect` and a real Jupyter server, asking
loopback stand-ins of each cloud's metadata service (speaking AWS IMDSv2, the GCE metadata
server and Azure IMDS) and a loopback stand-in of dstack's published gpuhunt catalog, which
the real gpuhunt downloads from. Nothing leaves the machine.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_costguard.cost.catalog import Catalog
from jupyter_costguard.cost.refresh import (
    FIRST_REFRESH_DELAY_SECONDS,
    CatalogRefresher,
    background_refresh_off,
    read_fetched,
)
from tests.support.gpuhunt_publisher import GpuhuntPublisher, fixture_catalogs
from tests.support.metadata_standin import MetadataStandin, env_for
from tests.support.openapi_check import validate
from tests.support.server_proc import ServerProcess
from tests.support.traces import write_trace
from tests.support.units import GiB

#: lookups on, every endpoint at a stand-in or a closed loopback port (never the real one)
LOOKUPS_ON = {"COSTGUARD_CLOUD_METADATA": "on", "AWS_EC2_METADATA_DISABLED": "false"}
SHIPPED = Catalog.load()

#: (provider, instance type, region, how the metadata says spot)
SPOT_MACHINES = [
    ("aws", "g5.xlarge", "us-east-1", None),  # instance-life-cycle: spot
    ("gcp", "a2-highgpu-1g", "us-central1", "provisioning-model"),  # SPOT
    ("gcp", "a2-highgpu-1g", "us-central1", "preemptible"),  # the older preemptible VMs
    ("azure", "Standard_NC24ads_A100_v4", "eastus", "Spot"),  # priority: Spot
    ("azure", "Standard_NC24ads_A100_v4", "eastus", "Low"),  # the older low priority
]


def detect(env: dict[str, str], cwd: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "jupyter_costguard.cli", "detect", "--json"],
        capture_output=True, text=True, timeout=60, cwd=cwd, check=False,
        env={**os.environ, "JUPYTER_CONFIG_DIR": str(cwd / "config"),
             "JUPYTER_DATA_DIR": str(cwd / "data"), "JUPYTER_PLATFORM_DIRS": "1", **env})
    assert done.returncode == 0, done.stderr
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


@pytest.mark.parametrize(("provider", "itype", "region", "via"), SPOT_MACHINES)
def test_a_spot_machine_is_named_spot_and_priced_from_the_shipped_catalog(
        tmp_path: Path, provider: str, itype: str, region: str, via: str | None) -> None:
    row = SHIPPED.get(itype, provider)
    assert row is not None
    with MetadataStandin(provider, instance_type=itype, region=region, market="spot",
                         spot_via=via) as standin:
        doc = detect({**env_for(**{provider: standin}), **LOOKUPS_ON}, tmp_path)
    assert (doc["provider"], doc["instance_type"], doc["source"]) == (provider, itype,
                                                                      "metadata")
    assert (doc["market"], doc["market_source"]) == ("spot", "metadata")  # the machine's
    if row.spot_per_hour is not None:  # the shipped spot figure, dated and sourced as such
        assert (doc["market_priced"], doc["rate_per_hour"]) == ("spot", row.spot_per_hour)
        assert doc["market_note"] is None
        assert doc["price_date"] == (row.spot_retrieved or row.retrieved)
        assert doc["price_source_url"] == (row.spot_source_url or row.source_url)
        assert row.notes  # says what kind of figure it is
    else:  # none shipped: on-demand, and the sentence that says so and how to fix it
        assert (doc["market_priced"], doc["rate_per_hour"]) == ("on-demand",
                                                                row.on_demand_per_hour)
        note = doc["market_note"]
        assert f"no spot price for {provider}/{itype}" in note
        assert "catalog_files" in note and "jupyter costguard catalog update" in note
        assert note in doc["detail"] and note in doc["tried"]


def test_the_aws_spot_figure_is_an_indicative_market_price() -> None:
    """The CSV says what kind of figure each shipped spot price is (AWS: a market price)."""
    spot_rows = [r for r in SHIPPED if r.spot_per_hour is not None]
    assert spot_rows
    for r in spot_rows:
        assert r.spot_per_hour is not None and 0 < r.spot_per_hour < r.on_demand_per_hour
        assert r.notes.startswith("spot_per_hour: "), r.name
        if r.provider == "aws":
            assert "indicative" in r.notes and "market price" in r.notes, r.name
    g5 = SHIPPED.get("g5.xlarge", "aws")
    assert g5 is not None and g5.priced_as("spot").retrieved == g5.spot_retrieved
    assert g5.priced_as("spot").source_url == g5.spot_source_url
    assert g5.priced_as("on-demand") is g5
    # where the two figures come from different places, the spot price carries its own
    a2 = SHIPPED.get("a2-highgpu-1g", "gcp")
    assert a2 is not None and a2.spot_source_url != a2.source_url
    assert a2.priced_as("spot").source_url == a2.spot_source_url


#: GPU rows of providers with a spot market that ship no spot figure, for the reason the
#: catalog header gives: SkyPilot's catalog gives Azure's H100 v5 spot price equal to
#: on-demand (none published)
NO_SPOT_YET = {("azure", "Standard_ND96isr_H100_v5"), ("azure", "Standard_NC40ads_H100_v5")}
#: where every shipped AWS GPU spot figure was read (the one snapshot, not older figures)
AWS_SPOT_SNAPSHOT = ("https://github.com/skypilot-org/skypilot-catalog/blob/"
                     "00148f2af3672e2229b4f7bf8157d5a3f36e3c35/catalogs/v8/aws/vms.csv")


def test_spot_market_gpu_rows_ship_a_dated_sourced_spot_figure_below_on_demand() -> None:
    """Every AWS, GCP and Azure GPU row has a spot figure with its own source and date, below
    its on-demand price, except the listed gaps; CoreWeave and Lambda rows have none."""
    gpu = [r for r in SHIPPED if r.is_gpu]
    lacking = {(r.provider, r.instance_type) for r in gpu if r.spot_per_hour is None
               and r.provider in ("aws", "gcp", "azure")}
    assert lacking == NO_SPOT_YET  # a new figure (or a lost one) updates the list
    for r in gpu:
        if r.provider in ("coreweave", "lambda"):
            assert r.spot_per_hour is None, r.name
            continue
        if (r.provider, r.instance_type) in NO_SPOT_YET:
            continue
        assert r.spot_per_hour is not None and 0 < r.spot_per_hour < r.on_demand_per_hour
        assert r.spot_source_url.startswith("https://") and r.spot_retrieved, r.name
        spot = r.priced_as("spot")
        assert (spot.source_url, spot.retrieved) == (r.spot_source_url, r.spot_retrieved)
        if r.provider != "aws":  # GCP and Azure publish spot list prices
            assert "published spot list price" in r.notes, r.name
        else:  # all from the one dated snapshot, none left from an older source
            assert (r.spot_source_url, r.spot_retrieved) == (AWS_SPOT_SNAPSHOT, "2026-12-06")
    # GCP lists a GPU VM's machine and its GPUs apart: the figure is the two parts added
    a2 = SHIPPED.get("a2-highgpu-1g", "gcp")
    assert a2 is not None and a2.spot_per_hour == round(0.29576 + 1.1472, 5)
    assert "0.29576" in a2.notes and "1.1472" in a2.notes


def test_a_user_spot_price_is_dated_by_the_user_not_by_the_shipped_snapshot(tmp_path: Path) -> None:
    f = tmp_path / "mine.csv"
    f.write_text("provider,instance_type,spot_per_hour,retrieved\n"
                 "aws,g5.xlarge,0.31,2026-11-30\n")
    row = Catalog.load([f]).get("g5.xlarge", "aws")
    assert row is not None and row.spot_per_hour == 0.31
    spot = row.priced_as("spot")
    assert (spot.retrieved, spot.source_url) == ("2026-11-30", f.resolve().as_uri())


# --- the background refresh ---------------------------------------------------------------


@pytest.fixture
def publisher(monkeypatch: pytest.MonkeyPatch) -> Iterator[GpuhuntPublisher]:
    """dstack's published catalog on loopback; children the server starts inherit the URL."""
    with GpuhuntPublisher() as pub:
        monkeypatch.setenv("GPUHUNT_CATALOG_URL", pub.url)
        yield pub


class Recorded(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def refresher(path: Path, timeout: float = 120.0) -> tuple[CatalogRefresher, list[Path],
                                                           Recorded]:
    used: list[Path] = []
    log = logging.getLogger(f"test-spot-{id(used)}")
    rec = Recorded()
    log.addHandler(rec)
    log.setLevel(logging.INFO)
    return CatalogRefresher(3600.0, timeout, used.append, log=log, path=path), used, rec


def test_a_refresh_installs_the_published_catalog_and_hands_it_on(
        publisher: GpuhuntPublisher, tmp_path: Path) -> None:
    path = tmp_path / "costguard" / "catalog.csv"
    r, used, rec = refresher(path)
    assert asyncio.run(r.refresh_once()) is True
    assert used == [path] and r.refreshes == 1
    assert read_fetched(path) is not None
    p4d = Catalog.load([path]).get("p4d.24xlarge", "aws")
    assert p4d is not None and p4d.spot_per_hour == 12.5  # the publisher's figure
    assert publisher.requested_providers()  # it was asked, on loopback
    assert not list(path.parent.glob(".*refresh*"))  # no leftovers
    assert any("refreshed in the background" in line for line in rec.lines)


def test_a_failed_refresh_keeps_the_last_good_file(publisher: GpuhuntPublisher,
                                                   tmp_path: Path) -> None:
    path = tmp_path / "costguard" / "catalog.csv"
    r, used, rec = refresher(path)
    assert asyncio.run(r.refresh_once()) is True
    good = path.read_bytes()
    publisher.stop()  # the mirror is gone: every download fails
    assert asyncio.run(r.refresh_once()) is False
    assert path.read_bytes() == good and used == [path]
    assert any("failed, keeping" in line and str(path) in line for line in rec.lines)


@pytest.fixture
def silent_mirror(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A loopback listener that accepts and never answers: a download that hangs."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(sock.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/v3"
    monkeypatch.setenv("GPUHUNT_CATALOG_URL", url)
    yield url
    stop.set()
    t.join(5)
    for c in held:
        c.close()
    sock.close()


def test_a_refresh_that_hangs_is_stopped_at_its_timeout(silent_mirror: str,
                                                        tmp_path: Path) -> None:
    path = tmp_path / "costguard" / "catalog.csv"
    path.parent.mkdir()
    path.write_text("# fetched: 2026-01-01T00:00:00Z\nprovider,instance_type\n")
    before = path.read_bytes()
    r, used, rec = refresher(path, timeout=4.0)
    assert asyncio.run(r.refresh_once()) is False
    assert path.read_bytes() == before and used == []
    assert any("stopped after 4 s" in line for line in rec.lines)


def test_when_the_first_refresh_comes(tmp_path: Path) -> None:
    path = tmp_path / "catalog.csv"
    now = 1_800_000_000.0  # 2027-01-15T08:00:00Z
    r = CatalogRefresher(24 * 3600.0, 60.0, lambda p: None, log=logging.getLogger("t"),
                         path=path, now=lambda: now)
    assert r.first_delay() == FIRST_REFRESH_DELAY_SECONDS  # no file yet: soon after start
    path.write_text("# fetched: 2027-01-15T02:00:00Z\nprovider,instance_type\n")
    assert r.first_delay() == 18 * 3600.0  # due 24 h after it was fetched
    path.write_text("# fetched: 2026-01-01T00:00:00Z\nprovider,instance_type\n")
    assert r.first_delay() == FIRST_REFRESH_DELAY_SECONDS  # overdue: soon after start
    short = CatalogRefresher(2.0, 60.0, lambda p: None, log=logging.getLogger("t"),
                             path=tmp_path / "none.csv")
    assert short.first_delay() == 2.0  # never later than one interval


def test_the_refresh_is_off_at_zero_hours() -> None:
    assert background_refresh_off(0) == "c.CostGuard.catalog_refresh_hours is 0"
    assert background_refresh_off(24) is None  # gpuhunt is in the test extras


def server_config(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    frame = {"t": 0, "gpus": [{"utilization_percent": 50, "processes": [
        {"kernel": 0, "used_memory_bytes": 4 * GiB}]}] + [
        {"utilization_percent": 0, "processes": []}] * 7}
    trace = write_trace(tmp_path / "trace.json", [frame], gpus=8)
    return {"db_path": str(tmp_path / "ledger.sqlite"), "sample_interval": 0.25,
            "replay_trace": str(trace), "replay_mode": "always", "Offload.enabled": False,
            "cloud_metadata_timeout": 2.0, **extra}


def test_the_server_replaces_the_rate_from_the_refreshed_catalog_without_a_restart(
        publisher: GpuhuntPublisher, tmp_path: Path) -> None:
    """A spot ND96isr_H100_v5 (no spot price shipped) says so; once the publisher has one, the
    background refresh brings it in and the same server prices at it; a later figure
    replaces that. (An 8-GPU type that ships no spot figure: every AWS GPU row has one.)"""
    itype = "Standard_ND96isr_H100_v5"
    offer = f"{itype},eastus,{{price}},96,1900.0,8,H100,80.0,{{spot}},,nvidia,,x86,{{{{}}}}\n"
    azure = fixture_catalogs()["azure"] + offer.format(price=98.32, spot=False)
    publisher.catalogs["azure"] = azure + offer.format(price=30.5, spot=True)
    publisher.omit.add("azure")  # at first the mirror has no Azure prices
    with MetadataStandin("azure", instance_type=itype, region="eastus", market="spot",
                         spot_via="Spot") as standin:
        server = ServerProcess(tmp_path / "s", server_config(
            tmp_path, catalog_refresh_hours=4 / 3600, catalog_refresh_timeout=120),
            env={**env_for(azure=standin), **LOOKUPS_ON}).start()
        try:
            before = server.wait_for("costguard/api/status",
                                     lambda d: d["price_source"] == "metadata")
            publisher.omit.clear()
            first = server.wait_for("costguard/api/status",
                                    lambda d: d["rate_per_hour"] == 30.5, timeout=120)
            publisher.catalogs["azure"] = azure + offer.format(price=28.0, spot=True)
            publisher.version = "20250613-7"
            second = server.wait_for("costguard/api/status",
                                     lambda d: d["rate_per_hour"] == 28.0, timeout=120)
        finally:
            server.stop()
    validate("/status", 200, before)
    validate("/status", 200, second)
    shipped = SHIPPED.get(itype, "azure")
    assert shipped is not None and shipped.spot_per_hour is None
    price = before["price"]
    assert (before["market"], price["market"], price["market_priced"]) == (
        "spot", "spot", "on-demand")
    assert before["rate_per_hour"] == shipped.on_demand_per_hour
    assert f"no spot price for azure/{itype}" in price["market_note"]
    for doc, version_date in ((first, "2025-06-12"), (second, "2025-06-13")):
        assert (doc["price"]["market_priced"], doc["price"]["market_note"]) == ("spot", None)
        assert doc["price"]["retrieved"] == version_date  # of the gpuhunt version used
    user = tmp_path / "s" / "data" / "costguard" / "catalog.csv"
    assert read_fetched(user) is not None
    assert f"{itype},NVIDIA H100 80GB HBM3,8,80,96,1900,eastus,USD,98.32,28" in (
        user.read_text())
