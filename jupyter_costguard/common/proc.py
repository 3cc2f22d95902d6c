"""Process facts the job runner, the job follower and the checkpoint helper share (stdlib only:
the checkpoint module is imported inside jobs and must stay light)."""

from __future__ import annotations

import os
from pathlib import Path

#: parent links followed at most (a loop in /proc, or a very deep tree, ends the walk)
MAX_DEPTH = 64


def pid_exists(pid: int) -> bool:
    """Whether a process with this pid exists (one we may not signal counts as existing)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def parent_pid(pid: int) -> int | None:
    """`pid`'s parent by /proc (None once it is gone or unreadable). The command name in
    ``stat`` may hold spaces and parentheses, so the fields are read after its last ")"."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def descends_from(pid: int, ancestor: int) -> bool:
    """Whether `pid` is a descendant of `ancestor` (not `ancestor` itself): a job's cell can
    write any pid into its status, and only the runner's own tree is the job's."""
    current: int | None = pid
    for _ in range(MAX_DEPTH):
        current = parent_pid(current) if current is not None else None
        if current is None or current <= 0:
            return False
        if current == ancestor:
            return True
        if current == 1:
            return False
    return False
