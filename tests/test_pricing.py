"""Pricing: the shipped catalog, user overrides, instance detection and the GPU/host split."""

from __future__ import annotations

import json
import re
from datetime import date
from pathlib import Path

import pytest

from jupyter_costguard.cost.catalog import (
    HOST_PER_GIB_HOUR,
    HOST_PER_VCPU_HOUR,
    Catalog,
    CatalogError,
    InstanceType,
    default_gpu_share,
    normalize_gpu_name,
)
from jupyter_costguard.cost.pricing import (
    ENV_INSTANCE_TYPE,
    HOURLY_RATE_GPU_SHARE,
    Pricing,
    provider_from_dmi,
    resolve_pricing,
)
from jupyter_costguard.sampling.records import GpuReading, GpuSample
from tests.support.readings import host, reading

GIB = 1024**3


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog.load()


def resolve(catalog: Catalog, **kw: object) -> Pricing:
    args: dict[str, object] = {"instance_type": None, "environ": {}, "gpu": None, "host": None,
                               "hourly_rate": None}
    args.update(kw)
    return resolve_pricing(catalog, **args)  # type: ignore[arg-type]


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


# --- the shipped catalog -------------------------------------------------------------------


def test_shipped_catalog_is_broad_and_dated(catalog: Catalog) -> None:
    rows = catalog.rows
    assert len(rows) >= 40
    providers = {r.provider for r in rows}
    assert {"aws", "gcp", "azure"} <= providers
    assert providers - {"aws", "gcp", "azure"}, "expected at least one GPU cloud too"
    for r in rows:
        assert r.source_url.startswith("https://"), r.name
        assert r.retrieved is not None
        assert date(2023, 1, 1) <= date.fromisoformat(r.retrieved) <= date.today(), r.name
        assert r.currency == "USD"
        assert r.region
        assert r.on_demand_per_hour > 0
        assert r.spot_per_hour is None or 0 < r.spot_per_hour < r.on_demand_per_hour, r.name
        assert r.origin.startswith("shipped catalog.csv:")
    assert any(r.is_gpu for r in rows) and any(not r.is_gpu for r in rows)
    for p in ("aws", "gcp", "azure"):
        assert any(r.is_gpu for r in rows if r.provider == p)
        assert any(not r.is_gpu for r in rows if r.provider == p)


def test_shipped_catalog_names_gpus_as_nvml_does(catalog: Catalog) -> None:
    models = {r.gpu_model for r in catalog.rows if r.is_gpu}
    assert {"NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-80GB", "Tesla T4",
            "NVIDIA H100 80GB HBM3", "NVIDIA A10G", "NVIDIA L4", "NVIDIA L40S",
            "Tesla V100-SXM2-16GB"} <= models
    for r in catalog.rows:
        assert bool(r.gpu_model) == (r.gpu_count > 0), r.name
        assert (r.gpu_memory_gib is not None) == r.is_gpu, r.name


def test_well_known_list_prices(catalog: Catalog) -> None:
    p4d = catalog.get("p4d.24xlarge")
    assert p4d is not None and p4d.provider == "aws"
    assert (p4d.gpu_model, p4d.gpu_count, p4d.vcpus, p4d.memory_gib) == (
        "NVIDIA A100-SXM4-40GB", 8, 96, 1152)
    assert 20 < p4d.on_demand_per_hour < 40  # the design's "~$32/h"
    t4 = catalog.get("g4dn.xlarge")
    assert t4 is not None and 0.3 < t4.on_demand_per_hour < 1.0


def test_every_shipped_gpu_row_is_detectable_from_its_own_facts(catalog: Catalog) -> None:
    for r in catalog.rows:
        if not r.is_gpu:
            continue
        # what NVML and psutil would report on it: the OS sees a bit less memory
        found = catalog.match(r.gpu_model, r.gpu_count, r.vcpus, r.memory_gib * 0.96,
                              provider=r.provider)
        assert found == r, r.name


def test_gpu_share_of_shipped_rows_is_sane(catalog: Catalog) -> None:
    for r in catalog.rows:
        if not r.is_gpu:
            assert r.gpu_share == 0.0, r.name
        elif r.catalog_gpu_share is None:
            assert 0.5 <= r.gpu_share < 1.0, r.name  # the default rule's clamp
        else:
            assert 0.0 < r.gpu_share < 1.0, r.name


# --- lookup --------------------------------------------------------------------------------


def test_get_is_case_insensitive_and_takes_provider(catalog: Catalog) -> None:
    row = catalog.get("standard_nc24ads_a100_v4")
    assert row is not None and row.instance_type == "Standard_NC24ads_A100_v4"
    assert catalog.get("p4d.24xlarge", provider="AWS") == catalog.get("aws/p4d.24xlarge")
    assert catalog.get("p4d.24xlarge", provider="gcp") is None
    assert catalog.get("no-such-type") is None


def test_normalize_gpu_name() -> None:
    a100 = normalize_gpu_name("NVIDIA A100-SXM4-40GB")
    assert normalize_gpu_name("a100 sxm4 40gb") == a100
    assert normalize_gpu_name("  NVIDIA A100_SXM4-40GB ") == a100
    assert normalize_gpu_name("NVIDIA A100-SXM4-40GB MIG 1g.5gb") == a100
    assert normalize_gpu_name("Tesla T4") == normalize_gpu_name("NVIDIA T4") == "t4"
    assert normalize_gpu_name("NVIDIA A100-SXM4-80GB") != a100
    assert normalize_gpu_name("NVIDIA A10G") != normalize_gpu_name("NVIDIA A10")


# --- detection -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("memory_gib", "expected"),
    [
        (1152 * 0.97, "aws/p4d.24xlarge"),
        (680 * 0.95, "gcp/a2-highgpu-8g"),
        (900 * 0.97, "azure/Standard_ND96asr_v4"),
    ],
)
def test_match_uses_host_memory_to_tell_providers_apart(
    catalog: Catalog, memory_gib: float, expected: str
) -> None:
    # NVML spelling, different case and spacing, memory a little under nominal
    for name in ("NVIDIA A100-SXM4-40GB", "nvidia a100 sxm4 40gb"):
        row = catalog.match(name, 8, 96, memory_gib)
        assert row is not None and row.name == expected


def test_match_requires_exact_gpu_model_count_and_vcpus(catalog: Catalog) -> None:
    assert catalog.match("NVIDIA A100-SXM4-40GB", 8, 96, 1100) is not None
    p4de = catalog.match("NVIDIA A100-SXM4-80GB", 8, 96, 1100)  # same host, other GPU
    assert p4de is not None and p4de.name == "aws/p4de.24xlarge"
    assert catalog.match("NVIDIA A100-SXM4-40GB", 4, 96, 1100) is None  # 4 of 8 visible
    assert catalog.match("NVIDIA A100-SXM4-40GB", 8, 64, 1100) is None
    # 800 GiB is >10% from p4d (1152), ND96asr_v4 (900) and a2-highgpu-8g (680)
    assert catalog.match("NVIDIA A100-SXM4-40GB", 8, 96, 800) is None
    assert catalog.match("NVIDIA GeForce RTX 4090", 1, 16, 64) is None


def test_ambiguous_match_returns_none_unless_a_provider_is_preferred(catalog: Catalog) -> None:
    # AWS g6.xlarge and GCP g2-standard-4 are both 1x L4, 4 vCPU, 16 GiB
    assert catalog.match("NVIDIA L4", 1, 4, 15.4) is None
    gcp = catalog.match("NVIDIA L4", 1, 4, 15.4, provider="gcp")
    assert gcp is not None and gcp.name == "gcp/g2-standard-4"

    p = resolve(catalog, gpu=reading("NVIDIA L4", 1, 24), host=host(4, 15.4))
    assert not p.priced and p.source == "unpriced"
    assert "aws/g6.xlarge" in p.detail and "gcp/g2-standard-4" in p.detail

    p = resolve(catalog, gpu=reading("NVIDIA L4", 1, 24), host=host(4, 15.4), provider="aws")
    assert p.source == "detected" and p.instance is not None
    assert p.instance.name == "aws/g6.xlarge"


def test_clearly_closer_memory_is_not_a_tie(tmp_path: Path) -> None:
    f = write(tmp_path, "two.csv", "provider,instance_type,gpu_model,gpu_count,vcpus,memory_gib,"
              "on_demand_per_hour\n"
              "a,big,NVIDIA L4,1,8,32,1\n"
              "b,small,NVIDIA L4,1,8,30,1\n")
    c = Catalog([r for r in Catalog.load([f]).rows if r.provider in ("a", "b")])
    assert c.match("NVIDIA L4", 1, 8, 29.4) == c.get("b/small")  # 2% vs 8% off
    assert c.match("NVIDIA L4", 1, 8, 31.8) == c.get("a/big")
    assert c.match("NVIDIA L4", 1, 8, 31.0) is None  # 3.1% vs 3.3%: a tie


def test_preferred_provider_beats_a_closer_foreign_row(catalog: Catalog) -> None:
    # 8x H100, 208 vCPU: Lambda's 1800 GiB is closer to 1797 GiB than GCP a3's 1872 GiB
    lam = catalog.match("NVIDIA H100 80GB HBM3", 8, 208, 1797)
    assert lam is not None and lam.name == "lambda/gpu_8x_h100_sxm5"
    a3 = catalog.match("NVIDIA H100 80GB HBM3", 8, 208, 1797, provider="gcp")
    assert a3 is not None and a3.name == "gcp/a3-highgpu-8g"
    # a provider with no fitting row is no reason to find nothing
    assert catalog.match("NVIDIA H100 80GB HBM3", 8, 208, 1797, provider="azure") == lam


@pytest.mark.parametrize(
    ("vendor", "product", "expected"),
    [
        ("Amazon EC2", "p4d.24xlarge", "aws"),
        ("Google", "Google Compute Engine", "gcp"),
        ("Microsoft Corporation", "Virtual Machine", "azure"),
        ("QEMU", "Standard PC (i440FX + PIIX, 1996)", None),
        ("Dell Inc.", "PowerEdge R750", None),
    ],
)
def test_provider_from_dmi(vendor: str, product: str, expected: str | None) -> None:
    assert provider_from_dmi(vendor + "\n", product + "\n") == expected


def test_detection_counts_physical_gpus_under_mig(catalog: Catalog) -> None:
    parent = "GPU-parent"
    migs = tuple(
        GpuSample(index=i, uuid=f"MIG-{i}", name="NVIDIA A100-SXM4-40GB MIG 3g.20gb",
                  memory_total_bytes=20 * GIB, memory_used_bytes=0, utilization_percent=None,
                  power_watts=None, mig_parent_uuid=parent)
        for i in range(2)
    )
    p = resolve(catalog, gpu=GpuReading(status="ok", gpus=migs), host=host(12, 83.0))
    assert p.source == "detected" and p.instance is not None
    assert p.instance.name == "gcp/a2-highgpu-1g"


def test_detection_detail_says_what_matched(catalog: Catalog) -> None:
    p = resolve(catalog, gpu=reading("NVIDIA A100-SXM4-40GB", 8), host=host(96, 1120))
    assert p.source == "detected" and p.priced
    row = catalog.get("aws/p4d.24xlarge")
    assert row is not None and p.instance == row and row.retrieved is not None
    assert p.rate_per_hour == row.on_demand_per_hour
    assert "8x NVIDIA A100-SXM4-40GB with 96 vCPU/1120 GiB" in p.detail
    assert "aws/p4d.24xlarge" in p.detail and row.retrieved in p.detail


def test_cpu_only_hosts_are_not_detected_by_shape(catalog: Catalog) -> None:
    # 4 vCPU / 16 GiB is m5.xlarge, n2-standard-4 and a laptop alike
    p = resolve(catalog, gpu=GpuReading(status="no-gpu", detail="NVML not found"),
                host=host(4, 15.5))
    assert not p.priced
    assert "NVML not found" in p.detail and "CPU-only" in p.detail


# --- the order of sources ------------------------------------------------------------------


def test_config_beats_env_beats_detection_beats_hourly_rate(catalog: Catalog) -> None:
    facts = {"gpu": reading("NVIDIA A100-SXM4-40GB", 8), "host": host(96, 1120)}
    env = {ENV_INSTANCE_TYPE: "g5.xlarge"}

    p = resolve(catalog, instance_type="p5.48xlarge", environ=env, hourly_rate=7.0, **facts)
    assert (p.source, p.instance) == ("config", catalog.get("p5.48xlarge"))
    assert "c.CostGuard.instance_type" in p.detail

    p = resolve(catalog, instance_type=None, environ=env, hourly_rate=7.0, **facts)
    assert (p.source, p.instance) == ("environment", catalog.get("g5.xlarge"))
    assert ENV_INSTANCE_TYPE in p.detail

    p = resolve(catalog, instance_type="  ", environ={ENV_INSTANCE_TYPE: ""}, hourly_rate=7.0,
                **facts)
    assert (p.source, p.instance) == ("detected", catalog.get("p4d.24xlarge"))

    p = resolve(catalog, hourly_rate=7.0, gpu=reading("NVIDIA A100-SXM4-40GB", 3),
                host=host(96, 1120))
    assert (p.source, p.instance, p.rate_per_hour) == ("hourly_rate", None, 7.0)
    assert p.priced and p.currency == "USD"
    assert "no catalog match for 3x NVIDIA A100-SXM4-40GB" in p.detail


def test_hourly_rate_currency_and_gpu_share(catalog: Catalog) -> None:
    with_gpus = resolve(catalog, hourly_rate=4.0, currency="EUR", gpu=reading("Tesla T4", 3),
                        host=host(4, 15))
    assert with_gpus.currency == "EUR" and with_gpus.gpu_share == HOURLY_RATE_GPU_SHARE
    no_gpus = resolve(catalog, hourly_rate=4.0, gpu=GpuReading(status="no-gpu"),
                      host=host(4, 15))
    assert no_gpus.gpu_share == 0.0
    told = resolve(catalog, hourly_rate=4.0, gpu_share=0.6, gpu=reading("Tesla T4", 3))
    assert told.gpu_share == 0.6


def test_unknown_configured_type_is_unpriced_and_named(catalog: Catalog) -> None:
    facts = {"gpu": reading("NVIDIA A100-SXM4-40GB", 8), "host": host(96, 1120)}
    p = resolve(catalog, instance_type="p9.mega", hourly_rate=3.0, **facts)
    assert not p.priced and p.source == "unpriced" and p.instance is None
    assert "'p9.mega'" in p.detail and "c.CostGuard.instance_type" in p.detail

    p = resolve(catalog, environ={ENV_INSTANCE_TYPE: "nope-1"}, **facts)
    assert not p.priced and "nope-1" in p.detail and ENV_INSTANCE_TYPE in p.detail


def test_unpriced_detail_lists_what_was_tried(catalog: Catalog) -> None:
    p = resolve(catalog, gpu=reading("NVIDIA X", 1), host=host(8, 30))
    assert not p.priced and p.rate_per_hour is None and p.source == "unpriced"
    assert p.gpu_rate_per_hour is None and p.host_rate_per_hour is None
    assert p.detail == (
        "no instance_type configured, COSTGUARD_INSTANCE_TYPE unset, no catalog match for "
        "1x NVIDIA X with 8 vCPU/30.0 GiB; set c.CostGuard.instance_type or "
        "c.CostGuard.hourly_rate")
    p = resolve(catalog)
    assert not p.priced and "no GPU reading" in p.detail


def test_name_for_several_providers_needs_the_provider(tmp_path: Path, catalog: Catalog) -> None:
    f = write(tmp_path, "mine.csv", "provider,instance_type,gpu_count,vcpus,memory_gib,"
              "on_demand_per_hour\nmycloud,p4d.24xlarge,0,96,1152,5\n")
    c = Catalog.load([f])
    p = resolve(c, instance_type="p4d.24xlarge")
    assert not p.priced and "aws/p4d.24xlarge" in p.detail and "mycloud/p4d.24xlarge" in p.detail
    p = resolve(c, instance_type="mycloud/p4d.24xlarge")
    assert p.priced and p.rate_per_hour == 5.0
    p = resolve(c, instance_type="p4d.24xlarge", provider="mycloud")
    assert p.priced and p.rate_per_hour == 5.0


# --- markets -------------------------------------------------------------------------------


def test_spot_price_used_when_known(catalog: Catalog) -> None:
    p = resolve(catalog, instance_type="g4dn.xlarge", market="spot")
    row = catalog.get("g4dn.xlarge")
    assert row is not None and row.spot_per_hour is not None
    assert (p.market, p.rate_per_hour) == ("spot", row.spot_per_hour)


def test_spot_without_price_falls_back_to_on_demand(catalog: Catalog) -> None:
    # Azure's H100 v5 types ship no spot figure (every AWS GPU row has one now)
    row = catalog.get("Standard_ND96isr_H100_v5")
    assert row is not None and row.spot_per_hour is None
    p = resolve(catalog, instance_type="Standard_ND96isr_H100_v5", market="spot")
    assert p.priced and p.rate_per_hour == row.on_demand_per_hour
    # the market named is the machine's; the one priced, and why, beside it
    assert (p.market, p.market_priced) == ("spot", "on-demand")
    assert p.market_note is not None and "no spot price" in p.market_note
    assert "catalog_files" in p.market_note and "catalog update" in p.market_note


def test_bad_arguments_raise(catalog: Catalog) -> None:
    with pytest.raises(ValueError, match="market"):
        resolve(catalog, market="reserved")
    with pytest.raises(ValueError, match="gpu_share"):
        resolve(catalog, hourly_rate=1.0, gpu_share=1.5)
    with pytest.raises(ValueError, match="hourly_rate"):
        resolve(catalog, hourly_rate=-1.0)


# --- gpu share -----------------------------------------------------------------------------


def test_gpu_share_default_rule(catalog: Catalog) -> None:
    p4d = catalog.get("p4d.24xlarge")
    assert p4d is not None and p4d.catalog_gpu_share is None
    host_part = 96 * HOST_PER_VCPU_HOUR + 1152 * HOST_PER_GIB_HOUR
    assert p4d.gpu_share == pytest.approx(1 - host_part / p4d.on_demand_per_hour)
    # the host part never exceeds half of a GPU instance's rate
    assert default_gpu_share(1, 64, 512, 2.0) == pytest.approx(0.5)
    assert default_gpu_share(1, 4, 16, 1.0) == pytest.approx(1 - 0.24)
    assert default_gpu_share(0, 8, 32, 0.384) == 0.0


def test_gpu_share_from_catalog_and_explicit_argument(catalog: Catalog) -> None:
    a2 = catalog.get("a2-highgpu-1g")
    assert a2 is not None and a2.catalog_gpu_share is not None
    assert a2.gpu_share == a2.catalog_gpu_share
    p = resolve(catalog, instance_type="a2-highgpu-1g")
    assert p.gpu_share == a2.catalog_gpu_share
    p = resolve(catalog, instance_type="a2-highgpu-1g", gpu_share=0.5)
    assert p.gpu_share == 0.5 and "as configured" in p.detail
    assert p.gpu_rate_per_hour is not None and p.host_rate_per_hour is not None
    assert p.gpu_rate_per_hour + p.host_rate_per_hour == pytest.approx(a2.on_demand_per_hour)
    cpu = resolve(catalog, instance_type="m5.xlarge")
    assert cpu.gpu_share == 0.0 and cpu.priced


# --- user files ----------------------------------------------------------------------------


def test_user_csv_overrides_a_price_and_adds_a_row(tmp_path: Path) -> None:
    f = write(tmp_path, "negotiated.csv",
              "# our EDP discount\n"
              "provider,instance_type,on_demand_per_hour,retrieved\n"
              "aws,p4d.24xlarge,21.5,2025-03-01\n")
    g = write(tmp_path, "onprem.csv",
              "provider,instance_type,gpu_model,gpu_count,gpu_memory_gib,vcpus,memory_gib,"
              "on_demand_per_hour\n"
              "onprem,dgx-a100,NVIDIA A100-SXM4-80GB,8,80,256,2048,12\n")
    shipped = Catalog.load()
    c = Catalog.load([f, g])
    assert len(c) == len(shipped) + 1

    p4d = c.get("p4d.24xlarge")
    before = shipped.get("p4d.24xlarge")
    assert p4d is not None and before is not None
    assert p4d.on_demand_per_hour == 21.5 and p4d.retrieved == "2025-03-01"
    assert (p4d.gpu_model, p4d.vcpus, p4d.memory_gib) == (
        before.gpu_model, before.vcpus, before.memory_gib)
    assert p4d.origin == f"{f}:3" and p4d.source_url == f.resolve().as_uri()

    dgx = c.match("NVIDIA A100-SXM4-80GB", 8, 256, 2000)
    assert dgx is not None and dgx.name == "onprem/dgx-a100"
    assert dgx.currency == "USD" and dgx.retrieved is None and dgx.spot_per_hour is None
    p = resolve(c, gpu=reading("NVIDIA A100-SXM4-80GB", 8, 80), host=host(256, 2000))
    assert p.source == "detected" and p.rate_per_hour == 12.0
    assert "user-supplied price" in p.detail


def test_user_json_file(tmp_path: Path) -> None:
    rows = [
        {"provider": "gcp", "instance_type": "g2-standard-4", "on_demand_per_hour": 0.5,
         "spot_per_hour": 0.2, "gpu_share": 0.75},
        {"provider": "runpod", "instance_type": "1x-h100-sxm", "gpu_model": "NVIDIA H100 80GB HBM3",
         "gpu_count": 1, "vcpus": 16, "memory_gib": 125, "on_demand_per_hour": "2.99",
         "spot_per_hour": None},
    ]
    f = write(tmp_path, "extra.json", json.dumps(rows, indent=2))
    c = Catalog.load([f])
    g2 = c.get("gcp/g2-standard-4")
    assert g2 is not None
    assert (g2.on_demand_per_hour, g2.spot_per_hour, g2.gpu_share) == (0.5, 0.2, 0.75)
    assert g2.gpu_model == "NVIDIA L4" and g2.origin == f"{f}:2"
    rp = c.get("1x-h100-sxm")
    assert rp is not None and rp.on_demand_per_hour == 2.99 and rp.origin == f"{f}:9"
    p = resolve(c, instance_type="runpod/1x-h100-sxm", market="spot")
    assert (p.market, p.market_priced, p.rate_per_hour) == ("spot", "on-demand", 2.99)


def test_later_files_win(tmp_path: Path) -> None:
    a = write(tmp_path, "a.csv", "provider,instance_type,on_demand_per_hour\naws,g5.xlarge,1\n")
    b = write(tmp_path, "b.json", '[{"provider": "aws", "instance_type": "g5.xlarge",'
              ' "on_demand_per_hour": 2}]')
    row = Catalog.load([a, b]).get("g5.xlarge")
    assert row is not None and row.on_demand_per_hour == 2.0


HEADER = "provider,instance_type,gpu_model,gpu_count,vcpus,memory_gib,on_demand_per_hour\n"


@pytest.mark.parametrize(
    ("body", "line", "message"),
    [
        ("x,t1,,0,4,16,cheap\n", 3, "on_demand_per_hour must be a number"),
        ("x,t1,,0,4,16,1\nx,t2,,0,4,16,-0.5\n", 4, "must not be negative"),
        ("x,t1,,0,4,16,1\nx,t2,,0,4.5,16,1\n", 4, "vcpus must be a whole number"),
        ("x,t1,,0,4,16,1\nx,t2,,0,4,16\n", 4, "6 fields, the header has 7"),
        ("x,t1,,2,4,16,1\n", 3, "gpu_model is empty"),
        ("x,t1,Tesla T4,0,4,16,1\n", 3, "gpu_count 0"),
        ("x,t1,,0,4,,1\n", 3, "memory_gib is empty"),
        ("x,t1,,0,4,16,nan\n", 3, "must be finite"),
        ("x,t1,,0,4,16,1\nx,T1,,0,4,16,1\n", 4, "already given on line 3"),
        (",t1,,0,4,16,1\n", 3, "must not be empty"),
    ],
)
def test_bad_csv_rows_name_file_and_line(tmp_path: Path, body: str, line: int,
                                         message: str) -> None:
    f = write(tmp_path, "bad.csv", "# comment\n" + HEADER + body)
    with pytest.raises(CatalogError, match=re.escape(f"{f}:{line}: ") + ".*" + re.escape(message)):
        Catalog.load([f])


def test_missing_columns(tmp_path: Path) -> None:
    f = write(tmp_path, "new.csv", "provider,instance_type,on_demand_per_hour\n"
              "aws,g5.xlarge,1.1\nnewcloud,box,3\n")
    with pytest.raises(CatalogError, match=rf"{re.escape(str(f))}:3: new instance type lacks "
                       r"required column\(s\) gpu_count, vcpus, memory_gib"):
        Catalog.load([f])
    f = write(tmp_path, "typo.csv", "provider,instance_type,on_demand_per_hr\naws,g5.xlarge,1\n")
    with pytest.raises(CatalogError, match=rf"{re.escape(str(f))}:1: unknown column.*"
                       "on_demand_per_hr"):
        Catalog.load([f])
    f = write(tmp_path, "nokey.csv", "instance_type,on_demand_per_hour\ng5.xlarge,1\n")
    with pytest.raises(CatalogError, match="missing column 'provider'"):
        Catalog.load([f])


def test_bad_json_files(tmp_path: Path) -> None:
    f = write(tmp_path, "bad.json", '[\n  {"provider": "aws", "instance_type": "g5.xlarge",\n'
              '   "on_demand_per_hour": 1},\n  {"provider": "aws", "instance_type": "g6.xlarge",'
              '\n   "on_demand_per_hour": -2}\n]\n')
    with pytest.raises(CatalogError, match=re.escape(f"{f}:4: on_demand_per_hour must not be")):
        Catalog.load([f])
    f = write(tmp_path, "bool.json", '[{"provider": "aws", "instance_type": "g5.xlarge", '
              '"vcpus": true}]')
    with pytest.raises(CatalogError, match="vcpus must be a number"):
        Catalog.load([f])
    f = write(tmp_path, "obj.json", '{"provider": "aws"}')
    with pytest.raises(CatalogError, match="expected a JSON list"):
        Catalog.load([f])
    f = write(tmp_path, "broken.json", '[\n{"provider": "aws",,}\n]')
    with pytest.raises(CatalogError, match=re.escape(f"{f}:2: invalid JSON")):
        Catalog.load([f])


def test_bad_date_and_share_and_unreadable_file(tmp_path: Path) -> None:
    f = write(tmp_path, "d.csv", "provider,instance_type,retrieved\naws,g5.xlarge,June 2025\n")
    with pytest.raises(CatalogError, match=":2: retrieved must be an ISO date"):
        Catalog.load([f])
    f = write(tmp_path, "s.csv", "provider,instance_type,gpu_share\naws,m5.xlarge,0.3\n")
    with pytest.raises(CatalogError, match=":2: gpu_share must be empty or 0 for a CPU-only"):
        Catalog.load([f])
    f = write(tmp_path, "s2.csv", "provider,instance_type,gpu_share\naws,g5.xlarge,1.3\n")
    with pytest.raises(CatalogError, match=":2: gpu_share must be between 0 and 1"):
        Catalog.load([f])
    with pytest.raises(CatalogError, match="cannot read catalog file"):
        Catalog.load([tmp_path / "missing.csv"])


def test_a_failed_file_leaves_no_half_applied_rows(tmp_path: Path) -> None:
    c = Catalog.load()
    f = write(tmp_path, "half.csv", "provider,instance_type,on_demand_per_hour\n"
              "aws,g5.xlarge,0.01\naws,g6.xlarge,oops\n")
    with pytest.raises(CatalogError):
        c.merge_file(f)
    row = c.get("g5.xlarge")
    assert row is not None and row.on_demand_per_hour == pytest.approx(1.006)


def test_instance_type_is_frozen(catalog: Catalog) -> None:
    row = catalog.rows[0]
    assert isinstance(row, InstanceType)
    with pytest.raises(AttributeError):
        row.on_demand_per_hour = 0.0  # type: ignore[misc]
