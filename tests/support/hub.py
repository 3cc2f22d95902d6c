"""A real JupyterHub (PyPI `jupyterhub`) with its real proxy (npm `configurable-http-proxy`),
local-process single-user servers with costguard, each user playing their own GPU trace, and
the costguard service as a managed service.

A second service, `tester`, holds a fixed token with admin rights over users, servers and
tokens: the tests use it to start and stop servers and to mint each user's own token.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.costguard_config import server_sections
from tests.support.server_proc import free_port
from tests.support.traces import write_trace
from tests.support.units import GiB

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def chp_command() -> str | None:
    """configurable-http-proxy on PATH or where scripts/test.sh installs it."""
    local = ROOT / ".venv" / "node" / "node_modules" / ".bin" / "configurable-http-proxy"
    if local.exists():
        return str(local)
    return shutil.which("configurable-http-proxy")


def require_hub() -> str:
    """The proxy's command; skip here without it, fail in CI (which installs it)."""
    chp = chp_command()
    if chp is None or shutil.which("jupyterhub", path=str(BIN)) is None:
        if os.environ.get("CI"):
            pytest.fail("CI must install jupyterhub and configurable-http-proxy")
        pytest.skip("needs jupyterhub and configurable-http-proxy (scripts/test.sh)")
    return chp


@dataclass
class HubUser:
    name: str
    trace: Path
    groups: list[str] = field(default_factory=list)
    hourly_rate: float = 36.0
    #: Python written to the user's `jupyter_server_config.py`, beside the harness's JSON
    #: (the user's own configuration, which they control; empty: none)
    server_config: str = ""


CONFIG = r'''
import json, os, sys
spec = json.load(open({spec!r}))
c = get_config()  # noqa
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = spec["port"]
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = spec["hub_port"]
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:%d" % spec["proxy_api_port"]
c.ConfigurableHTTPProxy.command = [spec["chp"]]
c.ConfigurableHTTPProxy.pid_file = os.path.join(spec["dir"], "proxy.pid")
c.JupyterHub.db_url = "sqlite:///" + os.path.join(spec["dir"], "hub.sqlite")
c.JupyterHub.cookie_secret_file = os.path.join(spec["dir"], "cookie_secret")
c.JupyterHub.pid_file = os.path.join(spec["dir"], "hub.pid")
c.JupyterHub.cleanup_servers = True
c.JupyterHub.authenticator_class = "shared-password"
c.SharedPasswordAuthenticator.user_password = spec["password"]
c.SharedPasswordAuthenticator.admin_password = spec["admin_password"]
c.Authenticator.allow_all = True
c.Authenticator.admin_users = {{"admin"}}
c.JupyterHub.spawner_class = "simple"
c.SimpleLocalProcessSpawner.home_dir_template = os.path.join(spec["dir"], "home", "{{username}}")
c.Spawner.cmd = [spec["singleuser"]]
c.Spawner.args = ["--allow-root"]  # CI runs as root
c.Spawner.start_timeout = 90
c.Spawner.http_timeout = 90
c.Spawner.default_url = "/lab"
env = dict(spec["env"])
env["JUPYTER_CONFIG_DIR"] = lambda spawner: os.path.join(spec["dir"], "conf", spawner.user.name)
# where each server pushes its report (straight to the service, as a site's pod network would)
env["COSTGUARD_HUB_URL"] = "http://127.0.0.1:%d/services/costguard/" % spec["service_port"]
c.Spawner.environment = env
c.JupyterHub.load_groups = spec["groups"]
c.JupyterHub.custom_scopes = {{
    "custom:costguard:admin": {{"description": "See every user's costguard figures"}},
}}
c.JupyterHub.services = [
    {{"name": "costguard", "url": "http://127.0.0.1:%d" % spec["service_port"],
      "command": [sys.executable, "-m", "jupyter_costguard.hub",
                  "--config=" + spec["service_config"]],
      "oauth_client_allowed_scopes": ["custom:costguard:admin"],
      "oauth_no_confirm": True,
      "environment": spec["env"]}},
    {{"name": "tester", "api_token": spec["tester_token"]}},
]
c.JupyterHub.load_roles = [
    {{"name": "costguard", "services": ["costguard"],
      "scopes": ["list:users", "read:users:name", "read:users:groups", "read:servers",
                 "delete:servers"]}},
    # each server's own token may report to the service
    {{"name": "server", "scopes": ["users:activity!user", "access:servers!server",
                                   "access:services!service=costguard"]}},
    {{"name": "tester", "services": ["tester"], "scopes": ["admin:users", "admin:servers",
                                                        "tokens", "access:servers",
                                                        "access:services"]}},
    {{"name": "user", "scopes": ["self", "access:services!service=costguard"]}},
    {{"name": "costguard-admins", "users": ["admin"],
      "scopes": ["custom:costguard:admin", "access:services!service=costguard"]}},
]
extra = spec.get("extra")
if extra:
    exec(open(extra).read())
'''


class Hub:
    """`jupyterhub` in its own process group; `stop()` ends it and every server it spawned."""

    def __init__(self, workdir: Path, users: list[HubUser],
                 service_settings: dict[str, Any] | None = None,
                 extra_config: str = "", env: dict[str, str] | None = None) -> None:
        self.dir = workdir
        self.users = {u.name: u for u in users}
        self.port = free_port()
        self.service_port = free_port()
        self.password = secrets.token_hex(8)
        #: JupyterHub's shared-password login takes admins only with their own password
        self.admin_password = secrets.token_hex(24)
        self.tester_token = secrets.token_hex(16)
        self.proc: subprocess.Popen[bytes] | None = None
        # figures computed afresh for every read: the tests compare them to the servers'
        # own at one sample (tests/test_hub_protocol.py tests the page cache)
        self.service_settings = {"poll_interval": 1.0, "report_interval": 1.0,
                                 "page_max_age_seconds": 0.0, **(service_settings or {})}
        self.extra_config = extra_config
        self.env = env or {}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def service_db(self) -> Path:
        return self.dir / "costguard_hub.sqlite"

    def write_config(self, chp: str) -> Path:
        self.dir.mkdir(parents=True, exist_ok=True)
        groups: dict[str, dict[str, list[str]]] = {}
        for u in self.users.values():
            for g in u.groups:
                groups.setdefault(g, {"users": []})["users"].append(u.name)
            conf = self.dir / "conf" / u.name
            conf.mkdir(parents=True, exist_ok=True)
            (conf / "jupyter_server_config.json").write_text(json.dumps(server_sections({
                "db_path": str(self.dir / "ledgers" / f"{u.name}.sqlite"),
                "sample_interval": 0.5, "hourly_rate": u.hourly_rate, "gpu_share": 0.9,
                "replay_trace": str(u.trace), "replay_mode": "always",
                "LocalBackend.warm_kernels": 0, "catalog_refresh_hours": 0})))
            if u.server_config:
                (conf / "jupyter_server_config.py").write_text(u.server_config)
        (self.dir / "ledgers").mkdir(exist_ok=True)
        settings = {"db_path": str(self.service_db), **self.service_settings}
        service_config = self.dir / "costguard_hub_config.py"
        service_config.write_text("c = get_config()  # noqa\n" + "".join(
            f"c.CostGuardHub.{k} = {v!r}\n" for k, v in settings.items()))
        extra = None
        if self.extra_config:
            extra = self.dir / "extra_config.py"
            extra.write_text(self.extra_config)
        env = {k: v for k, v in os.environ.items()
               if k.startswith(("COSTGUARD_", "AWS_", "GPUHUNT_", "ECS_", "GCE_", "AZURE_"))}
        env.update(self.env)
        env["PATH"] = f"{BIN}:{os.environ.get('PATH', '')}"
        spec = {"dir": str(self.dir), "port": self.port, "hub_port": free_port(),
                "proxy_api_port": free_port(), "chp": chp, "password": self.password,
                "admin_password": self.admin_password,
                "singleuser": str(BIN / "jupyterhub-singleuser"), "env": env,
                "groups": groups, "service_port": self.service_port,
                "service_config": str(service_config), "tester_token": self.tester_token,
                "extra": str(extra) if extra else None}
        (self.dir / "spec.json").write_text(json.dumps(spec))
        self.service_config = service_config
        path = self.dir / "jupyterhub_config.py"
        path.write_text(CONFIG.format(spec=str(self.dir / "spec.json")))
        return path

    def start(self, timeout: float = 90.0) -> Hub:
        chp = require_hub()
        config = self.write_config(chp)
        self.log_path = self.dir / "hub.log"
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [str(BIN / "jupyterhub"), "-f", str(config)], cwd=self.dir,
            env={**os.environ, **self.env, "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
                 "PYTHONUNBUFFERED": "1"},
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self._wait(lambda: self.api("GET", "/") is not None, timeout, "the hub")
        return self

    def _wait(self, ok: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"jupyterhub exited early:\n{self.log()}")
            try:
                if ok():
                    return
            except (urllib.error.URLError, ConnectionError, OSError, KeyError, RuntimeError) as e:
                last = e
            time.sleep(0.3)
        raise TimeoutError(f"{what} not ready in {timeout} s ({last}):\n{self.log()}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-6000:]
        except OSError:
            return ""

    # --- HTTP ------------------------------------------------------------------------

    def request(self, method: str, url: str, token: str | None = None, body: Any = None,
                headers: dict[str, str] | None = None,
                ) -> tuple[int, dict[str, str], bytes]:
        h = dict(headers or {})
        if token:
            h["Authorization"] = f"token {token}"
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url if url.startswith("http") else self.url + url,
                                     data=data, method=method, headers=h)

        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *a: Any, **k: Any) -> None:
                return None

        opener = urllib.request.build_opener(NoRedirect)
        try:
            with opener.open(req, timeout=30) as resp:
                return resp.status, dict(resp.headers), resp.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def api(self, method: str, path: str, body: Any = None) -> Any:
        """The Hub's REST API as the tester service; raises on an error status."""
        status, _, data = self.request(method, "/hub/api" + path, self.tester_token, body)
        if status >= 400:
            raise RuntimeError(f"{method} {path}: {status} {data[:500]!r}")
        return json.loads(data) if data else None

    def service(self, path: str, token: str | None, **kw: Any) -> tuple[int, Any]:
        status, headers, data = self.request("GET", "/services/costguard/" + path, token,
                                             **kw)
        ctype = {k.lower(): v for k, v in headers.items()}.get("content-type", "")
        if "json" in ctype:
            return status, json.loads(data)
        return status, data.decode(errors="replace")

    def token_for(self, user: str) -> str:
        doc = self.api("POST", f"/users/{user}/tokens",
                       {"note": "test", "expires_in": 3600})
        return str(doc["token"])

    # --- servers -----------------------------------------------------------------------

    def start_server(self, user: str, options: dict[str, Any] | None = None) -> None:
        self.api("POST", f"/users/{user}/server", options or {})

    def wait_ready(self, user: str, timeout: float = 240.0) -> None:
        def ready() -> bool:
            model = self.api("GET", f"/users/{user}")
            server = (model.get("servers") or {}).get("")
            return bool(server and server.get("ready"))
        self._wait(ready, timeout, f"{user}'s server")

    def start_kernel(self, user: str) -> str:
        """A kernel on the user's server (through the proxy, the tester's token)."""
        status, _, data = self.request("POST", f"/user/{user}/api/kernels", self.tester_token,
                                       {"name": "python3"})
        if status >= 400:
            raise RuntimeError(f"kernel for {user}: {status} {data[:300]!r}")
        return str(json.loads(data)["id"])

    def stop_server(self, user: str) -> None:
        self.api("DELETE", f"/users/{user}/server")

    def server_status(self, user: str) -> Any:
        """The user's own costguard status, read through the proxy (the tester's token)."""
        status, _, data = self.request("GET", f"/user/{user}/costguard/api/status",
                                       self.tester_token)
        if status != 200:
            raise RuntimeError(f"status of {user}: {status} {data[:300]!r}")
        return json.loads(data)

    def service_pids(self) -> list[int]:
        """The costguard service's process (JupyterHub starts it, and restarts it if it dies)."""
        import psutil
        out = []
        for p in psutil.process_iter(["cmdline"]):
            cmd = p.info["cmdline"] or []
            if "jupyter_costguard.hub" in cmd and any(str(self.service_config) in c
                                                      for c in cmd):
                out.append(p.pid)
        return out

    def stop(self) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc = None


def gpu_trace(path: Path, utilization: float) -> Path:
    """GPU 0 held by the server's first kernel at `utilization`, GPU 1 unused."""
    held = [{"kernel": 0, "used_memory_bytes": 4 * GiB}] if utilization else []
    frame = {"t": 0, "gpus": [
        {"utilization_percent": utilization, "power_watts": 60 + 3 * utilization,
         "processes": held},
        {"utilization_percent": 0, "power_watts": 60, "processes": []}]}
    return write_trace(path, [frame], gpus=2)


def wait_for(check: Any, timeout: float = 60.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what or check}: {last!r}")
