"""The real SkyPilot (0.14.1) with no cloud: its Slurm infra, over SSH on loopback, driving the
test Slurm cluster (`slurm_cluster`). Nothing leaves this machine.

What it takes, each step found by doing it here:

- **Two Python environments, cached** (`ensure_environments`, under ``~/.cache/costguard-tests``
  or ``$COSTGUARD_TEST_CACHE``; built once, ~4 min; ``.ci/run`` starts the build in the
  background while the rest of the suite runs):
  - *the client venv*: SkyPilot pins ``click<8.2`` and the test extra's import-linter needs
    ``click>=8.2``, so ``skypilot[slurm]`` gets a venv of its own. A ``.pth`` file appends this
    checkout and the test venv's site-packages after its own, so the Jupyter server under test
    (and SkyPilot's API server) import costguard, jupyter_server and the rest from there, and
    SkyPilot's pins from its own.
  - *a wheelhouse for SkyPilot's remote runtime*, which wants Python 3.10 and installs itself
    with ``uv`` from the package index: the login shell gets ``UV_OFFLINE=1`` and
    ``UV_FIND_LINKS`` at a wheelhouse built here from the registry (python-hostlist is
    sdist-only and 3.10's pip cannot build it, so this interpreter builds its wheel), and a
    ``curl`` stand-in answers the uv installer's download with the uv binary taken from the uv
    wheel (any other curl is refused).
- **sshd on a loopback port** with host and user keys of its own and a throw-away HOME
  (``~/.slurm/config`` names that host; ``~/.sky/config.yaml``: ``allowed_clouds: [slurm]``,
  the cluster's ``tmpdir`` and ``jobs.controller.consolidation_mode: true``, so the
  managed-jobs controller runs inside the API server). SkyPilot runs login shells, and
  /etc/profile resets PATH: ``~/.bash_profile`` puts the stand-in directory first again.
- **The network check.** Before each status check the managed-jobs controller contacts public
  DNS addresses and waits for ever without an answer. A test-only hook (``sitecustomize`` on
  the API server's PYTHONPATH) points that list (``sky.backends.backend_utils._TEST_IP_LIST``)
  at a loopback HTTP server; never at an outside address.
- Usage collection off (``SKYPILOT_DISABLE_USAGE_COLLECTION``) in every SkyPilot process, and
  SkyPilot told the machine is small (``SKYPILOT_POD_MEMORY_GB_LIMIT``): it sizes its
  controllers by memory, and a dozen of them polling would take the two cores.
- SkyPilot clusters that start together on one Slurm node race for the same skylet port (its
  own TODO in ``attempt_skylet.py``), and the loser never comes up: the tests launch one job at
  a time, each once the one before runs.
"""

from __future__ import annotations

import fcntl
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import textwrap
import time
import zipfile
from pathlib import Path

VERSION = "0.14.1"
REPO = Path(__file__).resolve().parents[2]

NETCHECK_HOOK = '''\
"""Test-only hook (tests/support/skypilot_infra.py) for SkyPilot's API server and every Python
it starts: the managed-jobs controller checks the network by contacting public addresses before
each status check; here it asks a loopback HTTP server instead. Nothing leaves the machine."""
import importlib.abc
import importlib.util
import os
import sys

_URL = os.environ.get("COSTGUARD_SKY_NETCHECK_URL")
_NAME = "sky.backends.backend_utils"


class _Point(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != _NAME or not _URL:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            module._TEST_IP_LIST = [_URL]

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _Point())
'''

CURL_STANDIN = '''#!/bin/sh
# test stand-in for curl (tests/support/skypilot_infra.py): the only download SkyPilot's
# remote runtime makes with it is uv's installer; answer with a script that copies the uv
# binary taken from the package registry's uv wheel. Anything else is refused.
UV_BIN={uv}
case "$*" in
  *astral.sh/uv/install.sh*)
    echo 'mkdir -p "$UV_INSTALL_DIR" && cp '"$UV_BIN"' "$UV_INSTALL_DIR/uv"' ;;
  *) echo "curl stand-in: refusing $*" >&2; exit 7 ;;
esac
'''


def cache_dir() -> Path:
    base = os.environ.get("COSTGUARD_TEST_CACHE") or os.path.expanduser("~/.cache/costguard-tests")
    return Path(base) / f"skypilot-{VERSION}"


def python310() -> str | None:
    """A Python 3.10 for SkyPilot's remote runtime (this machine's pyenv has one; its shim
    refuses to run a version that is not selected, so the interpreter itself is used)."""
    hits = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.10*/bin/python3.10")))
    for candidate in [*reversed(hits), shutil.which("python3.10")]:
        if candidate and subprocess.run([candidate, "-c", ""], capture_output=True
                                        ).returncode == 0:
            return candidate
    return None


def unavailable() -> str | None:
    """Why SkyPilot cannot run here, or None."""
    missing = [b for b in ("sshd", "ssh", "ssh-keygen", "rsync")
               if shutil.which(b, path=os.environ.get("PATH", "") + ":/usr/sbin") is None]
    if missing:
        return f"missing {', '.join(missing)}: apt-get install openssh-server rsync (.ci/run does)"
    if python310() is None:
        return "no Python 3.10 for SkyPilot's remote runtime"
    return None


def _run(args: list[str], log: Path, **kw: object) -> None:
    with open(log, "ab") as out:
        out.write(f"\n$ {' '.join(args)}\n".encode())
        out.flush()
        subprocess.run(args, stdout=out, stderr=subprocess.STDOUT, check=True, **kw)  # type: ignore[call-overload]


def venv_python(cache: Path) -> Path:
    return cache / "venv" / "bin" / "python"


def _build_venv(cache: Path, log: Path) -> None:
    venv = cache / "venv"
    shutil.rmtree(venv, ignore_errors=True)
    _run([sys.executable, "-m", "venv", str(venv)], log)
    _run([str(venv / "bin" / "pip"), "install", "-q", f"skypilot[slurm]=={VERSION}"], log)


def _link_checkout(cache: Path) -> None:
    """Append this checkout and the test venv's packages to the client venv's path, after its
    own packages (SkyPilot's pins win, the rest comes from the test venv). Written on every
    run, not with the cached venv: a cache built from another checkout would otherwise run
    that checkout's venv (missing what this one added, and pointing at a deleted one)."""
    venv = cache / "venv"
    purelib = subprocess.run([str(venv / "bin" / "python"), "-c",
                              "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    pth = Path(purelib, "zz_costguard_tests.pth")
    text = f"{REPO}\n{sysconfig.get_paths()['purelib']}\n"
    if not pth.exists() or pth.read_text() != text:
        pth.write_text(text)


def _build_wheelhouse(cache: Path, log: Path) -> None:
    wheels = cache / "wheelhouse"
    shutil.rmtree(wheels, ignore_errors=True)
    wheels.mkdir(parents=True)
    py310 = python310()
    assert py310 is not None
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels),
          "python-hostlist"], log)
    _run([py310, "-m", "pip", "wheel", "-q", "-w", str(wheels), "--find-links", str(wheels),
          f"skypilot[slurm,remote]=={VERSION}", "uv", "setuptools<70", "pip"], log)
    uv_wheel = sorted(wheels.glob("uv-*.whl"))[-1]
    with zipfile.ZipFile(uv_wheel) as z:
        name = next(n for n in z.namelist() if n.endswith("/scripts/uv"))
        (cache / "uv").write_bytes(z.read(name))
    (cache / "uv").chmod(0o755)


def ensure_environments(cache: Path | None = None) -> Path:
    """The client venv and the remote runtime's wheelhouse, built once (under a lock, so the
    background build and a test wait for each other)."""
    cache = cache or cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    log = cache / "build.log"
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (cache / "venv.done").exists():
            _build_venv(cache, log)
            (cache / "venv.done").touch()
        _link_checkout(cache)
        if not (cache / "wheelhouse.done").exists():
            _build_wheelhouse(cache, log)
            (cache / "wheelhouse.done").touch()
    return cache


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class SkyPilotInfra:
    """sshd, the throw-away HOME, the network-check answerer and SkyPilot's API server."""

    def __init__(self, root: Path, slurm_conf: Path, cache: Path) -> None:
        self.root = root
        self.slurm_conf = slurm_conf
        self.cache = cache
        self.home = root / "home"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.env: dict[str, str] = {}

    @property
    def python(self) -> str:
        return str(venv_python(self.cache))

    def start(self) -> SkyPilotInfra:
        try:
            self._files()
            self._sshd()
            self.env = self._environment()
            self.sky("api", "start", timeout=180)
            out = self.sky("check", "slurm", timeout=180)
            if "enabled" not in out.lower():
                raise RuntimeError(f"sky check slurm:\n{out}")
        except BaseException:
            self.stop()
            raise
        return self

    def _files(self) -> None:
        root, home = self.root, self.home
        for d in (home / ".sky", home / ".slurm", root / "bin", root / "hook", root / "skytmp"):
            d.mkdir(parents=True, exist_ok=True)
        root.chmod(0o755)
        for key in ("key", "hostkey"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                            str(root / key)], check=True)
        (root / "authorized_keys").write_text((root / "key.pub").read_text())
        curl = root / "bin" / "curl"
        curl.write_text(CURL_STANDIN.format(uv=self.cache / "uv"))
        curl.chmod(0o755)
        (root / "hook" / "sitecustomize.py").write_text(NETCHECK_HOOK)

    def _sshd(self) -> None:
        root, home = self.root, self.home
        self.port = free_port()
        py310 = Path(python310() or "python3.10").parent
        path = f"{root / 'bin'}:{py310}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
        setenv = " ".join([
            f"HOME={home}", f"SLURM_CONF={self.slurm_conf}", "UV_OFFLINE=1",
            f"UV_FIND_LINKS={self.cache / 'wheelhouse'}", "UV_PYTHON_DOWNLOADS=never",
            "UV_NO_CACHE=1", "SKYPILOT_DISABLE_USAGE_COLLECTION=1",
            # loopback only: no cloud metadata lookups from anything the tasks run
            "COSTGUARD_CLOUD_METADATA=off", "AWS_EC2_METADATA_DISABLED=true", f"PATH={path}"])
        (root / "sshd_config").write_text(textwrap.dedent(f"""\
            Port {self.port}
            ListenAddress 127.0.0.1
            HostKey {root / 'hostkey'}
            PidFile {root / 'sshd.pid'}
            AuthorizedKeysFile {root / 'authorized_keys'}
            PermitRootLogin prohibit-password
            PasswordAuthentication no
            KbdInteractiveAuthentication no
            StrictModes no
            UsePAM no
            MaxStartups 100
            MaxSessions 100
            SetEnv {setenv}
            """))
        # SkyPilot runs login shells: /etc/profile resets PATH, ~/.bash_profile puts ours back
        (home / ".bash_profile").write_text(f"export PATH={path}\n")
        Path("/run/sshd").mkdir(exist_ok=True)
        sshd = shutil.which("sshd", path="/usr/sbin:/usr/bin") or "/usr/sbin/sshd"
        self.procs.append(subprocess.Popen(
            [sshd, "-D", "-f", str(root / "sshd_config"), "-E", str(root / "sshd.log")],
            start_new_session=True))
        (home / ".slurm" / "config").write_text(textwrap.dedent(f"""\
            Host costguard
              HostName 127.0.0.1
              Port {self.port}
              User root
              IdentityFile {root / 'key'}
              IdentitiesOnly yes
              StrictHostKeyChecking no
              UserKnownHostsFile /dev/null
            """))
        (home / ".sky" / "config.yaml").write_text(textwrap.dedent(f"""\
            allowed_clouds: [slurm]
            jobs:
              controller:
                consolidation_mode: true
            slurm:
              cluster_configs:
                costguard:
                  tmpdir: {root / 'skytmp'}
            """))
        deadline = time.monotonic() + 15
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            if time.monotonic() > deadline:
                raise RuntimeError("sshd did not listen:\n" + self._read("sshd.log"))
            time.sleep(0.1)

    def _environment(self) -> dict[str, str]:
        """The environment of every SkyPilot process here: the throw-away HOME, the hook."""
        netcheck = free_port()
        self.procs.append(subprocess.Popen(
            [sys.executable, "-m", "http.server", str(netcheck), "--bind", "127.0.0.1",
             "--directory", str(self.root / "hook")], stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True))
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("SKYPILOT", "SLURM", "PYTHONPATH", "VIRTUAL_ENV"))}
        env.update({"HOME": str(self.home), "PYTHONPATH": str(self.root / "hook"),
                    "SKYPILOT_DISABLE_USAGE_COLLECTION": "1",
                    # SkyPilot sizes its managed-jobs controllers and API server workers by
                    # memory: on a 24 GiB machine a dozen controller processes poll on two
                    # cores. Said to be a small machine, it runs a few.
                    "SKYPILOT_POD_MEMORY_GB_LIMIT": "6",
                    "PATH": f"{Path(self.python).parent}:{env.get('PATH', '')}",
                    "COSTGUARD_SKY_NETCHECK_URL": f"http://127.0.0.1:{netcheck}"})
        return env

    def sky(self, *args: str, timeout: float = 120) -> str:
        exe = str(Path(self.python).parent / "sky")
        done = subprocess.run([exe, *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"sky {' '.join(args)} exited {done.returncode}:\n"
                               f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
        return done.stdout + done.stderr

    def _read(self, name: str) -> str:
        try:
            return (self.root / name).read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def logs(self) -> str:
        """The API server's log (for a failing test's message)."""
        hits = sorted(self.home.glob(".sky/api_server/*.log"))
        return "\n".join(p.read_text(errors="replace")[-6000:] for p in hits[-2:])

    def stop(self) -> None:
        if self.env:
            try:
                self.sky("api", "stop", timeout=60)
            except (RuntimeError, subprocess.TimeoutExpired, OSError):
                pass
        self._kill_leftovers()
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait(10)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    os.killpg(proc.pid, signal.SIGKILL)
        self.procs.clear()

    def _kill_leftovers(self) -> None:
        """Everything SkyPilot started here: its API server's executors, controllers and the
        clusters' skylets and keepers outlive ``sky api stop`` and a killed test. They all run
        with the throwaway HOME (sshd's SetEnv gives it to what SkyPilot starts over SSH)."""
        import psutil

        home, me = str(self.home), os.getpid()
        for p in psutil.process_iter(["pid"]):
            try:
                if p.pid != me and p.environ().get("HOME") == home:
                    p.kill()
            except (psutil.Error, OSError):
                continue


if __name__ == "__main__":  # .ci/run: build the cached environments ahead of the tests
    print(ensure_environments())
