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
