"""A real single-node Slurm cluster on localhost for the tests (Debian's slurmctld, slurmd, munge).

Everything lives in one private directory, so nothing on the machine is touched and two test
runs can share a machine:

- munge: a munged of our own (``-F``, a key generated here, its socket in our directory) and
  ``AuthInfo=socket=...`` in slurm.conf, so a system munged (or its absence, as in a container
  without systemd) does not matter. munged insists that every directory above its socket is
  world-executable, so the directory is made under /tmp with mode 0755, not in pytest's
  private (0700) tmp_path.
- slurmctld and slurmd in the foreground (``-D``) as root (``SlurmUser=root``), on free
  ports, with state, spool, pid and log files here; ``SLURM_CONF`` points the client tools
  (sbatch, squeue, scontrol, scancel) and the server under test at it.

The choices in slurm.conf, for a container without systemd or writable cgroups:

- ``ProctrackType=proctrack/linuxproc``, ``TaskPlugin=task/none``,
  ``JobAcctGatherType=jobacct_gather/none``: no cgroups anywhere (a job's processes are found
  by parent links, which is enough: the runner's kernel is its child).
- ``SelectType=select/cons_tres`` with ``CR_Core_Memory`` and ``DefMemPerCPU``: cores and
  memory are scheduled as on a real cluster, and a job that asks for no memory does not take
  the whole node.
- ``AccountingStorageType=accounting_storage/none`` (no slurmdbd): ``sacct`` does not work, as
  on many small clusters, so the backend's ``scontrol show job`` fallback is what runs;
  ``MinJobAge=600`` keeps ended jobs visible to it for the whole test run.
- ``JobRequeue=1`` (batch jobs may be requeued), ``ReturnToService=2`` (the node comes back by
  itself after a restart), ``KillWait=5`` (SIGTERM to SIGKILL on cancel; 30 s by default),
  ``AuthInfo=...,cred_expire=5``: a requeued job waits ``cred_expire`` before it may start
  again, 120 s by default; ``SchedulerParameters=sched_interval=1``: the main scheduler looks
  at the queue every second (60 s by default), so the requeued job starts once it may.
- The node declares the machine's real CPU count and a little less than its memory (slurmd
  drains a node that claims more than it has).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "sinfo")
SBIN_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _which(name: str) -> str | None:
    return shutil.which(name, path=SBIN_PATH)


def unavailable() -> str | None:
    """Why a cluster cannot be started here, or None."""
    if os.geteuid() != 0:
        return "a Slurm cluster for the tests needs root (slurmd runs jobs as their user)"
    missing = [b for b in BINARIES if _which(b) is None]
    if missing:
        return (f"missing {', '.join(missing)}: apt-get install slurmctld slurmd slurm-client "
                "munge (scripts/test.sh does)")
    return None


def _memory_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    return 4096


class SlurmCluster:
    """munged + slurmctld + slurmd, one node named after this host, partition ``debug``."""

    def __init__(self, cpus: int | None = None) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="costguard-slurm-", dir="/tmp"))
        self.root.chmod(0o755)
        self.conf = self.root / "slurm.conf"
        self.node = socket.gethostname().split(".")[0]
        real = os.cpu_count() or 1
        #: more CPUs than the machine has (``SlurmdParameters=config_overrides``) lets jobs
        #: that mostly wait share it, as SkyPilot's test jobs do
        self.cpus = max(real, cpus or real)
        self.overrides = "SlurmdParameters=config_overrides" if self.cpus > real else ""
        self.memory_mb = max(1024, int(_memory_mb() * 0.9))
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    # --- starting and stopping ---------------------------------------------------------

    def start(self, timeout: float = 60.0) -> SlurmCluster:
        try:
            self._start_munge()
            self._write_conf()
            self._daemon("slurmctld", [_exe("slurmctld"), "-D", "-f", str(self.conf)])
            self._daemon("slurmd", [_exe("slurmd"), "-D", "-f", str(self.conf),
                                    "-N", self.node])
            self._wait_idle(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_munge(self) -> None:
        keys = self.root / "munge-key"
        keys.mkdir(mode=0o700)
        key = keys / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        run = self.root / "munge"
        run.mkdir(mode=0o755)
        self.munge_socket = run / "munge.socket"
        self._daemon("munged", [
            _exe("munged"), "-F", f"--socket={self.munge_socket}", f"--key-file={key}",
            f"--pid-file={run / 'munged.pid'}", f"--log-file={keys / 'munged.log'}",
            f"--seed-file={keys / 'munged.seed'}"])
        deadline = time.monotonic() + 15
        while not self.munge_socket.exists():
            if time.monotonic() > deadline or self.procs["munged"].poll() is not None:
                raise RuntimeError(f"munged did not start:\n{self.logs()}")
            time.sleep(0.05)

    def _write_conf(self) -> None:
        for d in ("state", "spool", "log"):
            (self.root / d).mkdir()
        r = self.root
        self.conf.write_text(f"""\
# written by tests/support/slurm_cluster.py: a single-node cluster on localhost, no cgroups
ClusterName=costguard-test
SlurmctldHost={self.node}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket},cred_expire=5
SlurmUser=root
SlurmdUser=root
StateSaveLocation={r / 'state'}
SlurmdSpoolDir={r / 'spool'}
SlurmctldPidFile={r / 'slurmctld.pid'}
SlurmdPidFile={r / 'slurmd.pid'}
SlurmctldLogFile={r / 'log' / 'slurmctld.log'}
SlurmdLogFile={r / 'log' / 'slurmd.log'}
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=512
MpiDefault=none
ReturnToService=2
JobRequeue=1
MinJobAge=600
KillWait=5
InactiveLimit=0
SchedulerParameters=sched_interval=1
{self.overrides}
NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory={self.memory_mb} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")

    def _daemon(self, name: str, args: list[str]) -> None:
        out = open(self.root / f"{name}.out", "ab")
        self.procs[name] = subprocess.Popen(
            args, env=self.env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)
        out.close()

    def _wait_idle(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited ({proc.returncode}):\n{self.logs()}")
            try:
                state = self.command("sinfo", "--noheader", "--format=%t").strip()
            except subprocess.CalledProcessError:
                state = ""
            if state == "idle":
                return
            time.sleep(0.2)
        raise RuntimeError(f"the node did not become idle in {timeout:g} s (sinfo says "
                           f"{state!r}):\n{self.logs()}")

    def stop(self) -> None:
        """Cancel what is left, stop the daemons, remove the directory."""
        if "slurmd" in self.procs and self.procs["slurmd"].poll() is None:
            try:
                self.command("scancel", "--full", "--signal=KILL", f"--user={os.getuid()}")
                self.command("scancel", f"--user={os.getuid()}")
                deadline = time.monotonic() + 15
                while self.jobs(active=True) and time.monotonic() < deadline:
                    time.sleep(0.2)
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
                pass
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self.procs.pop(name, None)
            if proc is None:
                continue
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
        shutil.rmtree(self.root, ignore_errors=True)

    # --- using it ------------------------------------------------------------------------

    def command(self, *args: str, timeout: float = 30.0) -> str:
        """A client command against this cluster; raises CalledProcessError on failure."""
        proc = subprocess.run([_exe(args[0]), *args[1:]], env=self.env, capture_output=True,
                              text=True, timeout=timeout, check=False)
        if proc.returncode != 0:
            raise subprocess.CalledProcessError(proc.returncode, args, proc.stdout, proc.stderr)
        return proc.stdout

    def jobs(self, active: bool = False) -> dict[str, str]:
        """Job id -> state of every job the controller knows (`active`: not ended)."""
        out = self.command("squeue", "--noheader", "--format=%i|%T",
                           *(() if active else ("--states=all",)))
        return dict(line.split("|", 1) for line in out.split())

    def state(self, job_id: str) -> str:
        return self.jobs().get(job_id, "")

    def logs(self) -> str:
        parts = []
        for path in sorted([*self.root.glob("*.out"), *self.root.glob("log/*.log")]):
            try:
                parts.append(f"--- {path.name}\n{path.read_text(errors='replace')[-3000:]}")
            except OSError:
                pass
        return "\n".join(parts)


def _exe(name: str) -> str:
    path = _which(name)
    if path is None:
        raise FileNotFoundError(name)
    return path


def running_cluster(cpus: int | None = None) -> Iterator[SlurmCluster]:
    """A started cluster for a test module's fixture (`yield from running_cluster()`): skipped
    where Slurm cannot run here, a failure in CI (which installs it), stopped afterwards."""
    import pytest

    reason = unavailable()
    if reason:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"Slurm tests cannot run in CI: {reason}")
        pytest.skip(reason)
    c = SlurmCluster(cpus).start()
    try:
        yield c
    finally:
        c.stop()
