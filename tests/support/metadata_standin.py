"""Loopback stand-ins for the clouds' instance metadata services (AWS IMDSv2, the GCE metadata
server, Azure IMDS).

A test double for what cannot exist here: no cloud answers on this machine, and the tests
must never send anything to the real link-local address. Each stand-in speaks its provider's
documented protocol over real HTTP on 127.0.0.1 and is as strict as the real one:

- AWS IMDSv2: ``PUT /latest/api/token`` needs ``X-aws-ec2-metadata-token-ttl-seconds``
  (1..21600, else 400) and is refused with ``X-Forwarded-For`` (403); every ``GET`` without a
  token it issued is 401.
- GCE: every request needs ``Metadata-Flavor: Google`` (else 403; 403 too with
  ``X-Forwarded-For``), and every answer carries ``Metadata-Flavor: Google``.
- Azure: ``/metadata/instance`` needs ``Metadata: true`` and an ``api-version`` (else 400),
  and refuses ``X-Forwarded-For`` (400).

Every request is recorded in ``.requests`` as (method, path with query, headers).
``delay`` makes the slow one, ``status`` the refusing one; ``answers`` replaces single
routes' bodies (a hostile or a missing one).
"""

from __future__ import annotations

import json
import socket
import threading
import uuid
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, urlsplit

from jupyter_costguard.cloud.metadata import (
    ENV_AWS_ENDPOINT,
    ENV_AZURE_ENDPOINT,
    ENV_GCE_HOST,
)

DEFAULTS = {
    "aws": ("p4d.24xlarge", "us-east-1", "us-east-1a"),
    "gcp": ("a2-highgpu-1g", "us-central1", "us-central1-a"),
    "azure": ("Standard_NC24ads_A100_v4", "eastus", "1"),
}
GCE_PROJECT = "123456789012"


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed): connecting is refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


class MetadataStandin:
    """One provider's metadata service on 127.0.0.1 (a context manager).

    ``market`` is "on-demand" or "spot". ``spot_via`` picks how spot is said: GCE
    "provisioning-model" (SPOT; the default) or "preemptible" (TRUE); Azure "Spot" (the
    default) or "Low". ``answers`` maps a route ("/latest/meta-data/instance-type",
    "/computeMetadata/v1/instance/zone", "/metadata/instance") to the body it answers, None
    for a 404. ``flavor=False`` makes a GCE impostor that leaves ``Metadata-Flavor`` off its
    answers. ``send_length=False`` answers without Content-Length (the body ends at close).
    """

    def __init__(
        self,
        provider: str,
        *,
        instance_type: str | None = None,
        region: str | None = None,
        zone: str | None = None,
        market: str = "on-demand",
        delay: float = 0.0,
        status: int | None = None,
        spot_via: str | None = None,
        answers: Mapping[str, str | None] | None = None,
        flavor: bool = True,
        send_length: bool = True,
    ) -> None:
        if provider not in DEFAULTS:
            raise ValueError(f"unknown provider {provider!r}")
        if market not in ("on-demand", "spot"):
            raise ValueError(f"unknown market {market!r}")
        d_type, d_region, d_zone = DEFAULTS[provider]
        self.provider = provider
        self.instance_type = d_type if instance_type is None else instance_type
        self.region = d_region if region is None else region
        self.zone = d_zone if zone is None else zone
        self.market = market
        self.delay = delay
        self.status = status
        self.spot_via = spot_via
        self.answers = dict(answers or {})
        self.flavor = flavor
        self.send_length = send_length
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.tokens: set[str] = set()
        self._closing = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- the server ----------------------------------------------------------------------

    @property
    def port(self) -> int:
        assert self._server is not None, "not started"
        port: int = self._server.server_address[1]
        return port

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    def start(self) -> MetadataStandin:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def do_GET(self) -> None:
                standin._handle(self)

            def do_PUT(self) -> None:
                standin._handle(self)

            def do_POST(self) -> None:
                standin._handle(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        # A client that gave up (timed out, refused a huge body) is not a stand-in error.
        server.handle_error = lambda request, client_address: None  # type: ignore[method-assign]
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05},
            name=f"metadata-standin-{self.provider}", daemon=True,
        )
        self._thread.start()
        return self

    def close(self) -> None:
        self._closing.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> MetadataStandin:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- answering -----------------------------------------------------------------------

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        headers = {k: v for k, v in handler.headers.items()}
        self.requests.append((handler.command, handler.path, headers))
        if self.delay and self._closing.wait(self.delay):
            return  # closed while sleeping: answer nothing
        if self.status is not None:
            self._send(handler, self.status, "forced error\n")
            return
        route = urlsplit(handler.path).path
        lower = {k.lower(): v for k, v in headers.items()}
        answer = getattr(self, f"_{self.provider}")
        answer(handler, handler.command, route, handler.path, lower)

    def _send(
        self,
        handler: BaseHTTPRequestHandler,
        status: int,
        body: str,
        content_type: str = "text/plain",
        extra: Mapping[str, str] | None = None,
    ) -> None:
        data = body.encode("utf-8")
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", content_type)
            if self.send_length:
                handler.send_header("Content-Length", str(len(data)))
            for name, value in (extra or {}).items():
                handler.send_header(name, value)
            handler.end_headers()
            handler.wfile.write(data)
        except OSError:
            pass  # the client went away

    def _route(self, route: str, default: str | None) -> str | None:
        return self.answers[route] if route in self.answers else default

    def _aws(
        self, h: BaseHTTPRequestHandler, method: str, route: str, _full: str,
        headers: dict[str, str],
    ) -> None:
        if route == "/latest/api/token":
            if method != "PUT":
                self._send(h, 405, "Method Not Allowed\n")
                return
            if "x-forwarded-for" in headers:
                self._send(h, 403, "Forbidden\n")
                return
            ttl = headers.get("x-aws-ec2-metadata-token-ttl-seconds", "")
            if not ttl.isdigit() or not 1 <= int(ttl) <= 21600:
                self._send(h, 400, "Bad Request\n")
                return
            token = uuid.uuid4().hex + "=="
            self.tokens.add(token)
            self._send(h, 200, token, extra={"X-aws-ec2-metadata-token-ttl-seconds": ttl})
            return
        if headers.get("x-aws-ec2-metadata-token") not in self.tokens:
            self._send(h, 401, "Unauthorized\n")
            return
        if method != "GET":
            self._send(h, 405, "Method Not Allowed\n")
            return
        life = "spot" if self.market == "spot" else "on-demand"
        routes = {
            "/latest/meta-data/instance-type": self.instance_type,
            "/latest/meta-data/placement/region": self.region,
            "/latest/meta-data/placement/availability-zone": self.zone,
            "/latest/meta-data/instance-life-cycle": life,
        }
        body = self._route(route, routes.get(route))
        if body is None:
            self._send(h, 404, "Not Found\n")
        else:
            self._send(h, 200, body)

    def _gcp(
        self, h: BaseHTTPRequestHandler, method: str, route: str, _full: str,
        headers: dict[str, str],
    ) -> None:
        flavor = {"Metadata-Flavor": "Google"} if self.flavor else {}
        if headers.get("metadata-flavor") != "Google" or "x-forwarded-for" in headers:
            self._send(h, 403, "Forbidden\n", extra=flavor)
            return
        if method != "GET":
            self._send(h, 405, "Method Not Allowed\n", extra=flavor)
            return
        spot = self.market == "spot"
        via = self.spot_via or "provisioning-model"
        prefix = "/computeMetadata/v1/instance/"
        routes = {
            prefix + "machine-type": f"projects/{GCE_PROJECT}/machineTypes/{self.instance_type}",
            prefix + "zone": f"projects/{GCE_PROJECT}/zones/{self.zone}",
            prefix + "scheduling/provisioning-model":
                "SPOT" if spot and via == "provisioning-model" else "STANDARD",
            prefix + "scheduling/preemptible":
                "TRUE" if spot and via == "preemptible" else "FALSE",
        }
        body = self._route(route, routes.get(route))
        if body is None:
            self._send(h, 404, "Not Found\n", extra=flavor)
        else:
            self._send(h, 200, body, content_type="application/text", extra=flavor)

    def _azure(
        self, h: BaseHTTPRequestHandler, method: str, route: str, full: str,
        headers: dict[str, str],
    ) -> None:
        def bad(message: str) -> None:
            self._send(h, 400, json.dumps({"error": message}), "application/json")

        if "x-forwarded-for" in headers:
            bad("Bad request. Request with X-Forwarded-For header not allowed")
            return
        if headers.get("metadata") != "true":
            bad("Bad request. Required metadata header not specified")
            return
        if not parse_qs(urlsplit(full).query).get("api-version"):
            bad("Bad request. api-version was not specified in the request")
            return
        if method != "GET":
            self._send(h, 405, json.dumps({"error": "Method not allowed"}), "application/json")
            return
        if route != "/metadata/instance":
            self._send(h, 404, json.dumps({"error": "Not found"}), "application/json")
            return
        priority = (self.spot_via or "Spot") if self.market == "spot" else "Regular"
        document = {
            "compute": {
                "vmSize": self.instance_type,
                "location": self.region,
                "zone": self.zone,
                "priority": priority,
                "osType": "Linux",
                "vmId": "02aab8a4-74ef-476e-8182-f6d2ba4166a6",
            },
            "network": {"interface": []},
        }
        body = self._route(route, json.dumps(document))
        if body is None:
            self._send(h, 404, json.dumps({"error": "Not found"}), "application/json")
        else:
            self._send(h, 200, body, "application/json; charset=utf-8")


def env_for(
    aws: MetadataStandin | None = None,
    gcp: MetadataStandin | None = None,
    azure: MetadataStandin | None = None,
) -> dict[str, str]:
    """The environment pointing each provider at its stand-in, or at a closed loopback port
    when there is none: nothing ever falls back to the real metadata address."""
    return {
        ENV_AWS_ENDPOINT: (aws.url if aws else f"http://127.0.0.1:{closed_port()}") + "/",
        ENV_GCE_HOST: gcp.host if gcp else f"127.0.0.1:{closed_port()}",
        ENV_AZURE_ENDPOINT: azure.url if azure else f"http://127.0.0.1:{closed_port()}",
    }


class ConnectionRecorder:
    """A loopback TCP listener that records who connected and hangs up: a proxy that must
    never be used."""

    def __init__(self) -> None:
        self.connections: list[bytes] = []
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self._sock.settimeout(0.1)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="proxy-recorder", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(0.5)
                try:
                    self.connections.append(conn.recv(4096))
                except OSError:
                    self.connections.append(b"")

    def __enter__(self) -> ConnectionRecorder:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sock.close()
