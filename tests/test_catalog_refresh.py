"""Issue 38: the shipped price snapshot, how it is refreshed and how its age is told.

- the age and the stale mark of a price (cost/pricedoc.py: one function, every view asks it);
- scripts/refresh_catalog.py run for real on a tiny SkyPilot-style catalog checkout (a git
  repository, so the figures are dated by the commit, as with the real one);
- the shipped catalog itself: every row well-formed, dated and sourced, its header naming the
  snapshots its rows cite.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_costguard.cost.catalog import MARKET_SPOT, Catalog
from jupyter_costguard.cost.pricedoc import price_doc
from jupyter_costguard.cost.pricing import Pricing, resolve_pricing

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "refresh_catalog.py"
SHIPPED_FILE = ROOT / "jupyter_costguard" / "data" / "catalog.csv"
SKYPILOT = "https://github.com/skypilot-org/skypilot-catalog/blob/"
HEADER = ("provider,instance_type,gpu_model,gpu_count,gpu_memory_gib,vcpus,memory_gib,region,"
          "currency,on_demand_per_hour,spot_per_hour,gpu_share,source_url,retrieved,"
          "spot_source_url,spot_retrieved,notes\n")
DAY = 86400.0


def _at(day: str) -> float:
    """Noon UTC of `day`, as a time stamp."""
    return dt.datetime.fromisoformat(f"{day}T12:00:00+00:00").timestamp()


def _priced(tmp_path: Path, retrieved: str, spot_retrieved: str = "",
            market: str = "on-demand") -> Pricing:
    f = tmp_path / "mine.csv"
    f.write_text(HEADER + "aws,x1.big,NVIDIA A100-SXM4-40GB,1,40,8,64,us-east-1,USD,4.0,"
                 f"{'1.5' if spot_retrieved else ''},,https://example.org/list,{retrieved},"
                 f"{'https://example.org/spot' if spot_retrieved else ''},{spot_retrieved},\n")
    catalog = Catalog([r for r in Catalog.load([f]).rows if r.instance_type == "x1.big"])
    return resolve_pricing(catalog, instance_type="x1.big", environ={}, gpu=None, host=None,
                           hourly_rate=None, market=market)


# --- the age and the stale mark -------------------------------------------------------------


@pytest.mark.parametrize(("days_old", "stale"), [(0, False), (89, False), (90, False),
                                                 (91, True), (549, True)])
def test_a_price_is_stale_only_past_the_threshold(tmp_path: Path, days_old: int,
                                                  stale: bool) -> None:
    """Stale means older than `price_stale_after_days`, counted in whole days (UTC): a price
    exactly at the threshold is not yet stale."""
    doc = price_doc(_priced(tmp_path, "2026-03-01"), _at("2026-03-01") + days_old * DAY, 90)
    assert (doc["retrieved"], doc["age_days"], doc["stale"]) == ("2026-03-01", days_old, stale)
    assert doc["stale_after_days"] == 90 and doc["refresh_hint"]


def test_the_threshold_is_the_configured_one(tmp_path: Path) -> None:
    p = _priced(tmp_path, "2026-03-01")
    assert price_doc(p, _at("2026-03-11"), 7)["stale"] is True
    assert price_doc(p, _at("2026-03-11"), 30)["stale"] is False


def test_a_date_after_today_is_today_not_negative(tmp_path: Path) -> None:
    doc = price_doc(_priced(tmp_path, "2026-03-05"), _at("2026-03-01"), 90)
    assert (doc["age_days"], doc["stale"]) == (0, False)


def test_a_spot_price_is_aged_by_its_own_date(tmp_path: Path) -> None:
    """The spot figure comes from another snapshot than the list price: its date decides."""
    p = _priced(tmp_path, "2025-01-15", spot_retrieved="2026-02-20", market=MARKET_SPOT)
    doc = price_doc(p, _at("2026-03-01"), 90)
    assert (doc["market_priced"], doc["retrieved"], doc["age_days"], doc["stale"]) == (
        MARKET_SPOT, "2026-02-20", 9, False)
    on_demand = price_doc(_priced(tmp_path, "2025-01-15", spot_retrieved="2026-02-20"),
                          _at("2026-03-01"), 90)
    assert (on_demand["retrieved"], on_demand["stale"]) == ("2025-01-15", True)


def test_an_undated_price_has_no_age_and_is_not_called_stale(tmp_path: Path) -> None:
    p = resolve_pricing(Catalog([]), instance_type=None, environ={}, gpu=None, host=None,
                        hourly_rate=12.0)
    doc = price_doc(p, _at("2026-03-01"), 90)
    assert (doc["retrieved"], doc["age_days"], doc["stale"]) == (None, None, False)


# --- the refresh script on a tiny checkout ---------------------------------------------------

AWS_V7 = """InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,AvailabilityZone
p4d.24xlarge,A100,8.0,96.0,1152.0,,32.77,9.0,us-east-1,use1-az1
"""  # noqa: E501 - an older schema version with another price: never read
AWS_V8 = """InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,AvailabilityZone,Arch
p4d.24xlarge,A100,8.0,96.0,1152.0,,21.957642,8.191500,us-east-1,use1-az2,x86_64
p4d.24xlarge,A100,8.0,96.0,1152.0,,21.957642,2.465500,us-east-1,use1-az1,x86_64
p4d.24xlarge,A100,8.0,96.0,1152.0,,21.957642,1.000000,us-east-1,use1-atl2-az1,x86_64
p4d.24xlarge,A100,8.0,96.0,1152.0,,21.957642,,us-east-1,use1-az3,x86_64
p4d.24xlarge,A100,8.0,96.0,1152.0,,25.0,0.500000,us-west-2,usw2-az1,x86_64
p5.48xlarge,H100,8.0,192.0,2048.0,,55.04,55.040000,us-east-1,use1-az1,x86_64
p5.48xlarge,H100,8.0,192.0,2048.0,,55.04,17.628900,us-east-1,use1-az6,x86_64
g5.xlarge,A10G,1.0,4.0,16.0,,1.2,0.500000,us-east-1,use1-az1,x86_64
g4dn.xlarge,T4,1.0,4.0,16.0,,0.526,0.526000,us-east-1,use1-az1,x86_64
"""  # noqa: E501
GCP_V8 = """InstanceType,vCPUs,MemoryGiB,AcceleratorName,AcceleratorCount,GpuInfo,Region,AvailabilityZone,Price,SpotPrice
a2-highgpu-1g,12.0,85.0,,,,us-central1,us-central1-a,0.73948,0.36975
a2-highgpu-1g,12.0,85.0,,,,us-central1,us-central1-b,0.73948,0.36975
n1-standard-4,4.0,15.0,,,,us-central1,us-central1-a,0.189999,0.0402
,,,A100,1,,us-central1,us-central1-a,2.933908,1.1472
,,,A100,2,,us-central1,us-central1-a,5.867816,2.2944
,,,T4,1,,us-central1,us-central1-a,0.35,0.14
"""  # noqa: E501
AZURE_V6 = """InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,Generation
Standard_NC24ads_A100_v4,A100-80GB,1,24,220,,3.673,0.444433,eastus,V2
Standard_NC40ads_H100_v5,H100,1,40,320,,6.98,6.98,eastus,V2
"""  # noqa: E501

SHIPPED_ROWS = [
    # refreshed: list price and spot from the v8 file
    "aws,p4d.24xlarge,NVIDIA A100-SXM4-40GB,8,40,96,1152,us-east-1,USD,21.96,5.0933,,"
    "https://aws.amazon.com/ec2/pricing/on-demand/,2025-06-05,https://x/old,2025-06-05,old",
    # spot equal to on-demand in one zone: that zone is no spot offer
    "aws,p5.48xlarge,NVIDIA H100 80GB HBM3,8,80,192,2048,us-east-1,USD,98.32,,,"
    "https://aws.amazon.com/ec2/pricing/on-demand/,2025-01-15,,,",
    # the provider published a newer price than the snapshot: kept, and said so
    "aws,g5.xlarge,NVIDIA A10G,1,24,4,16,us-east-1,USD,1.006,,,"
    "https://aws.amazon.com/ec2/pricing/on-demand/,2026-12-01,,,",
    # spot only ever equal to on-demand: no spot figure
    "aws,g4dn.xlarge,Tesla T4,1,16,4,16,us-east-1,USD,0.5,0.2,,"
    f"https://aws.amazon.com/ec2/pricing/on-demand/,2025-01-15,{SKYPILOT}abc/x.csv,2025-01-15,",
    # not listed by SkyPilot: untouched
    "aws,p9.huge,NVIDIA H100 80GB HBM3,8,80,192,2048,us-east-1,USD,99.0,,,"
    "https://aws.amazon.com/ec2/pricing/on-demand/,2025-01-15,,,",
    # CPU-only: untouched
    "aws,m5.xlarge,,0,,4,16,us-east-1,USD,0.192,,,"
    "https://aws.amazon.com/ec2/pricing/on-demand/,2025-01-15,,,",
    # GCP: the VM part and the GPU part added, the GPU share from the split
    "gcp,a2-highgpu-1g,NVIDIA A100-SXM4-40GB,1,40,12,85,us-central1,USD,3.673477,,0.80,"
    "https://cloud.google.com/compute/vm-instance-pricing,2025-01-15,,,",
    "gcp,n1-standard-4+nvidia-tesla-t4,Tesla T4,1,16,4,15,us-central1,USD,0.54,,0.65,"
    "https://cloud.google.com/compute/gpus-pricing,2025-01-15,,,",
    "azure,Standard_NC24ads_A100_v4,NVIDIA A100 80GB PCIe,1,80,24,220,eastus,USD,3.6,,,"
    "https://azure.microsoft.com/pricing,2025-01-15,,,",
    "azure,Standard_NC40ads_H100_v5,NVIDIA H100 NVL,1,94,40,320,eastus,USD,6.98,,,"
    "https://azure.microsoft.com/pricing,2025-01-15,,,",
    "lambda,gpu_1x_a10,NVIDIA A10,1,24,30,200,us-east-1,USD,0.75,,,"
    "https://lambdalabs.com/service/gpu-cloud#pricing,2025-01-15,,,",
]


def _git(repo: Path, *args: str, when: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when,
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@localhost",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@localhost"}
    return subprocess.run(["git", "-C", str(repo), *args], env=env, check=True, timeout=60,
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A SkyPilot-catalog-shaped git repository: AWS v7 and v8, GCP v8, Azure v6."""
    repo = tmp_path / "skypilot-catalog"
    for rel, text in (("v7/aws", AWS_V7), ("v8/aws", AWS_V8), ("v8/gcp", GCP_V8),
                      ("v6/azure", AZURE_V6)):
        (repo / "catalogs" / rel).mkdir(parents=True)
        (repo / "catalogs" / rel / "vms.csv").write_text(text)
    _git(repo, "init", "-q", when="2026-11-20T08:00:00+00:00")
    _git(repo, "add", "-A", when="2026-11-20T08:00:00+00:00")
    _git(repo, "commit", "-q", "-m", "catalogs", when="2026-11-20T08:00:00+00:00")
    return repo


def _catalog_file(tmp_path: Path) -> Path:
    f = tmp_path / "catalog.csv"
    f.write_text("# a shipped catalog\n#\n" + HEADER + "\n".join(SHIPPED_ROWS) + "\n")
    return f


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True,
                          text=True, timeout=120)


def _rows(path: Path) -> dict[str, dict[str, str]]:
    text = "".join(line for line in path.read_text().splitlines(keepends=True)
                   if not line.startswith("#"))
    return {r["instance_type"]: r for r in csv.DictReader(io.StringIO(text))}


def test_the_refresh_dates_figures_by_the_snapshot_commit_and_keeps_newer_ones(
        checkout: Path, tmp_path: Path) -> None:
    catalog = _catalog_file(tmp_path)
    before = _rows(catalog)
    r = _run(str(checkout), "--catalog", str(catalog))
    assert r.returncode == 0, r.stderr
    commit = _git(checkout, "rev-parse", "HEAD", when="2026-11-20T08:00:00+00:00")
    rows = _rows(catalog)
    aws_url = f"{SKYPILOT}{commit}/catalogs/v8/aws/vms.csv"  # v8, the newest with aws/

    p4d = rows["p4d.24xlarge"]
    assert (p4d["on_demand_per_hour"], p4d["source_url"], p4d["retrieved"]) == (
        "21.957642", aws_url, "2026-11-20")  # the commit's date, not today's
    # the lowest standard zone's spot price: the local zone (1.0) and the other region left out
    assert (p4d["spot_per_hour"], p4d["spot_source_url"], p4d["spot_retrieved"]) == (
        "2.4655", aws_url, "2026-11-20")
    assert p4d["notes"].startswith("spot_per_hour: indicative AWS market price")
    assert commit[:8] in p4d["notes"] and "committed 2026-11-20" in p4d["notes"]

    p5 = rows["p5.48xlarge"]
    assert (p5["on_demand_per_hour"], p5["spot_per_hour"]) == ("55.04", "17.6289")

    g5 = rows["g5.xlarge"]  # the provider's figure of 2026-12-01 is newer than the snapshot
    assert (g5["on_demand_per_hour"], g5["retrieved"]) == ("1.006", "2026-12-01")
    assert g5["source_url"] == before["g5.xlarge"]["source_url"]
    assert g5["spot_per_hour"] == "0.5" and "kept" in g5["notes"]

    g4 = rows["g4dn.xlarge"]  # SkyPilot's old spot figure is not left behind as current
    assert (g4["spot_per_hour"], g4["spot_source_url"], g4["spot_retrieved"]) == ("", "", "")

    assert rows["p9.huge"] == before["p9.huge"] and rows["m5.xlarge"] == before["m5.xlarge"]
    assert rows["gpu_1x_a10"] == before["gpu_1x_a10"]

    a2 = rows["a2-highgpu-1g"]
    assert (a2["on_demand_per_hour"], a2["spot_per_hour"]) == ("3.673388", "1.51695")
    assert a2["gpu_share"] == "0.80" and "0.73948 + 2.933908" in a2["notes"]
    assert a2["notes"].startswith("spot_per_hour: GCP's published spot list price")
    t4 = rows["n1-standard-4+nvidia-tesla-t4"]
    assert (t4["on_demand_per_hour"], t4["spot_per_hour"]) == ("0.539999", "0.1802")

    nc24 = rows["Standard_NC24ads_A100_v4"]
    assert (nc24["on_demand_per_hour"], nc24["spot_per_hour"]) == ("3.673", "0.444433")
    assert nc24["source_url"] == f"{SKYPILOT}{commit}/catalogs/v6/azure/vms.csv"
    h100 = rows["Standard_NC40ads_H100_v5"]  # spot given equal to on-demand: none published
    assert h100["spot_per_hour"] == ""

    header = [line for line in catalog.read_text().splitlines() if line.startswith("#")]
    assert header[:2] == ["# a shipped catalog", "#"]  # the hand-written part is kept
    assert any(aws_url in line for line in header)
    assert any("g5.xlarge" in line and "2026-12-01" in line for line in header)
    assert Catalog.load([catalog]).get("p4d.24xlarge", "aws") is not None  # still loads

    # a second run over the same snapshot changes nothing
    text = catalog.read_text()
    assert _run(str(checkout), "--catalog", str(catalog)).returncode == 0
    assert catalog.read_text() == text


def test_a_plain_copy_needs_the_commit_and_date_named(tmp_path: Path) -> None:
    """Files without git history: the script cannot date them, so it asks; given a date, the
    notes say it is the day the copy was read, not the commit's."""
    copy = tmp_path / "copy"
    (copy / "catalogs" / "v8" / "aws").mkdir(parents=True)
    (copy / "catalogs" / "v8" / "aws" / "vms.csv").write_text(AWS_V8)
    catalog = _catalog_file(tmp_path)
    before = catalog.read_text()
    r = _run(str(copy), "--catalog", str(catalog))
    assert r.returncode != 0 and "--snapshot aws=COMMIT,YYYY-MM-DD" in r.stderr
    assert catalog.read_text() == before  # nothing half-written
    r = _run(str(copy), "--catalog", str(catalog), "--snapshot", "aws=0123abcd,2026-12-06")
    assert r.returncode == 0, r.stderr
    rows = _rows(catalog)
    assert rows["p4d.24xlarge"]["retrieved"] == "2026-12-06"
    assert "read 2026-12-06" in rows["p4d.24xlarge"]["notes"]
    assert rows["a2-highgpu-1g"] == _rows_of(before)["a2-highgpu-1g"]  # no GCP file: as was
    assert "gcp: not in the copy" in catalog.read_text()


def _rows_of(text: str) -> dict[str, dict[str, str]]:
    body = "".join(line for line in text.splitlines(keepends=True) if not line.startswith("#"))
    return {r["instance_type"]: r for r in csv.DictReader(io.StringIO(body))}


# --- the shipped catalog ---------------------------------------------------------------------

SHIPPED = Catalog.load()


def test_every_shipped_row_is_well_formed_dated_and_sourced() -> None:
    today = dt.datetime.now(dt.timezone.utc).date()
    assert SHIPPED.rows
    for r in SHIPPED.rows:
        assert r.provider and r.instance_type and r.currency == "USD", r.name
        assert r.on_demand_per_hour > 0 and r.vcpus > 0 and r.memory_gib > 0, r.name
        assert (r.gpu_count > 0) == bool(r.gpu_model), r.name
        assert r.source_url.startswith("https://"), r.name
        assert r.retrieved and dt.date.fromisoformat(r.retrieved) <= today, r.name
        if r.spot_per_hour is not None:
            assert 0 < r.spot_per_hour < r.on_demand_per_hour, r.name
            assert r.spot_source_url.startswith("https://") and r.spot_retrieved, r.name
            assert dt.date.fromisoformat(r.spot_retrieved) <= today, r.name
        else:
            assert not r.spot_source_url and not r.spot_retrieved, r.name


def test_the_header_names_every_skypilot_snapshot_the_rows_cite() -> None:
    text = SHIPPED_FILE.read_text()
    header = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    cited = {u for r in SHIPPED.rows for u in (r.source_url, r.spot_source_url)
             if u.startswith(SKYPILOT)}
    assert cited  # the refreshed rows
    for url in cited:
        commit = re.match(rf"{re.escape(SKYPILOT)}([0-9a-f]{{40}})/", url)
        assert commit, url
        assert commit.group(1)[:8] in header or url in header, url
    for r in SHIPPED.rows:  # each figure from SkyPilot says so, with its commit
        for url, day in ((r.source_url, r.retrieved), (r.spot_source_url, r.spot_retrieved)):
            if url.startswith(SKYPILOT):
                sha = url[len(SKYPILOT):].split("/")[0][:8]
                assert sha in r.notes and day in r.notes, r.name


def test_the_demo_instance_shows_the_catalogs_own_date() -> None:
    """The demo prices the trace's instance from the shipped catalog: its views show that
    row's date, and it is stale exactly when that date is past the threshold."""
    trace = (ROOT / "examples" / "gpu_trace.json").read_text()
    itype = re.search(r'"instance_type":\s*"([^"]+)"', trace)
    assert itype is not None
    row = SHIPPED.get(itype.group(1), "aws")
    assert row is not None
    p = resolve_pricing(SHIPPED, instance_type=itype.group(1), environ={}, gpu=None, host=None,
                        hourly_rate=None)
    now = dt.datetime.now(dt.timezone.utc)
    doc = price_doc(p, now.timestamp(), 90)
    age = (now.date() - dt.date.fromisoformat(row.retrieved)).days
    assert (doc["retrieved"], doc["age_days"], doc["stale"]) == (row.retrieved, age, age > 90)
    demo = (ROOT / "examples" / "jupyter_server_config.py").read_text()
    assert "price_stale_after_days" not in demo  # the demo does not hide an old price
