"""Where checkpoints go and how many are kept: arguments first, then the job's environment.

The environment variables are the job directory protocol's (`offload.jobdir`, standard library
only); the names here are the public aliases (`checkpoint.ENV_DIR`, ...).
"""

from __future__ import annotations

import os

from jupyter_costguard.kernel.checkpoint.records import CheckpointError
from jupyter_costguard.offload import jobdir

ENV_DIR = jobdir.ENV_CHECKPOINT_DIR
ENV_KEEP = jobdir.ENV_CHECKPOINT_KEEP
ENV_STAGING = jobdir.ENV_CHECKPOINT_STAGING
ENV_JOB_DIR = jobdir.ENV_JOB_DIR
#: created in the job's directory once a SIGUSR1 handler is in place; holds the kernel's pid
SIGNAL_OK = jobdir.SIGNAL_OK
DEFAULT_KEEP = 3


def location() -> str | None:
    """The configured checkpoint location (`$COSTGUARD_CHECKPOINT_DIR`), or None."""
    value = os.environ.get(ENV_DIR, "").strip()
    return value or None


def resolve(loc: str | None) -> str | None:
    """`loc` when given, else the configured location."""
    if loc is not None and loc.strip():
        return loc.strip()
    return location()


def keep_count(keep: int | None) -> int:
    """How many checkpoints to keep: `keep`, else `$COSTGUARD_CHECKPOINT_KEEP`, else 3."""
    if keep is None:
        raw = os.environ.get(ENV_KEEP, "").strip()
        if not raw:
            return DEFAULT_KEEP
        try:
            keep = int(raw)
        except ValueError:
            raise CheckpointError(f"${ENV_KEEP} must be a positive integer, not {raw!r}") from None
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise ValueError(f"keep must be a positive integer, not {keep!r}")
    return keep
