"""The local backend: the runner as a detached process on the server's machine.

Each runner has a session of its own, so it survives a restart of the server and is stopped as
a process group. A pool of warm runners (a started kernel each, waiting for a job) lets a job
start without waiting for its kernel.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

from traitlets import Int
from traitlets.config import Configurable

from jupyter_costguard.offload import jobdir
from jupyter_costguard.offload.backends.base import Backend
from jupyter_costguard.offload.estimate import Estimate, EstimateContext, local_estimate
from jupyter_costguard.offload.spec import Job, Resources

#: seconds between SIGTERM (the runner shuts its kernel down) and SIGKILL on cancel
CANCEL_GRACE_SECONDS = 5.0


class LocalBackend(Configurable):
    """The local backend's options (`c.LocalBackend.<name>`)."""

    #: the old names (`c.CostGuard.<old>`), which still work for a release
    moved_from_costguard: ClassVar[dict[str, str]] = {
        "offload_warm_kernels": "warm_kernels", "offload_max_local_jobs": "max_jobs"}

    warm_kernels = Int(
        1, config=True,
        help="Kernels (of the default kernelspec) kept started for the local backend, so a "
        "job starts without waiting for one. 0: start a kernel per job.")
    max_jobs = Int(
        None, allow_none=True, config=True,
        help="Local jobs that may run at once; more wait, queued, first come first served. "
        "None: one per GPU the server sees (at least one).")


class LocalExecutor(Backend):
    """Runs the runner as a detached process on this machine.

    With `warm_kernels` > 0 it keeps that many runners with a started `warm_kernel_name`
    kernel waiting (in `warm_dir`), and hands a job to one of them: the job starts without
    waiting for a kernel. A job that selects GPUs (CUDA_VISIBLE_DEVICES must be set before
    the kernel starts) or asks for another kernel starts cold.
    """

    name = "local"
    local = True

    def __init__(self, environ: Mapping[str, str] | None = None, warm_dir: Path | None = None,
                 warm_kernels: int = 0, warm_kernel_name: str = "python3") -> None:
        self.environ = dict(os.environ if environ is None else environ)
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        self.warm_dir = warm_dir
        self.warm_kernels = warm_kernels if warm_dir is not None else 0
        self.warm_kernel_name = warm_kernel_name
        self._warm: list[tuple[int, Path]] = []

    def estimate(self, resources: Resources, context: EstimateContext) -> Estimate:
        """This machine's price: a local job's spend is the ledger's, at that rate."""
        return local_estimate(self.name, resources, context)

    def _spawn(self, args: list[str], cwd: Path, out: Path) -> int:
        with os.fdopen(jobdir.open_private(out), "ab") as f:
            proc = subprocess.Popen(
                args, cwd=cwd, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                start_new_session=True, close_fds=True, env=self.environ)
        self._children[proc.pid] = proc
        _reap_when_done(proc)
        return proc.pid

    def launch(self, job: Job, job_dir: Path, environment: Mapping[str, str] = {}) -> str | None:
        # the kernel's CUDA_VISIBLE_DEVICES must be set before it starts; the rest of the
        # job's environment the runner sets in the kernel before the cells run
        if job.spec.kernel_name == self.warm_kernel_name \
                and "CUDA_VISIBLE_DEVICES" not in environment:
            pid = self._take_warm(job_dir)
            if pid is not None:
                return str(pid)
        return str(self._spawn(jobdir.runner_command(job_dir), job_dir,
                               job_dir / jobdir.RUNNER_OUT))

    # --- warm runners -----------------------------------------------------------------

    def start(self) -> None:
        self.fill_warm()

    def close(self) -> None:
        for pid, d in self._warm:
            if self._alive(pid, str(d)):
                _killpg(pid, signal.SIGTERM)
        self._warm = []

    def fill_warm(self) -> None:
        """Start warm runners until there are `warm_kernels` (worker thread)."""
        if self.warm_dir is None:
            return
        self._warm = [(pid, d) for pid, d in self._warm if self._alive(pid, str(d))]
        while len(self._warm) < self.warm_kernels:
            jobdir.private_dir(self.warm_dir)
            d = jobdir.private_dir(self.warm_dir / f"warm-{uuid.uuid4().hex[:12]}")
            pid = self._spawn(jobdir.warm_command(d, self.warm_kernel_name, os.getpid()),
                              d, d / jobdir.RUNNER_OUT)
            self._warm.append((pid, d))

    def _take_warm(self, job_dir: Path) -> int | None:
        for i, (pid, d) in enumerate(self._warm):
            status = jobdir.read_object(d / jobdir.STATUS)
            if status.get("state") != jobdir.WARM_READY or not self._alive(pid, str(d)):
                continue
            del self._warm[i]
            jobdir.write_json(d / jobdir.WARM_ASSIGNMENT, {"job_dir": str(job_dir)})
            self.fill_warm()
            return pid
        self.fill_warm()
        return None

    # --- following and stopping ------------------------------------------------------------

    def _alive(self, pid: int, marker: str) -> bool:
        child = self._children.get(pid)
        if child is not None:  # ours: reap it, or it lingers as a zombie
            if child.poll() is None:
                return True
            del self._children[pid]
            return False
        return pid_runs(pid, marker)

    def reconcile(self, job: Job, job_dir: Path) -> bool:
        """Whether the runner process still runs; nothing to settle (it writes its own end)."""
        pid = _pid(job.backend_ref)
        return pid is not None and self._alive(pid, jobdir.RUNNER_MODULE)

    def cancel(self, job: Job, job_dir: Path, force: bool = False) -> None:
        sig = signal.SIGKILL if force else signal.SIGTERM
        pid = _pid(job.backend_ref)
        if pid is not None and self._alive(pid, jobdir.RUNNER_MODULE):
            _killpg(pid, sig)
        if force and job.kernel_pid is not None and pid_runs(job.kernel_pid, "kernel"):
            _killpg(job.kernel_pid, sig)  # the kernel has a session of its own


def _reap_when_done(proc: subprocess.Popen[bytes]) -> None:
    """Reap `proc` the moment it exits, so that no finished runner lingers as a zombie of the
    server (the follower stops asking about a job once it has ended). A daemon thread per
    runner blocks in waitpid on that one pid: no SIGCHLD handler, no wait on the worker
    thread or the IO loop. `Popen.poll` from `_alive` still answers (None until it exits)."""
    threading.Thread(target=proc.wait, name=f"costguard-reap-{proc.pid}", daemon=True).start()


def _pid(ref: str | None) -> int | None:
    return int(ref) if ref is not None and ref.isdigit() else None


def pid_runs(pid: int, marker: str) -> bool:
    """Whether `pid` is a live process whose command line names `marker` (so a reused pid
    of an unrelated process does not count)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    if stat.rsplit(")", 1)[-1].split()[0] == "Z":
        return False
    return marker.encode() in cmdline


def _killpg(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
