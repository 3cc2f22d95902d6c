"""What the benches share: their server env, a real `python -m jupyter_server` subprocess
with token auth, a keep-alive HTTP client, and small statistics and table helpers.

Used by bench/sampling.py and bench/offload.py (both put bench/ first on sys.path by being
run as scripts from it).
"""

from __future__ import annotations

import copy
import http.client
import json
import math
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent

Log = Callable[[str], None]


# --------------------------------------------------------------------------- environment

def progress_log() -> Log:
    """Progress lines on stderr, stamped with the seconds since the bench started."""
    started = time.monotonic()

    def log(msg: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {msg}", file=sys.stderr, flush=True)

    return log


def project_deps() -> list[str]:
    import tomllib

    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    return list(data["project"]["dependencies"])


def ensure_venv(venv: Path, extra: list[str], log: Log) -> Path:
    """A bench env: the project's runtime deps + ipykernel + `extra` pip specs.

    The project itself is not installed: the server gets the repo root on PYTHONPATH, so
    the bench always measures the working tree (and needs no labextension build). A marker
    file holds the specs installed; the env is (re)installed when the wanted set changes.
    """
    py = venv / "bin" / "python"
    wanted = sorted([*project_deps(), "ipykernel>=6", *extra])
    marker = venv / ".costguard-bench-deps.json"
    if py.exists() and marker.exists() and json.loads(marker.read_text()) == wanted:
        return py
    if not py.exists():
        log(f"creating {venv}")
        subprocess.check_call([sys.executable, "-m", "venv", str(venv)])
    log(f"installing into {venv}: {' '.join(wanted)}")
    subprocess.check_call([str(py), "-m", "pip", "install", "-q",
                           "--disable-pip-version-check", *wanted])
    marker.write_text(json.dumps(wanted))
    return py


def env_versions(python: str, dists: list[str]) -> dict[str, str]:
    """Installed versions of `dists` in the env of `python`, and its Python version."""
    code = (
        "import json, sys, importlib.metadata as m\n"
        "out = {}\n"
        f"for d in {dists!r}:\n"
        "    try: out[d] = m.version(d)\n"
        "    except Exception: out[d] = 'missing'\n"
        "out['python'] = sys.version.split()[0]\n"
        "print(json.dumps(out))\n"
    )
    res = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    versions: dict[str, str] = json.loads(res.stdout)
    return versions


def reexec_in(python: str, script: str, argv: list[str] | None) -> None:
    """Run the orchestrator itself in the bench env when this interpreter lacks psutil."""
    try:
        import psutil  # noqa: F401
    except ImportError:
        os.execv(python, [python, script, *(argv if argv is not None else sys.argv[1:])])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# --------------------------------------------------------------------------- server

#: Loopback only: no cloud metadata lookups (these machines have no cloud, and the
#: link-local address must not see traffic); every endpoint at a closed loopback port should
#: a bench turn them on; no container share (the benches price what they configure).
NO_CLOUD = {
    "COSTGUARD_CLOUD_METADATA": "off", "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_EC2_METADATA_SERVICE_ENDPOINT": "http://127.0.0.1:9",
    "GCE_METADATA_HOST": "127.0.0.1:9", "COSTGUARD_AZURE_IMDS_ENDPOINT": "http://127.0.0.1:9",
    "COSTGUARD_CONTAINER_SHARE": "off", "GPUHUNT_CATALOG_URL": "http://127.0.0.1:9/gpuhunt",
}

class Server:
    """One `python -m jupyter_server` subprocess with its own JUPYTER_* dirs under
    `workdir`, root dir `workdir/root`, a JSON config file and token auth."""

    def __init__(self, python: str, workdir: Path, log: Log,
                 env: dict[str, str] | None = None) -> None:
        self.python = python
        self.env = dict(env or {})  # on top of NO_CLOUD
        self.workdir = workdir
        self.root = workdir / "root"
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = log
        self.kernel_pids: set[int] = set()
        self.log_path = workdir / "server.log"

    def start(self, config: dict[str, Any], timeout: float = 90.0) -> None:
        """Start with `config` (traitlets sections; the bench adds the port, root dir,
        token and the rest of ServerApp) and wait until `api/status` answers."""
        self.root.mkdir(parents=True, exist_ok=True)
        config = copy.deepcopy(config)
        config.setdefault("ServerApp", {}).update({
            "port": self.port, "port_retries": 0, "ip": "127.0.0.1",
            "open_browser": False, "root_dir": str(self.root),
            "allow_unauthenticated_access": False, "allow_root": True,
        })
        config["IdentityProvider"] = {"token": self.token}
        cfg = self.workdir / "jupyter_server_config.json"
        cfg.write_text(json.dumps(config))
        pythonpath = os.pathsep.join(
            p for p in (str(REPO), str(BENCH), os.environ.get("PYTHONPATH", "")) if p)
        env = {**os.environ, "PYTHONPATH": pythonpath,
               "JUPYTER_CONFIG_DIR": str(self.workdir / "config"),
               "JUPYTER_RUNTIME_DIR": str(self.workdir / "runtime"),
               "JUPYTER_DATA_DIR": str(self.workdir / "data"),
               "JUPYTER_PLATFORM_DIRS": "1", "PYTHONUNBUFFERED": "1"}
        env.pop("COSTGUARD_INSTANCE_TYPE", None)
        env = {**env, **NO_CLOUD, **self.env}
        logf = open(self.log_path, "ab")  # lives as long as the server
        self.proc = subprocess.Popen(
            [self.python, "-m", "jupyter_server", f"--config={cfg}"],
            env=env, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited early:\n{self.tail()}")
            try:
                if Client(self).get("api/status")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"server did not start in {timeout}s:\n{self.tail()}")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-6000:]
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM the server (it shuts its kernels down), then SIGKILL what is left of
        the processes it had started (by PID and start time, so never a reused PID)."""
        if self.proc is None:
            return
        import psutil

        procs: list[psutil.Process] = []
        try:
            procs = psutil.Process(self.pid).children(recursive=True)
        except psutil.Error:
            pass
        for pid in self.kernel_pids:
            try:
                procs.append(psutil.Process(pid))
            except psutil.Error:
                pass
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        for p in procs:
            try:
                if p.is_running():
                    p.kill()
            except psutil.Error:
                pass
        try:
            os.killpg(self.pid, signal.SIGKILL)  # the server's own group (none left normally)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc = None


class Client:
    """One keep-alive HTTP connection with token auth."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.headers = {"Authorization": f"token {server.token}"}
        self.conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, bytes, float, float]:
        """(status, body, monotonic time before sending, monotonic time the body was read)."""
        data = None if body is None else json.dumps(body).encode()
        headers = dict(self.headers)
        if data is not None:
            headers["Content-Type"] = "application/json"
        for attempt in (0, 1):
            try:
                t0 = time.monotonic()
                self.conn.request(method, "/" + path, body=data, headers=headers)
                resp = self.conn.getresponse()
                payload = resp.read()
                t1 = time.monotonic()
                return resp.status, payload, t0, t1
            except (http.client.HTTPException, ConnectionError):
                self.conn.close()
                self.conn = http.client.HTTPConnection("127.0.0.1", self.server.port,
                                                       timeout=120)
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def get(self, path: str) -> tuple[int, bytes, float, float]:
        return self.request("GET", path)

    def json(self, method: str, path: str, body: Any = None) -> Any:
        code, payload, _, _ = self.request(method, path, body)
        if code >= 300:
            raise RuntimeError(f"{method} {path}: HTTP {code}: {payload[:300]!r}")
        return json.loads(payload)

    def close(self) -> None:
        self.conn.close()


# --------------------------------------------------------------------------- statistics

def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return float("nan")
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(q / 100.0 * len(s)) - 1))
    return s[k]


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def busy_cpu() -> float:
    """Machine-wide busy CPU seconds (all cores)."""
    import psutil

    t = psutil.cpu_times()
    return float(sum(t) - t.idle - getattr(t, "iowait", 0.0))


# --------------------------------------------------------------------------- report

def ms(x: float) -> str:
    return "n/a" if x != x else f"{x * 1000:.2f}"


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def text_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]

    def fmt(cells: list[str]) -> str:
        return "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths)))

    lines = [fmt(header), "  ".join("-" * w for w in widths)]
    lines += [fmt(r) for r in rows]
    return "\n".join(lines)


def md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)
