"""The interface every place a job can run implements (local here; Slurm and Kubernetes next).

A backend starts the job runner for a prepared job directory, says whether it is still alive,
and stops it. Everything else (state, log, outputs, results) the runner writes into the job
directory, which the server reads whatever the backend.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from .spec import Job

#: seconds between SIGTERM (the runner shuts its kernel down) and SIGKILL on cancel
CANCEL_GRACE_SECONDS = 5.0


class Backend(Protocol):
    name: str

    def launch(self, job: Job, job_dir: Path) -> int | None:
        """Start the runner; returns its pid where there is one."""
        ...

    def alive(self, job: Job, job_dir: Path) -> bool:
        """Whether the job's runner may still write to its directory."""
        ...

    def cancel(self, job: Job, job_dir: Path, force: bool = False) -> None:
        """Ask the runner to stop (SIGTERM-like); `force` kills what is left."""
        ...


def runner_command(job_dir: Path) -> list[str]:
    return [sys.executable, "-m", "jupyter_costguard.offload.runner", str(job_dir)]


class LocalBackend:
    """Runs the runner as a detached process on this machine (its own session), so it
    survives a restart of the server and is stopped as a process group."""

    name = "local"

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self.environ = dict(os.environ if environ is None else environ)
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    def launch(self, job: Job, job_dir: Path) -> int | None:
        with open(job_dir / "runner.out", "ab") as out:
            proc = subprocess.Popen(
                runner_command(job_dir), cwd=job_dir, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True, close_fds=True,
                env=self.environ)
        self._children[proc.pid] = proc
        return proc.pid

    def alive(self, job: Job, job_dir: Path) -> bool:
        pid = job.runner_pid
        if pid is None:
            return False
        child = self._children.get(pid)
        if child is not None:  # ours: reap it, or it lingers as a zombie
            if child.poll() is None:
                return True
            del self._children[pid]
            return False
        return pid_runs(pid, str(job_dir))

    def cancel(self, job: Job, job_dir: Path, force: bool = False) -> None:
        sig = signal.SIGKILL if force else signal.SIGTERM
        if job.runner_pid is not None and pid_runs(job.runner_pid, str(job_dir)):
            _killpg(job.runner_pid, sig)
        if force and job.kernel_pid is not None and pid_runs(job.kernel_pid, "kernel"):
            _killpg(job.kernel_pid, sig)  # the kernel has a session of its own


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
