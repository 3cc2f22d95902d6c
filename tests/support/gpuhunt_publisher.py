"""A test double for dstack's published gpuhunt catalog, which cannot be reached from here.

It speaks gpuhunt's real format (gpuhunt 0.1.34, ``gpuhunt/_internal/catalog.py``), so the
real gpuhunt code downloads and parses it: with ``GPUHUNT_CATALOG_URL=<publisher.url>``,
gpuhunt asks, for each offline provider, ``GET <url>/<provider>/version`` (the latest version,
one line) and then ``GET <url>/<provider>/<version>/catalog.zip``, a zip holding
``<provider>.csv`` with gpuhunt's v2 columns (``gpuhunt/_internal/storage.py``). The server
listens on 127.0.0.1 only and records every request path it got (proof that loopback was
used).

The offers are hand-written CSVs in ``tests/data/gpuhunt/<provider>.csv``; an offline
provider without a file is published with no offers, as dstack publishes every one of them.
"""

from __future__ import annotations

import io
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "data" / "gpuhunt"
PREFIX = "/v3"
#: gpuhunt 0.1.34's OFFLINE_PROVIDERS: the providers it downloads (a test checks the list).
OFFLINE_PROVIDERS = ("aws", "azure", "verda", "gcp", "lambdalabs", "nebius", "oci", "runpod",
                     "cloudrift")
#: The header of gpuhunt's v2 catalog CSV (storage.CATALOG_V2_FIELDS).
V2_HEADER = ("instance_name,location,price,cpu,memory,gpu_count,gpu_name,gpu_memory,spot,"
             "disk_size,gpu_vendor,flags,cpu_arch,provider_data\n")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64  # gpuhunt opens 8 connections at once; the default 5 stalls 1 s


def fixture_catalogs() -> dict[str, str]:
    """provider -> CSV text: the fixture files, and an empty catalog for the others."""
    catalogs = {p: V2_HEADER for p in OFFLINE_PROVIDERS}
    for f in sorted(DATA.glob("*.csv")):
        catalogs[f.stem] = f.read_text("utf-8")
    return catalogs


class GpuhuntPublisher:
    """Serves ``catalogs`` (provider -> CSV text) at ``version``; ``omit`` answers 404."""

    def __init__(self, catalogs: dict[str, str] | None = None, version: str = "20250612-41",
                 omit: tuple[str, ...] = ()) -> None:
        self.catalogs = fixture_catalogs() if catalogs is None else dict(catalogs)
        self.version = version
        self.omit = set(omit)
        self.requests: list[str] = []
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}{PREFIX}"

    def start(self) -> GpuhuntPublisher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def __enter__(self) -> GpuhuntPublisher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def requested_providers(self) -> set[str]:
        with self._lock:
            return {p.removeprefix(PREFIX + "/").split("/")[0] for p in self.requests}

    def _respond(self, path: str) -> bytes | None:
        if not path.startswith(PREFIX + "/"):
            return None
        parts = path[len(PREFIX) + 1:].split("/")
        provider = parts[0]
        if provider not in self.catalogs or provider in self.omit:
            return None
        if parts[1:] == ["version"]:
            return f"{self.version}\n".encode()
        if parts[1:] == [self.version, "catalog.zip"]:
            buf = io.BytesIO()
            with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
                z.writestr(f"{provider}.csv", self.catalogs[provider])
            return buf.getvalue()
        return None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        publisher = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with publisher._lock:
                    publisher.requests.append(self.path)
                body = publisher._respond(self.path)
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        return Handler
