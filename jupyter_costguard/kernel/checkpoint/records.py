"""What the checkpoint calls return and raise."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class CheckpointError(RuntimeError):
    """A checkpoint can't be saved: no location, a bad setting, or a missing optional dependency."""


class CheckpointWarning(UserWarning):
    """A checkpoint was skipped because it is incomplete or corrupt."""


@dataclass(frozen=True)
class Checkpoint:
    """A loaded or saved checkpoint: resume at `step + 1` from `state`.

    `status` says how far a save got: "complete" (written), "uploading" (staged locally, its
    upload queued; `path` is where it will be) or "in-memory" (`every=N` skipped this call;
    only a final save on SIGUSR1 would write it; `path` is empty).
    """

    step: int
    state: Any
    path: str
    saved_at: float
    status: str = "complete"
