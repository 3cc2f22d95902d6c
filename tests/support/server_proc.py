"""A real `jupyter server` in its own process, for tests that kill, scrape or preload it."""

from __future__ import annotations

import http.client
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.costguard_config import server_sections


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class ServerProcess:
    """`jupyter server` with costguard, configured through a JSON config file."""

    workdir: Path
    costguard: dict[str, Any]
    env: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    token: str = field(default_factory=lambda: secrets.token_hex(16))
    proc: subprocess.Popen[bytes] | None = None
    #: the interpreter that runs the server (another venv's, for SkyPilot's client)
    python: str = sys.executable

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def start(self, timeout: float = 60.0) -> ServerProcess:
        return self._start(timeout, 1)

    def _start(self, timeout: float, attempt: int) -> ServerProcess:
        root = self.workdir / "root"
        root.mkdir(parents=True, exist_ok=True)
        config = {
            "ServerApp": {
                "jpserver_extensions": {"jupyter_costguard": True},
                "port": self.port,
                "port_retries": 0,
                "ip": "127.0.0.1",
                "open_browser": False,
                "root_dir": str(root),
                "allow_unauthenticated_access": False,
                "allow_root": True,  # CI runs as root
            },
            "IdentityProvider": {"token": self.token},
            # no background catalog refresh unless the test asks for one (a child process
            # a minute after start, on every server that lives that long)
            **server_sections({"catalog_refresh_hours": 0, **self.costguard}),
        }
        cfg = self.workdir / "jupyter_server_config.json"
        cfg.write_text(json.dumps(config))
        env = {**os.environ, **self.env,
               "JUPYTER_CONFIG_DIR": str(self.workdir / "config"),
               "JUPYTER_RUNTIME_DIR": str(self.workdir / "runtime"),
               "JUPYTER_DATA_DIR": str(self.workdir / "data"),
               "JUPYTER_PLATFORM_DIRS": "1",
               "PYTHONUNBUFFERED": "1"}
        self.log_path = self.workdir / "server.log"
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [self.python, "-m", "jupyter_server", f"--config={cfg}"],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                taken = any(w in self.log() for w in ("already in use", "not available"))
                if attempt < 3 and taken:
                    # another process (tests run on two workers, and kernels pick free ports
                    # too) took the port between free_port() and the server's bind
                    self.port = free_port()
                    return self._start(timeout, attempt + 1)
                raise RuntimeError(f"server exited early:\n{self.log()}")
            try:
                self.get("api/status")
                return self
            except (urllib.error.URLError, ConnectionError, OSError, http.client.HTTPException):
                # HTTPException: something not HTTP answered on the port (a kernel's ZMQ
                # socket that took it first); the server's exit says so on the next turn
                time.sleep(0.2)
        raise RuntimeError(f"server did not start within {timeout}s:\n{self.log()}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-8000:]
        except OSError:
            return ""

    def request(self, path: str, method: str = "GET", body: Any = None,
                token: str | None = "default") -> tuple[int, bytes]:
        headers = {}
        tok = self.token if token == "default" else token
        if tok:
            headers["Authorization"] = f"token {tok}"
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def get(self, path: str) -> Any:
        code, body = self.request(path)
        if code != 200:
            raise urllib.error.URLError(f"{path}: HTTP {code}: {body[:200]!r}")
        return json.loads(body)

    def wait_for(self, path: str, predicate: Any, timeout: float = 60.0) -> Any:
        deadline = time.monotonic() + timeout
        doc = None
        while time.monotonic() < deadline:
            try:
                doc = self.get(path)
            except urllib.error.URLError as e:  # e.g. 404 until the first sample lands
                doc = str(e)
            else:
                if predicate(doc):
                    return doc
            time.sleep(0.1)
        raise AssertionError(f"{path}: condition not met in {timeout}s; last: {doc}\n{self.log()}")

    def start_session(self, path: str) -> dict[str, Any]:
        code, body = self.request("api/sessions", "POST", {
            "path": path, "type": "notebook", "name": "", "kernel": {"name": "python3"}})
        assert code == 201, body
        doc: dict[str, Any] = json.loads(body)
        return doc

    def kill9(self) -> None:
        """SIGKILL the server alone (its kernels are orphaned, as in a real crash)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                pass
        # whatever is left of the session (orphaned kernels after a kill -9)
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc = None
