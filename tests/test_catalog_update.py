"""The price refresh: real gpuhunt, downloading from a loopback stand-in for dstack's catalog.

Nothing here may leave the machine: every test points ``GPUHUNT_CATALOG_URL`` at a loopback
server (or a closed loopback port), and a guard fails any test that tries to resolve or
connect to anything but loopback (gpuhunt's default is dstack's S3 bucket).
"""

from __future__ import annotations

import csv
import io
import os
import socket
import sys
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import gpuhunt  # noqa: F401  (in the test extras: a missing install must fail, not skip)
import pytest

from jupyter_costguard.cost import refresh
from jupyter_costguard.cost.catalog import COLUMNS, Catalog, normalize_gpu_name
from jupyter_costguard.cost.refresh import (
    RefreshError,
    read_fetched,
    update_catalog,
    user_catalog_path,
)
from tests.support.gpuhunt_publisher import OFFLINE_PROVIDERS, GpuhuntPublisher

NOW = datetime(2025, 6, 13, 8, 30, 5, tzinfo=timezone.utc)
LOOPBACK = {"127.0.0.1", "::1", "localhost"}


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Refuse, and fail the test on, any lookup or connection that is not loopback.

    gpuhunt downloads in worker threads and swallows their errors, so a refused attempt is
    also recorded and checked at teardown.
    """
    attempts: list[str] = []
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex
    real_getaddrinfo = socket.getaddrinfo

    def check(address: Any) -> None:
        if not isinstance(address, tuple):
            return  # an AF_UNIX path: local
        host = str(address[0])
        if host not in LOOPBACK:
            attempts.append(host)
            raise OSError(f"test guard: connection to non-loopback {host} refused")

    def connect(self: socket.socket, address: Any) -> None:
        check(address)
        real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        check(address)
        return real_connect_ex(self, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host is not None and str(host) not in LOOPBACK:
            attempts.append(str(host))
            raise socket.gaierror(f"test guard: lookup of non-loopback {host} refused")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.delenv("GPUHUNT_CATALOG_DIR", raising=False)
    # No test may fall back to gpuhunt's default (dstack's S3 bucket): a URL that cannot work.
    monkeypatch.setenv("GPUHUNT_CATALOG_URL", "http://127.0.0.1:9/unset-by-test")
    yield attempts
    assert attempts == [], f"tried to reach beyond loopback: {attempts}"


@pytest.fixture
def publisher(monkeypatch: pytest.MonkeyPatch) -> Iterator[GpuhuntPublisher]:
    with GpuhuntPublisher() as pub:
        monkeypatch.setenv("GPUHUNT_CATALOG_URL", pub.url)
        yield pub


def read_rows(path: Path) -> list[dict[str, str]]:
    lines = [ln for ln in path.read_text("utf-8").splitlines() if not ln.startswith("#")]
    return list(csv.DictReader(io.StringIO("\n".join(lines))))


def by_key(rows: list[dict[str, str]]) -> dict[tuple[str, str, str], dict[str, str]]:
    return {(r["provider"], r["instance_type"], r["region"]): r for r in rows}


def test_gpuhunt_downloads_the_providers_the_publisher_serves() -> None:
    from gpuhunt._internal import catalog as gh_catalog

    assert tuple(gh_catalog.OFFLINE_PROVIDERS) == OFFLINE_PROVIDERS


def test_update_writes_one_row_per_type_and_region(publisher: GpuhuntPublisher,
                                                   tmp_path: Path) -> None:
    path = tmp_path / "costguard" / "catalog.csv"
    result = update_catalog(path, now=NOW)
    url = publisher.url
    assert result.path == path
    assert result.catalog_url == url
    assert result.fetched == "2025-06-13T08:30:05Z"
    assert result.versions["aws"] == "20250612-41"
    assert "lambda" in result.providers and "lambdalabs" not in result.providers
    assert result.failed == {}

    text = path.read_text("utf-8")
    assert "# fetched: 2025-06-13T08:30:05Z\n" in text
    assert f"# source: gpuhunt {result.gpuhunt_version} catalog {url}\n" in text
    header = next(ln for ln in text.splitlines() if not ln.startswith("#"))
    assert header == ",".join(COLUMNS)

    rows = read_rows(path)
    keys = [(r["provider"], r["instance_type"].lower(), r["region"]) for r in rows]
    assert keys == sorted(keys)
    got = by_key(rows)
    src = f"gpuhunt catalog v20250612-41 ({url}/aws/20250612-41/catalog.zip)"
    assert got[("aws", "p4d.24xlarge", "us-east-1")] == {
        "provider": "aws", "instance_type": "p4d.24xlarge",
        "gpu_model": "NVIDIA A100-SXM4-40GB", "gpu_count": "8", "gpu_memory_gib": "40",
        "vcpus": "96", "memory_gib": "1152", "region": "us-east-1", "currency": "USD",
        "on_demand_per_hour": "32.7726", "spot_per_hour": "12.5", "gpu_share": "",
        "source_url": src, "retrieved": "2025-06-12",
        # the spot figure is from the same download, and AWS's is said to be a market price
        "spot_source_url": "", "spot_retrieved": "", "notes": refresh._AWS_SPOT_NOTE,
    }
    eu = got[("aws", "p4d.24xlarge", "eu-north-1")]
    assert (eu["on_demand_per_hour"], eu["spot_per_hour"]) == ("30.1", "11.25")
    assert got[("aws", "p5.48xlarge", "us-east-1")]["gpu_model"] == "NVIDIA H100 80GB HBM3"
    assert got[("aws", "p5.48xlarge", "us-east-1")]["spot_per_hour"] == ""
    cpu = got[("aws", "m5.xlarge", "us-east-1")]
    assert (cpu["gpu_count"], cpu["gpu_model"], cpu["gpu_memory_gib"]) == ("0", "", "")
    assert (cpu["on_demand_per_hour"], cpu["spot_per_hour"]) == ("0.192", "0.0794")
    # GCP zones a and b fold into their region; zone c's DWS calendar-mode offer is skipped
    gcp = got[("gcp", "a2-highgpu-1g", "us-central1")]
    assert (gcp["on_demand_per_hour"], gcp["spot_per_hour"]) == ("3.673477", "1.102")
    assert gcp["gpu_model"] == "NVIDIA A100-SXM4-40GB" and gcp["notes"] == ""  # a list price
    assert got[("gcp", "g2-standard-4", "europe-west4")]["gpu_model"] == "NVIDIA L4"
    azure = got[("azure", "Standard_NC24ads_A100_v4", "eastus")]
    assert (azure["gpu_model"], azure["on_demand_per_hour"]) == ("NVIDIA A100 80GB PCIe", "3.673")
    assert got[("lambda", "gpu_1x_a10", "us-east-1")]["gpu_model"] == "NVIDIA A10"
    assert got[("lambda", "gpu_1x_a100", "us-west-1")]["gpu_model"] == "NVIDIA A100-PCIE-40GB"
    # not in the table: gpuhunt's name as is
    assert got[("runpod", "NVIDIA RTX PRO 6000", "EU-RO-1")]["gpu_model"] == "RTXPRO6000"
    assert len(rows) == result.rows == 10

    # g4dn.xlarge price 0; g5.xlarge spot only; TPU and MI300X; DWS and RunPod cluster
    assert result.skipped == 6
    assert result.skip_reasons == {
        "no price": 1, "spot offers only, no on-demand price": 1, "not an NVIDIA GPU": 2,
        "other pricing model (reservation, cluster)": 2,
    }
    assert {"g4dn.xlarge", "g5.xlarge", "v5litepod-8"}.isdisjoint(r["instance_type"]
                                                                 for r in rows)


def test_publisher_got_the_requests(publisher: GpuhuntPublisher, tmp_path: Path) -> None:
    update_catalog(tmp_path / "catalog.csv", now=NOW)
    assert "/v3/aws/version" in publisher.requests
    assert "/v3/aws/20250612-41/catalog.zip" in publisher.requests
    assert publisher.requested_providers() == set(OFFLINE_PROVIDERS)


def test_gpu_models_compare_with_nvml_names(publisher: GpuhuntPublisher,
                                            tmp_path: Path) -> None:
    path = tmp_path / "catalog.csv"
    update_catalog(path, now=NOW)
    models = {r["gpu_model"] for r in read_rows(path) if r["gpu_model"]}
    nvml = {"NVIDIA A100-SXM4-40GB", "NVIDIA H100 80GB HBM3", "NVIDIA A100 80GB PCIe",
            "NVIDIA L4", "NVIDIA A10"}
    assert {normalize_gpu_name(n) for n in nvml} <= {normalize_gpu_name(m) for m in models}


def test_written_file_loads_as_a_catalog_file(publisher: GpuhuntPublisher,
                                              tmp_path: Path) -> None:
    """Loaded on top of the shipped catalog, every region's row is there to price with."""
    path = tmp_path / "catalog.csv"
    update_catalog(path, now=NOW)
    catalog = Catalog.load([path])
    eu = catalog.get("p4d.24xlarge", "aws", "eu-north-1")
    us = catalog.get("p4d.24xlarge", "aws", "us-east-1")
    assert eu is not None and us is not None
    assert (eu.on_demand_per_hour, eu.spot_per_hour) == (30.1, 11.25)
    assert (us.on_demand_per_hour, us.spot_per_hour) == (32.7726, 12.5)
    assert eu.retrieved == us.retrieved and eu.retrieved is not None
    assert "gpuhunt catalog" in eu.source_url
    assert catalog.regions(us) == ("eu-north-1", "us-east-1")


def test_the_cli_writes_the_user_catalog_and_lists_it(publisher: GpuhuntPublisher,
                                                     tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from jupyter_costguard.cli import main

    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))
    assert main(["catalog", "update", "--provider", "aws"]) == 0
    said = capsys.readouterr().out
    assert f"to {tmp_path / 'data' / 'costguard' / 'catalog.csv'}" in said
    assert main(["catalog", "--provider", "aws", "--region", "eu-north-1"]) == 0
    listed = capsys.readouterr().out
    assert "with the refreshed catalog" in listed and "p4d.24xlarge" in listed
    assert "30.10" in listed and "11.25" in listed


def test_providers_filter(publisher: GpuhuntPublisher, tmp_path: Path) -> None:
    path = tmp_path / "catalog.csv"
    result = update_catalog(path, providers=["gcp", "lambda"], now=NOW)
    assert result.providers == ("gcp", "lambda")
    assert set(result.versions) == {"gcp", "lambda"}
    assert {r["provider"] for r in read_rows(path)} == {"gcp", "lambda"}
    assert result.rows == 4
    assert result.skip_reasons == {"not an NVIDIA GPU": 1,
                                   "other pricing model (reservation, cluster)": 1}
    # gpuhunt's own spelling is accepted too
    assert update_catalog(path, providers=["lambdalabs"], now=NOW).providers == ("lambda",)


def test_unknown_provider(publisher: GpuhuntPublisher, tmp_path: Path) -> None:
    with pytest.raises(RefreshError, match=r"unknown price catalog provider 'vastai'.*lambda"):
        update_catalog(tmp_path / "catalog.csv", providers=["vastai"], now=NOW)
    assert publisher.requests == []
    assert not (tmp_path / "catalog.csv").exists()


def test_second_update_replaces_the_file_atomically(publisher: GpuhuntPublisher,
                                                    tmp_path: Path) -> None:
    path = tmp_path / "catalog.csv"
    update_catalog(path, now=NOW)
    old_text = path.read_text("utf-8")
    old_inode = path.stat().st_ino
    reader = open(path, encoding="utf-8")  # a reader that has the old file open
    try:
        publisher.version = "20250701-7"
        publisher.catalogs["aws"] = publisher.catalogs["aws"].replace("32.7726", "29.5")
        later = datetime(2025, 7, 1, 12, 0, tzinfo=timezone.utc)
        result = update_catalog(path, now=later)
        assert reader.read() == old_text
    finally:
        reader.close()
    assert path.stat().st_ino != old_inode
    assert read_fetched(path) == "2025-07-01T12:00:00Z"
    row = by_key(read_rows(path))[("aws", "p4d.24xlarge", "us-east-1")]
    assert (row["on_demand_per_hour"], row["retrieved"]) == ("29.5", "2025-07-01")
    assert result.versions["aws"] == "20250701-7"
    assert sorted(os.listdir(tmp_path)) == ["catalog.csv"]  # no temp file left behind


def test_failed_update_keeps_the_old_file(publisher: GpuhuntPublisher, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "catalog.csv"
    update_catalog(path, now=NOW)
    before = path.read_bytes()

    def broken(*args: Any, **kwargs: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(refresh.os, "fsync", broken)
    with pytest.raises(OSError, match="disk full"):
        update_catalog(path, now=NOW)
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["catalog.csv"]


def test_without_gpuhunt_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "gpuhunt", None)
    with pytest.raises(RefreshError) as e:
        update_catalog(tmp_path / "catalog.csv", now=NOW)
    assert str(e.value) == (
        "the price refresh needs gpuhunt, the prices extra: pip install '.[prices]' in a clone of "
        "jupyter-costguard (or pip install gpuhunt)")
    assert e.value.__cause__ is None


def closed_loopback_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port


def test_a_mirror_that_never_answers_times_out(monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    """A listener that accepts and never answers: each download gets the timeout, then the
    update fails naming it (before, gpuhunt's urlopen without a timeout waited forever)."""
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(64)
    try:
        url = f"http://127.0.0.1:{hole.getsockname()[1]}/v3"
        monkeypatch.setenv("GPUHUNT_CATALOG_URL", url)
        before = socket.getdefaulttimeout()
        with pytest.raises(RefreshError) as e:
            update_catalog(tmp_path / "catalog.csv", now=NOW, timeout=0.3)
        assert url in str(e.value) and "timed out" in str(e.value).lower(), str(e.value)
        assert socket.getdefaulttimeout() == before, "the process default is restored"
        assert not (tmp_path / "catalog.csv").exists()
    finally:
        hole.close()


def test_unreachable_catalog_url(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str],
                                 caplog: pytest.LogCaptureFixture) -> None:
    url = f"http://127.0.0.1:{closed_loopback_port()}/v3"
    monkeypatch.setenv("GPUHUNT_CATALOG_URL", url)
    with pytest.raises(RefreshError) as e:
        update_catalog(tmp_path / "catalog.csv", now=NOW)
    message = str(e.value)
    assert url in message
    assert "refused" in message.lower()
    assert "amazonaws" not in message
    assert e.value.__cause__ is None and e.value.__suppress_context__
    assert not (tmp_path / "catalog.csv").exists()
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
    assert not any(r.exc_info for r in caplog.records)
    # the autouse guard checks at teardown that nothing went beyond loopback


def test_a_provider_that_does_not_load(monkeypatch: pytest.MonkeyPatch,
                                       tmp_path: Path) -> None:
    with GpuhuntPublisher(omit=("oci",)) as pub:
        monkeypatch.setenv("GPUHUNT_CATALOG_URL", pub.url)
        path = tmp_path / "catalog.csv"
        result = update_catalog(path, now=NOW)  # all providers: the others are written
        assert "oci" not in result.providers
        assert "404" in result.failed["oci"]
        assert result.rows == 10
        with pytest.raises(RefreshError, match=rf"of oci from {pub.url} \(oci: .*404"):
            update_catalog(path, providers=["aws", "oci"], now=NOW)
        assert read_fetched(path) == "2025-06-13T08:30:05Z"


def test_read_fetched(tmp_path: Path) -> None:
    path = tmp_path / "catalog.csv"
    assert read_fetched(path) is None  # missing
    path.write_text("# a comment\n# fetched: 2025-06-13T08:30:05Z\nprovider,instance_type\n")
    assert read_fetched(path) == "2025-06-13T08:30:05Z"
    path.write_text("provider,instance_type\n# fetched: 2025-06-13T08:30:05Z\n")
    assert read_fetched(path) is None  # only the leading comment block counts
    path.write_bytes(b"\xff\xfe# fetched")
    assert read_fetched(path) is None


def test_user_catalog_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))
    assert user_catalog_path() == tmp_path / "data" / "costguard" / "catalog.csv"


def test_default_path_is_the_user_catalog(publisher: GpuhuntPublisher, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))
    result = update_catalog(providers=["azure"], now=NOW)
    assert result.path == tmp_path / "data" / "costguard" / "catalog.csv"
    assert result.path.is_file() and result.rows == 1


def test_naive_now_is_utc_and_version_without_date(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    with GpuhuntPublisher(version="latest-build") as pub:
        monkeypatch.setenv("GPUHUNT_CATALOG_URL", pub.url)
        path = tmp_path / "catalog.csv"
        result = update_catalog(path, providers=["azure"], now=datetime(2025, 6, 14, 1, 2, 3))
    assert result.fetched == "2025-06-14T01:02:03Z"
    assert read_rows(path)[0]["retrieved"] == "2025-06-14"  # the fetch date


@pytest.mark.parametrize(("provider", "instance", "name", "memory", "nvml"), [
    ("aws", "p4de.24xlarge", "A100", 80.0, "NVIDIA A100-SXM4-80GB"),
    ("aws", "g4dn.xlarge", "T4", 16.0, "Tesla T4"),
    ("aws", "g5.xlarge", "A10G", 24.0, "NVIDIA A10G"),
    ("aws", "p3.2xlarge", "V100", 16.0, "Tesla V100-SXM2-16GB"),
    ("aws", "g6e.xlarge", "L40S", 48.0, "NVIDIA L40S"),
    ("azure", "Standard_NC6s_v3", "V100", 16.0, "Tesla V100-PCIE-16GB"),
    ("lambda", "gpu_1x_a100_sxm4", "A100", 40.0, "NVIDIA A100-SXM4-40GB"),
    ("lambda", "gpu_1x_h100_pcie", "H100", 80.0, "NVIDIA H100 PCIe"),
    ("aws", "x", "A100", 64.0, "A100"),  # memory fits no entry: as is
    ("aws", "x", "FancyGPU", None, "FancyGPU"),
])
def test_nvml_gpu_name(provider: str, instance: str, name: str, memory: float | None,
                       nvml: str) -> None:
    assert refresh.nvml_gpu_name(provider, instance, name, memory) == nvml
