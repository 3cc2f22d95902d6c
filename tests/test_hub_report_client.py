"""The server side's connection to the hub service (cost/hubreport.py): one connection kept
for every report, a new one when the service closed it, and a clear error when the service
is not there. A loopback HTTP/1.1 server stands in for the service's report route."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from jupyter_costguard.cost.hubreport import KeptConnection
from tests.support.server_proc import free_port


class Service(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    connections: set[tuple[str, int]] = set()
    close_next = False

    def do_POST(self) -> None:  # http.server's name for it
        Service.connections.add(self.client_address)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        answer = json.dumps({"accepted": True, "got": json.loads(body)}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(answer)))
        if Service.close_next:
            self.send_header("Connection", "close")
            Service.close_next = False
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def service() -> Iterator[str]:
    Service.connections = set()
    port = free_port()
    httpd = ThreadingHTTPServer(("127.0.0.1", port), Service)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}/services/costguard/api/report"
    httpd.shutdown()
    httpd.server_close()


def test_reports_share_one_connection_and_reconnect_when_it_closed(service: str) -> None:
    conn = KeptConnection(service, timeout=5)
    for i in range(3):
        status, body = conn.post(json.dumps({"n": i}).encode(), {})
        assert status == 200 and json.loads(body)["got"] == {"n": i}
    assert len(Service.connections) == 1
    Service.close_next = True  # the service closes after this answer
    assert conn.post(b"{}", {})[0] == 200
    assert conn.post(b"{}", {})[0] == 200
    assert len(Service.connections) == 2
    conn.close()


def test_no_service_is_an_error_not_a_hang() -> None:
    conn = KeptConnection(f"http://127.0.0.1:{free_port()}/r", timeout=2)
    with pytest.raises(OSError):
        conn.post(b"{}", {})
    with pytest.raises(ValueError, match="http"):
        KeptConnection("ftp://x/", timeout=1)
