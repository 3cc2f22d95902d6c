"""Which instance this is, as its cloud's metadata service tells it: type, region, zone, market.

The price of an hour depends on what the machine is (``p4d.24xlarge`` on-demand in
``us-east-1`` or a spot ``a2-highgpu-1g``); only the cloud knows that for sure, through a
link-local HTTP service each provider documents:

- AWS, IMDSv2: ``PUT /latest/api/token`` for a session token, then ``GET /latest/meta-data/...``
  with it (IMDSv1, without a token, is refused on hardened instances and not used here).
- Google Cloud: ``GET /computeMetadata/v1/instance/...`` with ``Metadata-Flavor: Google``; an
  answer without that header back is not from the metadata server and is not believed.
- Azure IMDS: ``GET /metadata/instance?api-version=2021-02-01`` with ``Metadata: true``.

All three are probed at once and the call waits for them all, each request bounded by
``timeout``, so off a cloud the answer is "none" after about one timeout (a closed or
unrouted address fails faster). The endpoints can be moved with the providers' own
variables (``AWS_EC2_METADATA_SERVICE_ENDPOINT``, ``AWS_EC2_METADATA_DISABLED``,
``GCE_METADATA_HOST``) and ``COSTGUARD_AZURE_IMDS_ENDPOINT``; ``COSTGUARD_CLOUD_METADATA=off``
turns every lookup off. No proxy is ever used: metadata is a property of this machine, and
an ``HTTP_PROXY`` would send the question (and AWS's token) somewhere else.

An answer is believed only if every value is a plain short name (letters, digits, ``._-``):
what comes back is put into logs, the ledger and price lookups, and a hostile or broken
service must not put newlines or megabytes there. Nothing raises out of :func:`lookup`:
every failure is a sentence in :attr:`MetadataResult.tried`.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import re
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass
from email.message import Message
from typing import Any

ENV_OFF = "COSTGUARD_CLOUD_METADATA"
ENV_AWS_ENDPOINT = "AWS_EC2_METADATA_SERVICE_ENDPOINT"
ENV_AWS_DISABLED = "AWS_EC2_METADATA_DISABLED"
ENV_GCE_HOST = "GCE_METADATA_HOST"
ENV_AZURE_ENDPOINT = "COSTGUARD_AZURE_IMDS_ENDPOINT"

DEFAULT_AWS_ENDPOINT = "http://169.254.169.254"
DEFAULT_GCE_HOST = "metadata.google.internal"
DEFAULT_AZURE_ENDPOINT = "http://169.254.169.254"

PROVIDERS = ("aws", "gcp", "azure")  # also the order of preference when several answer
MAX_BODY_BYTES = 64 * 1024
AWS_TOKEN_TTL_SECONDS = 21600
AZURE_API_VERSION = "2021-02-01"

_OFF_VALUES = frozenset({"off", "0", "false", "no"})
# Instance types, regions and zones of all three clouds are short names of these characters.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
# GCE answers with resource paths ("projects/123/zones/us-central1-a").
_GCE_PATH = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,511}")
_HOST_PORT = re.compile(r"[A-Za-z0-9.-]{1,253}(:[0-9]{1,5})?|\[[0-9A-Fa-f:.]{2,45}\](:[0-9]{1,5})?")
# AWS tokens are base64-ish text; anything else is not a token.
_AWS_TOKEN = re.compile(r"[A-Za-z0-9+/=_.-]{1,1024}")
# How many requests each provider makes at most, in sequence: the bound on one lookup.
_REQUESTS = {"aws": 5, "gcp": 4, "azure": 1}


@dataclass(frozen=True)
class CloudIdentity:
    """What the metadata service said this instance is, in the provider's own names."""

    provider: str  # "aws" | "gcp" | "azure"
    instance_type: str  # "p4d.24xlarge", "a2-highgpu-1g", "Standard_NC24ads_A100_v4"
    region: str  # "us-east-1", "us-central1", "eastus"
    zone: str | None  # "us-east-1a", "us-central1-a", Azure's "1"; None when it has none
    market: str  # "on-demand" | "spot"
    detail: str  # one sentence: what answered and what it said


@dataclass(frozen=True)
class MetadataResult:
    """The identity found (None: no provider answered fully) and what each provider did."""

    identity: CloudIdentity | None
    tried: tuple[str, ...]  # one sentence per provider, in PROVIDERS order
    enabled: bool  # False when lookups were turned off (environment or argument)


class _NoAnswer(Exception):
    """A provider gave no usable answer; the message says why, in a few words."""


@dataclass(frozen=True)
class _Reply:
    status: int
    headers: Message
    text: str


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A metadata service answers itself; a redirect elsewhere is not followed."""

    def redirect_request(
        self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Message,
        newurl: str,
    ) -> None:
        return None


def _opener() -> urllib.request.OpenerDirector:
    """urllib without proxies (``ProxyHandler({})`` ignores HTTP(S)_PROXY) or redirects."""
    return urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirects())


def _shown(value: str, limit: int = 40) -> str:
    """A value quoted for a sentence: repr escapes control characters; long ones are cut."""
    if len(value) > limit:
        return repr(value[:limit]) + f"... ({len(value)} characters)"
    return repr(value)


def _secs(seconds: float) -> str:
    text = f"{seconds:.3f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


def _why(error: BaseException) -> str:
    """A few words for a transport failure."""
    if isinstance(error, urllib.error.URLError) and not isinstance(
        error, urllib.error.HTTPError
    ):
        reason = error.reason
        if isinstance(reason, BaseException):
            return _why(reason)
        return str(reason)
    if isinstance(error, (socket.timeout, TimeoutError)):
        return "timed out"
    if isinstance(error, ConnectionRefusedError):
        return "connection refused"
    if isinstance(error, ConnectionResetError):
        return "connection reset"
    if isinstance(error, socket.gaierror):
        return "name not resolved"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror.lower()
    return f"{type(error).__name__}: {_shown(str(error), 80)}"


def _is_timeout(error: BaseException) -> bool:
    if isinstance(error, urllib.error.URLError) and isinstance(error.reason, BaseException):
        return _is_timeout(error.reason)
    return isinstance(error, (socket.timeout, TimeoutError))


class _Client:
    """One provider's requests: bounded in time (``timeout`` each) and in size."""

    def __init__(self, base: str, timeout: float) -> None:
        self.base = base
        self.timeout = timeout
        self.opener = _opener()

    def fetch(
        self, method: str, path: str, headers: Mapping[str, str], *, missing_ok: bool = False,
    ) -> _Reply | None:
        """The reply to one request; None for a 404 when ``missing_ok``. Any other failure
        (transport, non-200, a body too big, not UTF-8) raises _NoAnswer."""
        url = self.base + path
        request = urllib.request.Request(url, method=method, headers=dict(headers))
        started = time.monotonic()
        try:
            with self.opener.open(request, timeout=self.timeout) as response:
                if response.status != 200:
                    raise _NoAnswer(f"HTTP {response.status} from {url}")
                text = self._read(response, url, started)
                return _Reply(response.status, response.headers, text)
        except urllib.error.HTTPError as error:
            error.close()
            if error.code == 404 and missing_ok:
                return None
            raise _NoAnswer(f"HTTP {error.code} from {url}") from None
        except _NoAnswer:
            raise
        except (OSError, http.client.HTTPException, ValueError) as error:
            if _is_timeout(error):
                raise _NoAnswer(f"timed out after {_secs(self.timeout)} s at {url}") from None
            raise _NoAnswer(f"no answer from {self.base} ({_why(error)})") from None

    def _read(self, response: Any, url: str, started: float) -> str:
        """The body, at most MAX_BODY_BYTES, read within ``timeout`` of the request."""
        length = response.headers.get("Content-Length")
        if length is not None and length.strip().isdigit() and int(length) > MAX_BODY_BYTES:
            raise _NoAnswer(
                f"answer from {url} refused: {int(length)} bytes, more than {MAX_BODY_BYTES}"
            )
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = response.read(8192)
            if not chunk:
                break
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise _NoAnswer(f"answer from {url} refused: more than {MAX_BODY_BYTES} bytes")
            if time.monotonic() - started > self.timeout:
                raise _NoAnswer(
                    f"timed out after {_secs(self.timeout)} s at {url} (answer still arriving)"
                )
            chunks.append(chunk)
        try:
            return b"".join(chunks).decode("utf-8")
        except UnicodeDecodeError:
            raise _NoAnswer(f"answer from {url} refused: not UTF-8") from None


def _name(value: object, what: str) -> str:
    """``value`` if it is a plain short name, else _NoAnswer saying what was refused."""
    if not isinstance(value, str):
        raise _NoAnswer(f"{what} refused: not a string ({type(value).__name__})")
    if not value:
        raise _NoAnswer(f"{what} is empty")
    if not _NAME.fullmatch(value):
        raise _NoAnswer(f"{what} refused: not a plain name ({_shown(value)})")
    return value


def _base_url(raw: str | None, default: str, variable: str) -> str:
    """A base URL without its trailing slash; a bad one in the environment is _NoAnswer."""
    if raw is None or not raw.strip():
        return default
    url = raw.strip().rstrip("/")
    scheme, sep, rest = url.partition("://")
    if (
        not sep
        or scheme.lower() not in ("http", "https")
        or not rest
        or any(ch.isspace() or not ch.isprintable() for ch in url)
    ):
        raise _NoAnswer(f"{variable} is not an http(s) URL ({_shown(raw)})")
    return url


# --- AWS ------------------------------------------------------------------------------------


def _aws(environ: Mapping[str, str], timeout: float) -> CloudIdentity:
    base = _base_url(environ.get(ENV_AWS_ENDPOINT), DEFAULT_AWS_ENDPOINT, ENV_AWS_ENDPOINT)
    client = _Client(base, timeout)
    try:
        reply = client.fetch(
            "PUT", "/latest/api/token",
            {"X-aws-ec2-metadata-token-ttl-seconds": str(AWS_TOKEN_TTL_SECONDS)},
        )
    except _NoAnswer as no:
        if "timed out" in str(no):
            # The classic container case: the token's reply is dropped one hop short.
            raise _NoAnswer(
                f"{no}; in a container, the instance's IMDS hop limit may be 1"
            ) from None
        raise
    assert reply is not None
    token = reply.text
    if not _AWS_TOKEN.fullmatch(token):
        raise _NoAnswer(f"IMDSv2 token from {base} refused: not a token ({_shown(token)})")
    headers = {"X-aws-ec2-metadata-token": token}

    def get(path: str, *, missing_ok: bool = False) -> str | None:
        got = client.fetch("GET", "/latest/meta-data/" + path, headers, missing_ok=missing_ok)
        return None if got is None else got.text

    instance_type = _name(get("instance-type"), "instance-type")
    region = _name(get("placement/region"), "placement/region")
    raw_zone = get("placement/availability-zone", missing_ok=True)
    zone = None if raw_zone is None else _name(raw_zone, "placement/availability-zone")
    raw_life = get("instance-life-cycle", missing_ok=True)
    if raw_life is None:
        market, said = "on-demand", "no instance-life-cycle (read as on-demand)"
    else:
        life = _name(raw_life, "instance-life-cycle")
        market = "spot" if life.lower() == "spot" else "on-demand"
        said = f"instance-life-cycle {life}"
        if life.lower() not in ("spot", "on-demand", "scheduled"):
            said += " (read as on-demand)"
    where = zone or region
    return CloudIdentity(
        "aws", instance_type, region, zone, market,
        f"AWS IMDSv2 at {base}: {instance_type} in {where}, {said}",
    )


# --- Google Cloud ---------------------------------------------------------------------------


def _gcp(environ: Mapping[str, str], timeout: float) -> CloudIdentity:
    raw_host = environ.get(ENV_GCE_HOST)
    host = DEFAULT_GCE_HOST if raw_host is None or not raw_host.strip() else raw_host.strip()
    if not _HOST_PORT.fullmatch(host):
        raise _NoAnswer(f"{ENV_GCE_HOST} is not a host[:port] ({_shown(host)})")
    base = f"http://{host}"
    client = _Client(base, timeout)
    flavor = {"Metadata-Flavor": "Google"}

    def get(path: str, *, missing_ok: bool = False) -> str | None:
        url_path = "/computeMetadata/v1/instance/" + path
        got = client.fetch("GET", url_path, flavor, missing_ok=missing_ok)
        if got is None:
            return None
        if got.headers.get("Metadata-Flavor") != "Google":
            # As google-auth: without the header back it is not the metadata server.
            raise _NoAnswer(
                f"answer from {base}{url_path} refused: no Metadata-Flavor: Google header"
            )
        return got.text

    def last_segment(text: str | None, what: str) -> str:
        if text is None or not text:
            raise _NoAnswer(f"{what} is empty")
        if not _GCE_PATH.fullmatch(text):
            raise _NoAnswer(f"{what} refused: not a resource path ({_shown(text)})")
        return _name(text.rsplit("/", 1)[-1], what)

    instance_type = last_segment(get("machine-type"), "machine-type")
    zone = last_segment(get("zone"), "zone")
    region, dash, _letter = zone.rpartition("-")
    if not dash or not region:
        raise _NoAnswer(f"zone refused: no region in it ({_shown(zone)})")
    model = get("scheduling/provisioning-model", missing_ok=True)
    preemptible = get("scheduling/preemptible", missing_ok=True)
    said: list[str] = []
    spot = False
    if model is not None:
        said.append(f"provisioning-model {_name(model, 'provisioning-model')}")
        spot = spot or model.upper() == "SPOT"
    if preemptible is not None:
        said.append(f"preemptible {_name(preemptible, 'preemptible')}")
        spot = spot or preemptible.upper() == "TRUE"
    if not said:
        said.append("no scheduling answers (read as on-demand)")
    return CloudIdentity(
        "gcp", instance_type, region, zone, "spot" if spot else "on-demand",
        f"GCE metadata server at {host}: {instance_type} in {zone}, {', '.join(said)}",
    )


# --- Azure ----------------------------------------------------------------------------------


def _azure(environ: Mapping[str, str], timeout: float) -> CloudIdentity:
    base = _base_url(
        environ.get(ENV_AZURE_ENDPOINT), DEFAULT_AZURE_ENDPOINT, ENV_AZURE_ENDPOINT
    )
    client = _Client(base, timeout)
    path = f"/metadata/instance?api-version={AZURE_API_VERSION}"
    reply = client.fetch("GET", path, {"Metadata": "true"})
    assert reply is not None
    try:
        document = json.loads(reply.text)
    except ValueError:
        raise _NoAnswer(f"answer from {base}{path} refused: not JSON") from None
    compute = document.get("compute") if isinstance(document, dict) else None
    if not isinstance(compute, dict):
        raise _NoAnswer(f"answer from {base}{path} refused: no compute object")
    instance_type = _name(compute.get("vmSize"), "compute.vmSize")
    region = _name(compute.get("location"), "compute.location")
    raw_zone = compute.get("zone")
    zone = None if raw_zone in (None, "") else _name(raw_zone, "compute.zone")
    raw_priority = compute.get("priority")
    priority = "" if raw_priority in (None, "") else _name(raw_priority, "compute.priority")
    spot = priority.lower() in ("spot", "low")
    said = f"priority {priority}" if priority else "no priority (read as on-demand)"
    if priority and not spot and priority.lower() != "regular":
        said += " (read as on-demand)"
    where = f"{region} zone {zone}" if zone else region
    return CloudIdentity(
        "azure", instance_type, region, zone, "spot" if spot else "on-demand",
        f"Azure IMDS at {base}: {instance_type} in {where}, {said}",
    )


_PROBES: dict[str, Callable[[Mapping[str, str], float], CloudIdentity]] = {
    "aws": _aws, "gcp": _gcp, "azure": _azure,
}


def _probe(provider: str, environ: Mapping[str, str], timeout: float) -> CloudIdentity | str:
    """The provider's identity, or why there is none (never raises)."""
    try:
        return _PROBES[provider](environ, timeout)
    except _NoAnswer as no:
        return str(no)
    except Exception as error:  # a bug or a surprise must not cost the server its thread
        return f"failed ({type(error).__name__}: {_shown(str(error), 80)})"


def _off_reason(environ: Mapping[str, str], enabled: bool) -> str | None:
    if not enabled:
        return "lookup(enabled=False)"
    value = environ.get(ENV_OFF)
    if value is not None and value.strip().lower() in _OFF_VALUES:
        return f"{ENV_OFF}={value.strip()}"
    return None


def _where(identity: CloudIdentity) -> str:
    """"us-east-1a" (a zone names its region on AWS and GCP), "eastus zone 1" (Azure's don't)."""
    zone, region = identity.zone, identity.region
    if not zone:
        return region
    return zone if zone.startswith(region) else f"{region} zone {zone}"


def lookup(
    environ: Mapping[str, str] | None = None, *, timeout: float = 1.0, enabled: bool = True,
) -> MetadataResult:
    """Ask the three clouds' metadata services, concurrently, which instance this is.

    Blocking: call it from a worker thread. Each request waits at most ``timeout`` seconds,
    so the call returns within about ``timeout`` times the most requests one provider makes
    (five, AWS's). The first provider in PROVIDERS order that answered fully wins. With
    ``enabled=False`` or ``COSTGUARD_CLOUD_METADATA=off`` nothing is sent at all.
    """
    env: Mapping[str, str] = os.environ if environ is None else environ
    if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
        timeout = 1.0  # a bad setting must not break the lookup (nor hang it)
    off = _off_reason(env, enabled)
    if off is not None:
        return MetadataResult(None, tuple(f"{p}: off ({off})" for p in PROVIDERS), False)

    outcomes: dict[str, CloudIdentity | str] = {}
    aws_off = env.get(ENV_AWS_DISABLED, "").strip().lower() == "true"
    if aws_off:
        outcomes["aws"] = f"skipped ({ENV_AWS_DISABLED}={env[ENV_AWS_DISABLED].strip()})"
    asked = [p for p in PROVIDERS if p not in outcomes]
    # A safety net over the per-request bounds (a server trickling its headers).
    overall = timeout * max(_REQUESTS[p] for p in asked) + 1.0
    pool = ThreadPoolExecutor(max_workers=len(asked), thread_name_prefix="costguard-metadata")
    try:
        futures: dict[str, Future[CloudIdentity | str]] = {
            p: pool.submit(_probe, p, env, timeout) for p in asked
        }
        wait_futures(list(futures.values()), timeout=overall)
        for provider, future in futures.items():
            if future.done():
                outcomes[provider] = future.result()
            else:
                outcomes[provider] = f"no full answer within {_secs(overall)} s"
    finally:
        pool.shutdown(wait=False, cancel_futures=True)

    identity: CloudIdentity | None = None
    tried: list[str] = []
    for provider in PROVIDERS:
        outcome = outcomes[provider]
        if isinstance(outcome, str):
            tried.append(f"{provider}: {outcome}")
            continue
        summary = f"{outcome.instance_type} in {_where(outcome)}, {outcome.market}"
        if identity is None:
            identity = outcome
            tried.append(f"{provider}: answered ({summary})")
        else:
            tried.append(f"{provider}: answered ({summary}), but {identity.provider} is preferred")
    return MetadataResult(identity, tuple(tried), True)


def describe(result: MetadataResult) -> str:
    """One line for logs and the CLI: what was found, else why nothing was."""
    if not result.enabled:
        reasons = {t.partition(": off (")[2][:-1] for t in result.tried if ": off (" in t}
        return f"cloud metadata: off ({', '.join(sorted(reasons)) or 'disabled'})"
    identity = result.identity
    if identity is None:
        return "cloud metadata: no provider answered (" + "; ".join(result.tried) + ")"
    where = identity.region + (f" ({identity.zone})" if identity.zone else "")
    return (
        f"cloud metadata: {identity.provider} {identity.instance_type} in {where}, "
        f"{identity.market}; {identity.detail}"
    )
