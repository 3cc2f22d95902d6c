"""Process facts the job runner and the checkpoint helper both need (stdlib only: the
checkpoint module is imported inside jobs and must stay light)."""

from __future__ import annotations

import os


def pid_exists(pid: int) -> bool:
    """Whether a process with this pid exists (one we may not signal counts as existing)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True
