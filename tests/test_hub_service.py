"""The hub service's process on its own: it stops at once and cleanly on SIGTERM and SIGINT
(JupyterHub's shutdown sends SIGTERM and waited 29.5 s for it before), its database
consistent, and it keeps serving while the Hub cannot be reached."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support.server_proc import free_port

pytestmark = pytest.mark.timeout(120)


def start(tmp_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    port, closed = free_port(), free_port()
    env = {**os.environ, "JUPYTERHUB_API_TOKEN": "service-token",
           # a Hub that does not answer: loopback, a port nothing listens on
           "JUPYTERHUB_API_URL": f"http://127.0.0.1:{closed}/hub/api",
           "JUPYTERHUB_SERVICE_URL": f"http://127.0.0.1:{port}",
           "JUPYTERHUB_SERVICE_PREFIX": "/services/costguard/",
           "JUPYTERHUB_SERVICE_NAME": "costguard", "JUPYTERHUB_CLIENT_ID": "service-costguard"}
    proc = subprocess.Popen([sys.executable, "-m", "jupyter_costguard.hub",
                             f"--db={tmp_path / 'hub.sqlite'}", "--poll-interval=0.5"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/services/costguard/api/spend"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=5)
        except urllib.error.HTTPError as e:
            if e.code == 403:  # up, and asking for a token
                return proc, url
        except OSError:
            pass
        assert proc.poll() is None, proc.communicate()[0].decode()
        time.sleep(0.2)
    proc.kill()
    raise AssertionError("the service did not start")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_the_service_stops_cleanly_on_a_signal(tmp_path: Path, sig: int) -> None:
    proc, _ = start(tmp_path)
    time.sleep(1.5)  # a few rounds of asking the Hub, which does not answer
    proc.send_signal(sig)
    try:
        out = proc.communicate(timeout=20)[0].decode(errors="replace")
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("still running 20 s after the signal") from None
    assert proc.returncode == 0, out
    assert "costguard-hub: stopping" in out
    # the Hub's absence is a line per round, not a traceback
    assert "asking the Hub which servers run" in out and "Traceback" not in out, out
    db = sqlite3.connect(tmp_path / "hub.sqlite")
    try:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        db.close()


def test_stopping_closes_the_store_only_after_the_workers_last_read(tmp_path: Path) -> None:
    """SIGTERM under load once ended the service by SIGSEGV: the store (every thread's
    connection) was closed on one worker thread while the other still read a page's figures
    from it. Stopping now lets the worker's jobs end first, then closes the store."""
    import asyncio
    import threading

    from tornado import web
    from tornado.httpserver import HTTPServer
    from tornado.testing import bind_unused_port

    from jupyter_costguard.hub.app import CostGuardHub
    from jupyter_costguard.hub.hubapi import HubAPI

    app = CostGuardHub()
    app.initialize([f"--db={tmp_path / 'hub.sqlite'}"])
    reading, release = threading.Event(), threading.Event()

    def page_read() -> int:  # a page's figures, read on the worker
        with app.store._reading() as db:
            reading.set()
            release.wait(30)
            return int(db.execute("SELECT COUNT(*) FROM servers").fetchone()[0])

    async def scenario() -> int:
        app.hub = HubAPI(f"http://127.0.0.1:{free_port()}/hub/api", "service-token")
        server = HTTPServer(web.Application())
        sock, _ = bind_unused_port()
        server.add_sockets([sock])
        read = app.run(page_read)
        await asyncio.to_thread(reading.wait, 30)
        stopping = asyncio.ensure_future(app.stop(server))
        await asyncio.sleep(0.3)  # stopping has begun while the read is in flight
        release.set()
        await stopping
        return await read

    assert asyncio.run(scenario()) == 0
    with pytest.raises(sqlite3.ProgrammingError):  # closed, once nothing used it
        app.store.db.execute("SELECT 1")
