"""Issue 12: the price where users really run: cloud identity, regions, spot, containers,
currencies. Every expected rate is worked out here from the catalog rows the case names."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from jupyter_costguard.cloud.container import (
    CgroupLimits,
    container_share,
    in_container,
    read_cgroup_limits,
)
from jupyter_costguard.cloud.metadata import CloudIdentity, MetadataResult
from jupyter_costguard.cost.catalog import Catalog, InstanceType
from jupyter_costguard.cost.pricing import ContainerFacts, Pricing, resolve_pricing
from jupyter_costguard.cost.spend import split_interval
from jupyter_costguard.sampling.records import (
    GpuReading,
    KernelInfo,
    KernelSample,
    Sample,
)
from tests.support.readings import host, reading

GIB = 1024**3
A100_40 = "NVIDIA A100-SXM4-40GB"

#: a user catalog on top of the shipped one: more regions, spot prices, another currency
USER_ROWS = [
    {"provider": "aws", "instance_type": "p4d.24xlarge", "region": "eu-north-1",
     "on_demand_per_hour": 19.5, "spot_per_hour": 7.25, "retrieved": "2026-11-20"},
    {"provider": "aws", "instance_type": "p4d.24xlarge", "region": "us-east-1",
     "spot_per_hour": 9.5},
    {"provider": "gcp", "instance_type": "a2-highgpu-1g", "region": "europe-west4",
     "on_demand_per_hour": 4.0, "spot_per_hour": 1.2, "retrieved": "2026-11-20"},
    {"provider": "gcp", "instance_type": "a2-highgpu-1g", "region": "us-central1",
     "spot_per_hour": 1.1},
    {"provider": "azure", "instance_type": "Standard_NC24ads_A100_v4", "region": "eastus",
     "spot_per_hour": 1.5},
    {"provider": "azure", "instance_type": "Standard_NC24ads_A100_v4", "region": "westeurope",
     "on_demand_per_hour": 4.1, "retrieved": "2026-11-20"},
]


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Catalog:
    path = tmp_path_factory.mktemp("cat") / "regions.json"
    path.write_text(json.dumps(USER_ROWS))
    return Catalog.load([path])


def gpus(n: int, name: str = A100_40) -> GpuReading:
    return reading(name, n)


def answer(provider: str, itype: str, region: str, market: str = "on-demand") -> MetadataResult:
    identity = CloudIdentity(provider, itype, region, f"{region}-a", market,
                             f"{provider} metadata (test)")
    return MetadataResult(identity, (f"{provider}: answered (test)",), True)


def limits(cpus: float | None, mem_gib: float | None) -> ContainerFacts:
    return ContainerFacts(CgroupLimits(cpus, None if mem_gib is None else int(mem_gib * GIB),
                                       "/kubepods/pod1", "cgroup v2 (test)"), mode="on")


def row(catalog: Catalog, name: str, provider: str, region: str | None = None
        ) -> InstanceType:
    found = catalog.get(name, provider, region)
    assert found is not None, (name, provider, region)
    return found


@dataclass
class Case:
    id: str
    kwargs: dict[str, Any]
    # (provider, type, region whose row prices it, market) and the container's facts
    priced: tuple[str, str, str | None, str]
    source: str
    share: tuple[int, int, float, float] | None = None  # held, of, cpu share, memory share
    note: bool = False


P4D_HOST = host(96, 1152)  # a p4d's own shape (NVML and psutil inside a VM)

CASES = [
    Case("aws-metadata-on-demand", dict(metadata=answer("aws", "p4d.24xlarge", "us-east-1"),
                                        gpu=gpus(8), host=P4D_HOST),
         ("aws", "p4d.24xlarge", "us-east-1", "on-demand"), "metadata"),
    Case("aws-metadata-spot", dict(metadata=answer("aws", "p4d.24xlarge", "us-east-1", "spot"),
                                   gpu=gpus(8), host=P4D_HOST),
         ("aws", "p4d.24xlarge", "us-east-1", "spot"), "metadata"),
    Case("aws-metadata-other-region", dict(
        metadata=answer("aws", "p4d.24xlarge", "eu-north-1"), gpu=gpus(8), host=P4D_HOST),
         ("aws", "p4d.24xlarge", "eu-north-1", "on-demand"), "metadata"),
    Case("aws-metadata-other-region-spot", dict(
        metadata=answer("aws", "p4d.24xlarge", "eu-north-1", "spot"), gpu=gpus(8),
        host=P4D_HOST), ("aws", "p4d.24xlarge", "eu-north-1", "spot"), "metadata"),
    Case("aws-region-not-in-catalog", dict(
        metadata=answer("aws", "p4d.24xlarge", "ap-south-2"), gpu=gpus(8), host=P4D_HOST),
         ("aws", "p4d.24xlarge", None, "on-demand"), "metadata", note=True),
    Case("gcp-metadata-on-demand", dict(
        metadata=answer("gcp", "a2-highgpu-1g", "us-central1"), gpu=gpus(1), host=host(12, 85)),
         ("gcp", "a2-highgpu-1g", "us-central1", "on-demand"), "metadata"),
    Case("gcp-metadata-spot", dict(
        metadata=answer("gcp", "a2-highgpu-1g", "us-central1", "spot"), gpu=gpus(1),
        host=host(12, 85)), ("gcp", "a2-highgpu-1g", "us-central1", "spot"), "metadata"),
    Case("gcp-europe-spot", dict(
        metadata=answer("gcp", "a2-highgpu-1g", "europe-west4", "spot"), gpu=gpus(1),
        host=host(12, 85)), ("gcp", "a2-highgpu-1g", "europe-west4", "spot"), "metadata"),
    Case("azure-metadata-spot", dict(
        metadata=answer("azure", "Standard_NC24ads_A100_v4", "eastus", "spot"),
        gpu=gpus(1, "NVIDIA A100 80GB PCIe"), host=host(24, 220)),
         ("azure", "Standard_NC24ads_A100_v4", "eastus", "spot"), "metadata"),
    Case("azure-westeurope", dict(
        metadata=answer("azure", "Standard_NC24ads_A100_v4", "westeurope"),
        gpu=gpus(1, "NVIDIA A100 80GB PCIe"), host=host(24, 220)),
         ("azure", "Standard_NC24ads_A100_v4", "westeurope", "on-demand"), "metadata"),
    # the order of truth: config > environment > metadata > shape
    Case("config-beats-metadata", dict(
        instance_type="a2-highgpu-1g", metadata=answer("aws", "p4d.24xlarge", "us-east-1"),
        gpu=gpus(8), host=P4D_HOST), ("gcp", "a2-highgpu-1g", None, "on-demand"), "config",
         note=True),  # the metadata's region (us-east-1) is not one of a2's
    Case("environment-beats-metadata", dict(
        environ={"COSTGUARD_INSTANCE_TYPE": "aws/p4d.24xlarge"},
        metadata=answer("gcp", "a2-highgpu-1g", "us-central1"), gpu=gpus(1),
        host=host(12, 85)), ("aws", "p4d.24xlarge", None, "on-demand"), "environment",
         note=True),
    Case("env-region-and-market", dict(
        environ={"COSTGUARD_INSTANCE_TYPE": "p4d.24xlarge", "COSTGUARD_REGION": "eu-north-1",
                 "COSTGUARD_MARKET": "spot"}, gpu=gpus(8), host=P4D_HOST),
         ("aws", "p4d.24xlarge", "eu-north-1", "spot"), "environment"),
    Case("config-region-beats-metadata-region", dict(
        region="eu-north-1", metadata=answer("aws", "p4d.24xlarge", "us-east-1"),
        gpu=gpus(8), host=P4D_HOST), ("aws", "p4d.24xlarge", "eu-north-1", "on-demand"),
         "metadata"),
    Case("config-market-beats-metadata-market", dict(
        market="on-demand", metadata=answer("aws", "p4d.24xlarge", "us-east-1", "spot"),
        gpu=gpus(8), host=P4D_HOST), ("aws", "p4d.24xlarge", "us-east-1", "on-demand"),
         "metadata"),
    Case("metadata-type-unknown-falls-to-shape", dict(
        metadata=answer("aws", "p9.imaginary", "us-east-1"), gpu=gpus(8), host=P4D_HOST),
         ("aws", "p4d.24xlarge", "us-east-1", "on-demand"), "detected"),
    Case("shape-with-metadata-region", dict(
        metadata=answer("aws", "p9.imaginary", "eu-north-1", "spot"), gpu=gpus(8),
        host=P4D_HOST), ("aws", "p4d.24xlarge", "eu-north-1", "spot"), "detected"),
    # containers: a pod holding part of the node
    Case("pod-1-of-8-gpus-quarter-cpu", dict(
        metadata=answer("aws", "p4d.24xlarge", "us-east-1"), gpu=gpus(1), host=P4D_HOST,
        container=limits(24, 144)), ("aws", "p4d.24xlarge", "us-east-1", "on-demand"),
         "metadata", share=(1, 8, 0.25, 0.125)),
    Case("pod-2-of-8-spot-memory-bound", dict(
        metadata=answer("aws", "p4d.24xlarge", "eu-north-1", "spot"), gpu=gpus(2),
        host=P4D_HOST, container=limits(8, 576)),
         ("aws", "p4d.24xlarge", "eu-north-1", "spot"), "metadata",
         share=(2, 8, 8 / 96, 0.5)),
    Case("pod-env-override-no-metadata", dict(
        environ={"COSTGUARD_INSTANCE_TYPE": "p4d.24xlarge", "COSTGUARD_REGION": "us-east-1",
                 "COSTGUARD_MARKET": "spot"}, gpu=gpus(4), host=P4D_HOST,
        container=limits(None, None)), ("aws", "p4d.24xlarge", "us-east-1", "spot"),
         "environment", share=(4, 8, 1.0, 1.0)),
    Case("pod-gcp-whole-gpu-half-the-host", dict(
        metadata=answer("gcp", "a2-highgpu-1g", "europe-west4"), gpu=gpus(1),
        host=host(12, 85), container=limits(6, 42.5)),
         ("gcp", "a2-highgpu-1g", "europe-west4", "on-demand"), "metadata",
         share=(1, 1, 0.5, 0.5)),
    Case("container-holding-everything-pays-the-instance", dict(
        metadata=answer("aws", "p4d.24xlarge", "us-east-1"), gpu=gpus(8), host=P4D_HOST,
        container=limits(None, None)), ("aws", "p4d.24xlarge", "us-east-1", "on-demand"),
         "metadata"),
]


def expected_rate(catalog: Catalog, case: Case) -> float:
    """The rate worked out from the rows: the region's (or the home) row, its market price,
    then the container's share of the GPU part and of the host part."""
    provider, itype, region, market = case.priced
    r = row(catalog, itype, provider, region)
    rate = r.spot_per_hour if market == "spot" else r.on_demand_per_hour
    assert rate is not None
    if case.share is None:
        return rate
    held, of, cpu, mem = case.share
    g = r.gpu_share
    return rate * g * held / of + rate * (1 - g) * max(cpu, mem)


def resolve(catalog: Catalog, **kw: Any) -> Pricing:
    args: dict[str, Any] = {"instance_type": None, "environ": {}, "gpu": None, "host": None,
                            "hourly_rate": None}
    args.update(kw)
    return resolve_pricing(catalog, **args)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_the_rate_is_the_one_worked_out_from_the_catalog(catalog: Catalog, case: Case):
    p = resolve(catalog, **case.kwargs)
    assert p.rate_per_hour == pytest.approx(expected_rate(catalog, case), rel=1e-12)
    provider, itype, region, market = case.priced
    assert p.instance is not None and p.instance.key == (provider, itype.lower())
    assert p.market == market and p.source == case.source
    assert p.instance.region == (region or row(catalog, itype, provider).region)
    assert (p.region_note is not None) == case.note, p.region_note
    if case.share is None:
        assert p.share is None and p.rate_per_hour == p.instance_rate_per_hour
    else:
        held, of, cpu, mem = case.share
        assert p.share is not None
        assert (p.share.gpus_held, p.share.gpus_instance) == (held, of)
        assert p.share.cpu_share == pytest.approx(cpu)
        assert p.share.memory_share == pytest.approx(mem)
        assert p.gpu_count == held and p.instance_rate_per_hour is not None
        assert p.rate_per_hour is not None and p.rate_per_hour < p.instance_rate_per_hour
        # the GPU share of the container's own rate is its GPU part over its rate
        r = row(catalog, itype, provider, region)
        base = p.instance_rate_per_hour
        assert p.gpu_share == pytest.approx(base * r.gpu_share * held / of / p.rate_per_hour)
    assert p.tried and all(isinstance(t, str) and t for t in p.tried)


def test_the_table_covers_providers_markets_regions_shares_and_overrides():
    assert len(CASES) >= 20
    assert {c.priced[0] for c in CASES} == {"aws", "gcp", "azure"}
    assert {c.priced[3] for c in CASES} == {"on-demand", "spot"}
    assert {c.source for c in CASES} >= {"metadata", "config", "environment", "detected"}
    assert sum(c.share is not None for c in CASES) >= 4 and any(c.note for c in CASES)


def test_a_region_the_catalog_lacks_names_both(catalog: Catalog):
    p = resolve(catalog, metadata=answer("aws", "p4d.24xlarge", "ap-south-2"))
    assert p.region == "ap-south-2" and p.region_source == "metadata"
    assert p.region_note == ("price of us-east-1; ap-south-2 not in the catalog for "
                             "aws/p4d.24xlarge")
    assert p.region_note in p.detail and p.region_note in p.tried


def test_spot_without_a_spot_price_falls_back_and_says_so(catalog: Catalog):
    p = resolve(catalog, metadata=answer("azure", "Standard_NC24ads_A100_v4", "westeurope",
                                         "spot"))
    # the machine's market is named; the rate used, and why, are said beside it
    assert p.market == "spot" and p.market_priced == "on-demand" and p.rate_per_hour == 4.1
    assert p.market_note is not None and "no spot price" in p.market_note
    assert p.market_note in p.detail and p.market_note in p.tried


def test_hourly_rate_is_never_shared(catalog: Catalog):
    """An hourly_rate is what the admin says this server costs: no container share."""
    p = resolve(catalog, hourly_rate=3.0, gpu=gpus(1), host=P4D_HOST,
                container=limits(2, 8))
    assert p.source == "hourly_rate" and p.rate_per_hour == 3.0 and p.share is None


def test_metadata_tried_sentences_come_first_and_off_says_so(catalog: Catalog):
    off = MetadataResult(None, ("aws: off (COSTGUARD_CLOUD_METADATA=off)",), False)
    p = resolve(catalog, metadata=off, hourly_rate=1.0)
    assert p.tried[0] == "aws: off (COSTGUARD_CLOUD_METADATA=off)"
    assert resolve(catalog, hourly_rate=1.0).tried[0] == "cloud metadata: not asked (yet)"


# --- the container share: cgroup files ------------------------------------------------------


def cgroup_tree(tmp_path: Path, levels: dict[str, tuple[str, str]]) -> tuple[Path, Path]:
    """A cgroup v2 hierarchy under a test root: path -> (cpu.max, memory.max)."""
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpu memory\n")
    deepest = max(levels, key=len)
    for path, (cpu, mem) in levels.items():
        d = root / path.strip("/") if path.strip("/") else root
        d.mkdir(parents=True, exist_ok=True)
        (d / "cpu.max").write_text(cpu + "\n")
        (d / "memory.max").write_text(mem + "\n")
    self_cgroup = tmp_path / "self_cgroup"
    self_cgroup.write_text(f"0::{deepest}\n")
    return root, self_cgroup


def test_cgroup_limits_take_the_tightest_on_the_path(tmp_path: Path):
    root, self_cgroup = cgroup_tree(tmp_path, {
        "/kubepods": ("800000 100000", str(64 * GIB)),
        "/kubepods/burstable/pod1": ("max 100000", "max"),
        "/kubepods/burstable/pod1/c1": ("350000 100000", str(144 * GIB)),
    })
    got = read_cgroup_limits(root, self_cgroup)
    assert got.cpus == 3.5 and got.memory_bytes == 64 * GIB
    assert got.path == "/kubepods/burstable/pod1/c1" and "3.5 CPUs" in got.detail


def test_cgroup_unlimited_and_v1_hosts(tmp_path: Path):
    root, self_cgroup = cgroup_tree(tmp_path, {"/": ("max 100000", "max")})
    got = read_cgroup_limits(root, self_cgroup)
    assert (got.cpus, got.memory_bytes) == (None, None)
    v1 = tmp_path / "v1"
    v1.write_text("4:memory:/x\n1:cpu:/\n")
    got = read_cgroup_limits(root, v1)
    assert got.path is None and "v1" in got.detail


def test_a_real_cgroup_of_this_process_reads_without_error():
    """This machine's own cgroup, whatever it is (v1 here: then nothing is limited)."""
    got = read_cgroup_limits()
    assert got.detail
    if got.cpus is not None:
        assert got.cpus > 0


def test_container_markers_and_modes(tmp_path: Path):
    limits_ = CgroupLimits(None, None, "/", "root cgroup")
    assert in_container({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, limits_, tmp_path)[0]
    assert not in_container({}, limits_, tmp_path)[0]
    (tmp_path / ".dockerenv").write_text("")
    assert in_container({}, limits_, tmp_path)[0]
    share, why = container_share(mode="off", environ={}, limits=limits_, host_cpus=96,
                                 host_memory_bytes=1152 * GIB, gpus_held=1, gpus_instance=8)
    assert share is None and "off" in why
    share, why = container_share(mode="auto", environ={"COSTGUARD_CONTAINER_SHARE": "off"},
                                 limits=limits_, host_cpus=96, host_memory_bytes=1152 * GIB,
                                 gpus_held=1, gpus_instance=8, root_fs=tmp_path)
    assert share is None, "the environment overrides the trait"
    share, why = container_share(mode="auto", environ={}, limits=limits_, host_cpus=96,
                                 host_memory_bytes=1152 * GIB, gpus_held=1, gpus_instance=8,
                                 root_fs=tmp_path)
    assert share is not None and share.gpu_fraction == 1 / 8 and "/.dockerenv" in why
    # a VM (no marker) pays the whole instance however few GPUs a process sees
    vm = tmp_path / "vm"
    vm.mkdir()
    share, why = container_share(mode="auto", environ={}, limits=limits_, host_cpus=96,
                                 host_memory_bytes=1152 * GIB, gpus_held=1, gpus_instance=8,
                                 root_fs=vm)
    assert share is None and "whole instance" in why


# --- conservation with a share -------------------------------------------------------------


def test_conservation_holds_with_a_container_share(catalog: Catalog):
    """kernels + unattributed == the container's rate x time; the kernels' host part is
    measured against the container's CPUs, not the node's."""
    p = resolve(catalog, metadata=answer("aws", "p4d.24xlarge", "us-east-1"), gpu=gpus(2),
                host=P4D_HOST, container=limits(12, 144))
    assert p.rate_per_hour is not None and p.share is not None
    reading = gpus(2)
    kernels = tuple(
        KernelSample(info=KernelInfo(kernel_id=f"k{i}", name="python3", path=f"n{i}.ipynb",
                                     pid=100 + i, execution_state="idle",
                                     last_activity=0.0, connections=1),
                     pids=(100 + i,), cpu_seconds=cpu, rss_bytes=0, gpu_memory_bytes=mem)
        for i, (cpu, mem) in enumerate([(6.0, {"GPU-0": 4 * GIB}), (3.0, {})]))
    sample = Sample(time=10.0, interval=2.0, gpu=reading, host=P4D_HOST, kernels=kernels)
    cost = split_interval(sample, p.rate_per_hour, p.gpu_share, p.gpu_count,
                          cpu_capacity=p.cpu_capacity)
    assert cost.total == pytest.approx(p.rate_per_hour * 2.0 / 3600)
    assert cost.attributed() + cost.unattributed == pytest.approx(cost.total, rel=1e-12)
    host_pool = cost.total * (1 - p.gpu_share)
    # 9 CPU-seconds of the container's 12 CPUs x 2 s (not of the node's 96 x 2 s)
    assert sum(s.host for s in cost.shares.values()) == pytest.approx(host_pool * 9 / 24)
    gpu_pool = cost.total * p.gpu_share
    assert cost.shares["k0"].gpu == pytest.approx(gpu_pool / 2)  # one of the pod's two GPUs


# --- currency -------------------------------------------------------------------------------


def test_a_catalog_in_another_currency_is_converted_once_at_load(tmp_path: Path):
    path = tmp_path / "eur.json"
    path.write_text(json.dumps([
        {"provider": "aws", "instance_type": "p4d.24xlarge", "region": "eu-central-1",
         "currency": "EUR", "on_demand_per_hour": 20.0, "spot_per_hour": 8.0}]))
    shipped = Catalog.load().get("p4d.24xlarge", "aws")
    assert shipped is not None
    cat = Catalog.load([path], currency="EUR", exchange_rates={"USD": 0.9},
                       rates_date="2026-11-30")
    eur = cat.get("p4d.24xlarge", "aws", "eu-central-1")
    us = cat.get("p4d.24xlarge", "aws")
    assert eur is not None and us is not None
    assert (eur.currency, eur.on_demand_per_hour, eur.converted_from) == ("EUR", 20.0, None)
    assert us.currency == "EUR" and us.on_demand_per_hour == pytest.approx(
        shipped.on_demand_per_hour * 0.9)
    assert us.converted_from == "USD at 0.9 EUR/USD (2026-11-30)"
    # without a rate a row keeps its own currency (and pricing shows that code)
    kept = Catalog.load([path], currency="GBP").get("p4d.24xlarge", "aws")
    assert kept is not None and kept.currency == "USD" and kept.converted_from is None
    p = resolve(cat, instance_type="aws/p4d.24xlarge", region="eu-central-1")
    assert p.currency == "EUR" and p.rate_per_hour == 20.0
