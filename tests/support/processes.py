"""Processes a test started and must see end: job runners outlive their server by design."""

from __future__ import annotations

import os
import signal
from pathlib import Path


def alive(pid: int) -> bool:
    """Running (a zombie, dead but not yet reaped, is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def kill_runners_under(path: Path) -> None:
    """SIGKILL the process group of every job runner whose command line names `path`."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if b"jupyter_costguard.offload.runner" in cmdline and str(path).encode() in cmdline:
            try:
                os.killpg(int(proc.name), signal.SIGKILL)
            except OSError:
                pass
