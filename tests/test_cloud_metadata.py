"""The cloud metadata lookup, over real HTTP to loopback stand-ins of the three services.

Every test points all three providers at 127.0.0.1 (``env_for``) or turns lookups off, and an
autouse guard makes any attempt to reach the real metadata address (169.254.169.254,
metadata.google.internal) fail the test before a packet leaves.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from jupyter_costguard.cloud import metadata
from jupyter_costguard.cloud.metadata import (
    ENV_AWS_DISABLED,
    ENV_AWS_ENDPOINT,
    ENV_AZURE_ENDPOINT,
    ENV_GCE_HOST,
    ENV_OFF,
    CloudIdentity,
    MetadataResult,
    describe,
    lookup,
)
from tests.support.metadata_standin import ConnectionRecorder, MetadataStandin, env_for

FORBIDDEN_NAMES = {"metadata.google.internal", "metadata.google.internal.", "metadata"}
TIMEOUT = 2.0  # generous for loopback; no test waits for it except the slow ones


def forbidden(host: object) -> bool:
    if not isinstance(host, str):
        return False
    name = host.strip("[]").lower()
    if name in FORBIDDEN_NAMES:
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    return address.is_link_local or address == ipaddress.ip_address("fd00:ec2::254")


class RealMetadataAddress(OSError):
    """Raised by the guard instead of connecting to (or resolving) the real metadata."""


class Guard:
    """Wraps the socket calls every HTTP client goes through; records and refuses any that
    would reach the real metadata service."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.attempts: list[str] = []
        # Looked up at call time, so a test of the guard itself can swap them for raisers.
        self.real: dict[str, Any] = {
            "create_connection": socket.create_connection,
            "connect": socket.socket.connect,
            "connect_ex": socket.socket.connect_ex,
            "getaddrinfo": socket.getaddrinfo,
        }
        guard = self

        def refuse(what: str, host: object) -> None:
            if forbidden(host):
                guard.attempts.append(f"{what} {host}")
                raise RealMetadataAddress(f"{what} to the real metadata address {host}")

        def create_connection(address: Any, *args: Any, **kwargs: Any) -> socket.socket:
            refuse("create_connection", address[0])
            return guard.real["create_connection"](address, *args, **kwargs)

        def connect(self: socket.socket, address: Any) -> None:
            if isinstance(address, tuple):
                refuse("connect", address[0])
            guard.real["connect"](self, address)

        def connect_ex(self: socket.socket, address: Any) -> int:
            if isinstance(address, tuple):
                refuse("connect_ex", address[0])
            return guard.real["connect_ex"](self, address)

        def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
            refuse("getaddrinfo", host)
            return guard.real["getaddrinfo"](host, *args, **kwargs)

        self.create_connection = create_connection
        self.connect = connect
        self.getaddrinfo = getaddrinfo
        monkeypatch.setattr(socket, "create_connection", create_connection)
        monkeypatch.setattr(socket.socket, "connect", connect)
        monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
        monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


@pytest.fixture(autouse=True)
def guard(monkeypatch: pytest.MonkeyPatch) -> Iterator[Guard]:
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY",
                 "all_proxy", "NO_PROXY", "no_proxy", ENV_OFF, ENV_AWS_DISABLED,
                 ENV_AWS_ENDPOINT, ENV_GCE_HOST, ENV_AZURE_ENDPOINT):
        monkeypatch.delenv(name, raising=False)
    g = Guard(monkeypatch)
    yield g
    assert g.attempts == [], f"tried to reach the real metadata service: {g.attempts}"


@pytest.fixture
def aws() -> Iterator[MetadataStandin]:
    with MetadataStandin("aws") as s:
        yield s


@pytest.fixture
def gcp() -> Iterator[MetadataStandin]:
    with MetadataStandin("gcp") as s:
        yield s


@pytest.fixture
def azure() -> Iterator[MetadataStandin]:
    with MetadataStandin("azure") as s:
        yield s


def bare_opener() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(urllib.request.ProxyHandler({}))


def status_of(request: urllib.request.Request) -> int:
    try:
        with bare_opener().open(request, timeout=TIMEOUT) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        error.close()
        return error.code


def header(headers: dict[str, str], name: str) -> str | None:
    """A received header by name, in any case (urllib sends them title-cased)."""
    return next((v for k, v in headers.items() if k.lower() == name.lower()), None)


def found(result: MetadataResult) -> CloudIdentity:
    assert result.identity is not None, result.tried
    return result.identity


# --- each provider ------------------------------------------------------------------------


@pytest.mark.parametrize("market", ["on-demand", "spot"])
def test_aws_identity(market: str) -> None:
    with MetadataStandin("aws", instance_type="p4d.24xlarge", region="us-east-1",
                         zone="us-east-1a", market=market) as s:
        result = lookup(env_for(aws=s), timeout=TIMEOUT)
    identity = found(result)
    assert identity == CloudIdentity(
        "aws", "p4d.24xlarge", "us-east-1", "us-east-1a", market,
        f"AWS IMDSv2 at {s.url}: p4d.24xlarge in us-east-1a, instance-life-cycle {market}",
    )
    assert result.enabled
    assert result.tried[0] == f"aws: answered (p4d.24xlarge in us-east-1a, {market})"
    assert result.tried[1].startswith("gcp: no answer from http://127.0.0.1:")
    assert "connection refused" in result.tried[1]
    assert result.tried[2].startswith("azure: no answer from http://127.0.0.1:")


def test_aws_scheduled_and_missing_life_cycle_are_on_demand() -> None:
    route = "/latest/meta-data/instance-life-cycle"
    with MetadataStandin("aws", answers={route: "scheduled"}) as s:
        identity = found(lookup(env_for(aws=s), timeout=TIMEOUT))
    assert identity.market == "on-demand"
    assert identity.detail.endswith("instance-life-cycle scheduled")
    with MetadataStandin("aws", market="spot", answers={route: None}) as s:
        identity = found(lookup(env_for(aws=s), timeout=TIMEOUT))
    assert identity.market == "on-demand"
    assert "no instance-life-cycle (read as on-demand)" in identity.detail


@pytest.mark.parametrize(("market", "via", "said"), [
    ("on-demand", None, "provisioning-model STANDARD, preemptible FALSE"),
    ("spot", "provisioning-model", "provisioning-model SPOT, preemptible FALSE"),
    ("spot", "preemptible", "provisioning-model STANDARD, preemptible TRUE"),
])
def test_gcp_identity(market: str, via: str | None, said: str) -> None:
    with MetadataStandin("gcp", instance_type="a2-highgpu-1g", zone="us-central1-a",
                         market=market, spot_via=via) as s:
        result = lookup(env_for(gcp=s), timeout=TIMEOUT)
    identity = found(result)
    assert identity == CloudIdentity(
        "gcp", "a2-highgpu-1g", "us-central1", "us-central1-a", market,
        f"GCE metadata server at {s.host}: a2-highgpu-1g in us-central1-a, {said}",
    )
    assert result.tried[1] == f"gcp: answered (a2-highgpu-1g in us-central1-a, {market})"


@pytest.mark.parametrize(("zone", "region"), [
    ("europe-west4-b", "europe-west4"),
    ("us-east1-c", "us-east1"),
    ("asia-northeast3-a", "asia-northeast3"),
])
def test_gcp_region_is_zone_minus_its_letter(zone: str, region: str) -> None:
    with MetadataStandin("gcp", zone=zone) as s:
        identity = found(lookup(env_for(gcp=s), timeout=TIMEOUT))
    assert (identity.region, identity.zone) == (region, zone)


def test_gcp_without_scheduling_answers_is_on_demand() -> None:
    prefix = "/computeMetadata/v1/instance/scheduling/"
    with MetadataStandin("gcp", market="spot",
                         answers={prefix + "provisioning-model": None,
                                  prefix + "preemptible": None}) as s:
        identity = found(lookup(env_for(gcp=s), timeout=TIMEOUT))
    assert identity.market == "on-demand"
    assert "no scheduling answers (read as on-demand)" in identity.detail


@pytest.mark.parametrize(("market", "via", "priority"), [
    ("on-demand", None, "Regular"),
    ("spot", "Spot", "Spot"),
    ("spot", "Low", "Low"),
])
def test_azure_identity(market: str, via: str | None, priority: str) -> None:
    with MetadataStandin("azure", instance_type="Standard_NC24ads_A100_v4", region="eastus",
                         zone="1", market=market, spot_via=via) as s:
        result = lookup(env_for(azure=s), timeout=TIMEOUT)
    identity = found(result)
    assert identity == CloudIdentity(
        "azure", "Standard_NC24ads_A100_v4", "eastus", "1", market,
        f"Azure IMDS at {s.url}: Standard_NC24ads_A100_v4 in eastus zone 1, priority {priority}",
    )
    assert result.tried[2] == (
        f"azure: answered (Standard_NC24ads_A100_v4 in eastus zone 1, {market})")


def test_azure_without_zone_or_priority() -> None:
    document = {"compute": {"vmSize": "Standard_ND96asr_v4", "location": "westeurope",
                            "zone": "", "priority": ""}}
    with MetadataStandin("azure", answers={"/metadata/instance": json.dumps(document)}) as s:
        identity = found(lookup(env_for(azure=s), timeout=TIMEOUT))
    assert (identity.region, identity.zone, identity.market) == ("westeurope", None, "on-demand")
    assert "no priority (read as on-demand)" in identity.detail


# --- what the lookup sends, and what the stand-ins insist on --------------------------------


def test_lookup_sends_each_providers_headers(
    aws: MetadataStandin, gcp: MetadataStandin, azure: MetadataStandin,
) -> None:
    found(lookup(env_for(aws=aws, gcp=gcp, azure=azure), timeout=TIMEOUT))

    (put_method, put_path, put_headers), *gets = aws.requests
    assert (put_method, put_path) == ("PUT", "/latest/api/token")
    assert header(put_headers, "X-aws-ec2-metadata-token-ttl-seconds") == "21600"
    assert [(m, p) for m, p, _ in gets] == [
        ("GET", "/latest/meta-data/instance-type"),
        ("GET", "/latest/meta-data/placement/region"),
        ("GET", "/latest/meta-data/placement/availability-zone"),
        ("GET", "/latest/meta-data/instance-life-cycle"),
    ]
    assert all(header(h, "X-aws-ec2-metadata-token") in aws.tokens for _, _, h in gets)

    assert len(gcp.requests) == 4
    assert all(m == "GET" and p.startswith("/computeMetadata/v1/instance/")
               and header(h, "Metadata-Flavor") == "Google" for m, p, h in gcp.requests)

    [(method, path, headers)] = azure.requests
    assert (method, path) == ("GET", "/metadata/instance?api-version=2021-02-01")
    assert header(headers, "Metadata") == "true"
    assert header(headers, "X-Forwarded-For") is None


def test_aws_standin_enforces_imdsv2(aws: MetadataStandin) -> None:
    url = aws.url
    assert status_of(urllib.request.Request(url + "/latest/meta-data/instance-type")) == 401
    assert status_of(urllib.request.Request(
        url + "/latest/meta-data/instance-type",
        headers={"X-aws-ec2-metadata-token": "made-up"})) == 401
    assert status_of(urllib.request.Request(url + "/latest/api/token", method="PUT")) == 400
    assert status_of(urllib.request.Request(
        url + "/latest/api/token", method="PUT",
        headers={"X-aws-ec2-metadata-token-ttl-seconds": "99999"})) == 400
    assert status_of(urllib.request.Request(
        url + "/latest/api/token", method="PUT",
        headers={"X-aws-ec2-metadata-token-ttl-seconds": "60",
                 "X-Forwarded-For": "10.0.0.1"})) == 403
    assert status_of(urllib.request.Request(
        url + "/latest/api/token", method="PUT",
        headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"})) == 200


def test_gcp_standin_enforces_metadata_flavor(gcp: MetadataStandin) -> None:
    url = gcp.url + "/computeMetadata/v1/instance/machine-type"
    assert status_of(urllib.request.Request(url)) == 403
    assert status_of(urllib.request.Request(url, headers={"Metadata-Flavor": "Googl"})) == 403
    assert status_of(urllib.request.Request(
        url, headers={"Metadata-Flavor": "Google", "X-Forwarded-For": "10.0.0.1"})) == 403
    request = urllib.request.Request(url, headers={"Metadata-Flavor": "Google"})
    with bare_opener().open(request, timeout=TIMEOUT) as response:
        assert response.headers["Metadata-Flavor"] == "Google"
        assert response.read() == b"projects/123456789012/machineTypes/a2-highgpu-1g"


def test_azure_standin_enforces_metadata_header(azure: MetadataStandin) -> None:
    url = azure.url + "/metadata/instance?api-version=2021-02-01"
    assert status_of(urllib.request.Request(url)) == 400
    assert status_of(urllib.request.Request(
        url, headers={"Metadata": "true", "X-Forwarded-For": "10.0.0.1"})) == 400
    assert status_of(urllib.request.Request(
        azure.url + "/metadata/instance", headers={"Metadata": "true"})) == 400
    assert status_of(urllib.request.Request(url, headers={"Metadata": "true"})) == 200


# --- slow, refusing, off ------------------------------------------------------------------


@pytest.mark.parametrize("provider", ["aws", "gcp", "azure"])
def test_slow_standin_times_out(provider: str) -> None:
    with MetadataStandin(provider, delay=30.0) as s:
        result = lookup(env_for(**{provider: s}), timeout=0.2)
    assert result.identity is None
    sentence = result.tried[metadata.PROVIDERS.index(provider)]
    assert sentence.startswith(f"{provider}: timed out after 0.2 s at {s.url}/"), sentence
    assert s.requests  # it was asked, and did not answer in time


@pytest.mark.parametrize("status", [500, 404])
@pytest.mark.parametrize("provider", ["aws", "gcp", "azure"])
def test_refusing_standin_gives_no_identity(provider: str, status: int) -> None:
    with MetadataStandin(provider, status=status) as s:
        result = lookup(env_for(**{provider: s}), timeout=TIMEOUT)
    assert result.identity is None
    sentence = result.tried[metadata.PROVIDERS.index(provider)]
    assert sentence.startswith(f"{provider}: HTTP {status} from {s.url}/"), sentence


@pytest.mark.parametrize("value", ["off", "0", "FALSE", "No", " off "])
def test_env_off_sends_nothing(
    value: str, aws: MetadataStandin, gcp: MetadataStandin, azure: MetadataStandin,
) -> None:
    env = env_for(aws=aws, gcp=gcp, azure=azure) | {ENV_OFF: value}
    result = lookup(env, timeout=TIMEOUT)
    assert result == MetadataResult(None, tuple(
        f"{p}: off ({ENV_OFF}={value.strip()})" for p in ("aws", "gcp", "azure")), False)
    assert aws.requests == gcp.requests == azure.requests == []
    assert describe(result) == f"cloud metadata: off ({ENV_OFF}={value.strip()})"


def test_enabled_false_sends_nothing(
    aws: MetadataStandin, gcp: MetadataStandin, azure: MetadataStandin,
) -> None:
    result = lookup(env_for(aws=aws, gcp=gcp, azure=azure), enabled=False)
    assert not result.enabled and result.identity is None
    assert result.tried == (
        "aws: off (lookup(enabled=False))",
        "gcp: off (lookup(enabled=False))",
        "azure: off (lookup(enabled=False))",
    )
    assert aws.requests == gcp.requests == azure.requests == []
    assert describe(result) == "cloud metadata: off (lookup(enabled=False))"


@pytest.mark.parametrize("value", ["on", "1", "yes", ""])
def test_env_other_values_leave_lookups_on(value: str, gcp: MetadataStandin) -> None:
    result = lookup(env_for(gcp=gcp) | {ENV_OFF: value}, timeout=TIMEOUT)
    assert result.enabled and found(result).provider == "gcp"


@pytest.mark.parametrize("value", ["true", "TRUE", "True"])
def test_aws_disabled_skips_aws_only(
    value: str, aws: MetadataStandin, gcp: MetadataStandin,
) -> None:
    result = lookup(env_for(aws=aws, gcp=gcp) | {ENV_AWS_DISABLED: value}, timeout=TIMEOUT)
    assert found(result).provider == "gcp"
    assert result.enabled
    assert result.tried[0] == f"aws: skipped ({ENV_AWS_DISABLED}={value})"
    assert aws.requests == []
    assert len(gcp.requests) == 4


def test_aws_disabled_false_asks_aws(aws: MetadataStandin) -> None:
    result = lookup(env_for(aws=aws) | {ENV_AWS_DISABLED: "false"}, timeout=TIMEOUT)
    assert found(result).provider == "aws"


# --- preference -----------------------------------------------------------------------------


def test_aws_preferred_over_gcp_and_azure(
    aws: MetadataStandin, gcp: MetadataStandin, azure: MetadataStandin,
) -> None:
    result = lookup(env_for(aws=aws, gcp=gcp, azure=azure), timeout=TIMEOUT)
    assert found(result).provider == "aws"
    assert result.tried[1] == (
        "gcp: answered (a2-highgpu-1g in us-central1-a, on-demand), but aws is preferred")
    assert result.tried[2].endswith("but aws is preferred")


def test_gcp_preferred_over_azure(gcp: MetadataStandin, azure: MetadataStandin) -> None:
    result = lookup(env_for(gcp=gcp, azure=azure), timeout=TIMEOUT)
    assert found(result).provider == "gcp"
    assert result.tried[2].endswith("but gcp is preferred")


def test_a_failing_preferred_provider_does_not_hide_the_next(
    gcp: MetadataStandin,
) -> None:
    with MetadataStandin("aws", status=500) as refusing:
        result = lookup(env_for(aws=refusing, gcp=gcp), timeout=TIMEOUT)
    assert found(result).provider == "gcp"
    assert result.tried[0].startswith("aws: HTTP 500")


# --- hostile or broken answers --------------------------------------------------------------


HUGE = "x" * (10 * 1024 * 1024)


def test_huge_body_with_length_refused() -> None:
    with MetadataStandin("aws", instance_type=HUGE) as s:
        result = lookup(env_for(aws=s), timeout=TIMEOUT)
    assert result.identity is None
    assert "10485760 bytes, more than 65536" in result.tried[0]


def test_huge_body_without_length_refused() -> None:
    document = json.dumps({"compute": {"vmSize": HUGE, "location": "eastus"}})
    with MetadataStandin("azure", send_length=False,
                         answers={"/metadata/instance": document}) as s:
        result = lookup(env_for(azure=s), timeout=TIMEOUT)
    assert result.identity is None
    assert "refused: more than 65536 bytes" in result.tried[2]


@pytest.mark.parametrize(("provider", "kwargs", "what"), [
    ("aws", {"instance_type": "p4d.24xlarge\nX-Injected: 1"}, "instance-type"),
    ("aws", {"region": "us-east-1\r\n"}, "placement/region"),
    ("aws", {"zone": "us-east-1a\x1b[31m"}, "placement/availability-zone"),
    ("gcp", {"instance_type": "a2-highgpu-1g\nevil"}, "machine-type"),
    ("gcp", {"zone": "us-central1-a\tb"}, "zone"),
    ("azure", {"instance_type": "Standard_NC24\nads"}, "compute.vmSize"),
    ("azure", {"region": "east us"}, "compute.location"),
])
def test_control_characters_refused(provider: str, kwargs: dict[str, str], what: str) -> None:
    with MetadataStandin(provider, **kwargs) as s:  # type: ignore[arg-type]
        result = lookup(env_for(**{provider: s}), timeout=TIMEOUT)
    assert result.identity is None
    sentence = result.tried[metadata.PROVIDERS.index(provider)]
    assert what in sentence and "refused" in sentence, sentence
    assert "\n" not in sentence and "\r" not in sentence and "\x1b" not in sentence


def test_tried_sentences_are_single_lines_for_a_huge_newline_value() -> None:
    with MetadataStandin("aws", instance_type="a\n" * 1000) as s:
        result = lookup(env_for(aws=s), timeout=TIMEOUT)
    assert result.identity is None
    assert all("\n" not in t and len(t) < 300 for t in result.tried)
    assert "\n" not in describe(result)


@pytest.mark.parametrize(("provider", "route", "body", "why"), [
    ("aws", "/latest/meta-data/instance-type", "", "instance-type is empty"),
    ("aws", "/latest/meta-data/placement/region", None, "HTTP 404"),
    ("gcp", "/computeMetadata/v1/instance/machine-type", "", "machine-type is empty"),
    ("gcp", "/computeMetadata/v1/instance/zone", "projects/1/zones/nozone", "no region"),
    ("azure", "/metadata/instance", "{not json", "not JSON"),
    ("azure", "/metadata/instance", "[1, 2]", "no compute object"),
    ("azure", "/metadata/instance", '{"compute": {"vmSize": "", "location": "eastus"}}',
     "compute.vmSize is empty"),
    ("azure", "/metadata/instance", '{"compute": {"vmSize": 7, "location": "eastus"}}',
     "not a string"),
])
def test_broken_answers_refused(provider: str, route: str, body: str | None, why: str) -> None:
    with MetadataStandin(provider, answers={route: body}) as s:
        result = lookup(env_for(**{provider: s}), timeout=TIMEOUT)
    assert result.identity is None
    assert why in result.tried[metadata.PROVIDERS.index(provider)]


def test_gcp_answer_without_flavor_header_not_believed() -> None:
    with MetadataStandin("gcp", flavor=False) as impostor:
        result = lookup(env_for(gcp=impostor), timeout=TIMEOUT)
    assert result.identity is None
    assert "no Metadata-Flavor: Google header" in result.tried[1]


def test_bad_endpoint_settings_are_sentences() -> None:
    env = env_for() | {ENV_AWS_ENDPOINT: "ftp://127.0.0.1/", ENV_GCE_HOST: "127.0.0.1/evil",
                       ENV_AZURE_ENDPOINT: "http://127.0.0.1:1/a b"}
    result = lookup(env, timeout=TIMEOUT)
    assert result.identity is None
    assert result.tried[0].startswith(f"aws: {ENV_AWS_ENDPOINT} is not an http(s) URL")
    assert result.tried[1].startswith(f"gcp: {ENV_GCE_HOST} is not a host[:port]")
    assert result.tried[2].startswith(f"azure: {ENV_AZURE_ENDPOINT} is not an http(s) URL")


def test_a_bug_in_a_probe_is_a_sentence(
    monkeypatch: pytest.MonkeyPatch, aws: MetadataStandin,
) -> None:
    def broken(environ: object, timeout: float) -> CloudIdentity:
        raise RuntimeError("surprise")

    monkeypatch.setitem(metadata._PROBES, "gcp", broken)
    result = lookup(env_for(aws=aws), timeout=TIMEOUT)
    assert found(result).provider == "aws"
    assert result.tried[1] == "gcp: failed (RuntimeError: 'surprise')"


def test_bad_timeout_does_not_break_lookup(aws: MetadataStandin) -> None:
    for timeout in (0.0, -1.0, float("nan"), float("inf")):
        assert found(lookup(env_for(aws=aws), timeout=timeout)).provider == "aws"


# --- never the real address, never a proxy ------------------------------------------------


def test_guard_refuses_the_real_addresses(guard: Guard) -> None:
    # The guard's own functions, with the real socket calls under them swapped for raisers:
    # even a broken guard could not send anything.
    def unreachable(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"the guard let {args!r} through")

    real = dict(guard.real)
    guard.real.update(dict.fromkeys(real, unreachable))
    try:
        with pytest.raises(RealMetadataAddress):
            guard.create_connection(("169.254.169.254", 80))
        with pytest.raises(RealMetadataAddress):
            guard.getaddrinfo("metadata.google.internal", 80)
        with socket.socket() as sock, pytest.raises(RealMetadataAddress):
            guard.connect(sock, ("169.254.169.254", 80))
        with pytest.raises(AssertionError, match="let"):
            guard.getaddrinfo("127.0.0.1", 80)  # and it lets loopback through
    finally:
        guard.real.update(real)
    assert len(guard.attempts) == 3
    guard.attempts.clear()
    assert socket.create_connection is guard.create_connection
    assert socket.getaddrinfo is guard.getaddrinfo


def test_defaults_never_used_when_env_points_elsewhere(
    guard: Guard, aws: MetadataStandin, gcp: MetadataStandin, azure: MetadataStandin,
) -> None:
    seen: list[str] = []
    real_getaddrinfo = guard.getaddrinfo

    def recording_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(str(host))
        return real_getaddrinfo(host, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(socket, "getaddrinfo", recording_getaddrinfo)
        for env in (env_for(aws=aws, gcp=gcp, azure=azure), env_for()):
            result = lookup(env, timeout=TIMEOUT)
            assert len(result.tried) == 3
    assert guard.attempts == []
    assert seen and set(seen) == {"127.0.0.1"}
    for standin in (aws, gcp, azure):
        assert standin.requests


def test_http_proxy_is_not_used(
    monkeypatch: pytest.MonkeyPatch, gcp: MetadataStandin, azure: MetadataStandin,
) -> None:
    with ConnectionRecorder() as proxy:
        proxies = {name: proxy.url for name in (
            "HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")}
        for name, value in proxies.items():
            monkeypatch.setenv(name, value)
        with MetadataStandin("aws") as aws:
            result = lookup(env_for(aws=aws, gcp=gcp, azure=azure) | proxies, timeout=TIMEOUT)
            assert found(result).provider == "aws"
            assert all(t.split(": ", 1)[1].startswith("answered") for t in result.tried)
            assert proxy.connections == []
            # The recorder works: urllib's default opener does go through it.
            with pytest.raises((urllib.error.URLError, OSError)):
                urllib.request.build_opener().open(aws.url + "/latest/api/token", timeout=2)
    assert len(proxy.connections) == 1
    assert proxy.connections[0].startswith(b"GET http://127.0.0.1:")


# --- describe -------------------------------------------------------------------------------


def test_describe(aws: MetadataStandin) -> None:
    result = lookup(env_for(aws=aws), timeout=TIMEOUT)
    assert describe(result) == (
        "cloud metadata: aws p4d.24xlarge in us-east-1 (us-east-1a), on-demand; "
        f"AWS IMDSv2 at {aws.url}: p4d.24xlarge in us-east-1a, instance-life-cycle on-demand")
    nothing = lookup(env_for(), timeout=TIMEOUT)
    line = describe(nothing)
    assert line.startswith("cloud metadata: no provider answered (aws: no answer from ")
    assert "; gcp: no answer from " in line and "; azure: no answer from " in line
