"""The checkpoint API a job calls: `save` as it goes, `latest` when it starts, and
`list_checkpoints` to see what is there."""

from __future__ import annotations

import time
import warnings
from typing import Any

from jupyter_costguard.kernel.checkpoint import signals
from jupyter_costguard.kernel.checkpoint.records import (
    Checkpoint,
    CheckpointError,
    CheckpointWarning,
)
from jupyter_costguard.kernel.checkpoint.settings import ENV_DIR, keep_count, resolve
from jupyter_costguard.kernel.checkpoint.steps import load, looks_complete, scan, verified
from jupyter_costguard.kernel.checkpoint.stores import open_store
from jupyter_costguard.kernel.checkpoint.upload import persist, uploads


def save(state: Any, step: int, *, location: str | None = None, keep: int | None = None,
         every: int = 1, background: bool | None = None) -> Checkpoint:
    """Save `state` as checkpoint `step`: data first, then the completion marker, then prune.

    Saving a step at or below an existing one is allowed (it overwrites or adds an entry);
    `latest()` always picks the highest complete step.

    `every=N` writes only every N-th call (per location) and remembers the others in memory for
    a final save on SIGUSR1. `background` (default: True for object storage, False for local
    paths and memory://) stages the checkpoint locally and uploads it on a thread; the
    returned Checkpoint then has `status="uploading"`, and `wait()` flushes.
    """
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be a non-negative int, not {step!r}")
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise ValueError(f"every must be a positive integer, not {every!r}")
    keep = keep_count(keep)
    loc = resolve(location)
    if loc is None:
        raise CheckpointError(
            f"no checkpoint location: set the {ENV_DIR} environment variable (a directory or an "
            "fsspec URL such as s3://bucket/prefix) or pass location=..."
        )
    signals.auto_enable()
    if signals.defer(loc, every, state, step, keep, background):
        return Checkpoint(step=step, state=state, path="", saved_at=time.time(),
                          status="in-memory")
    saved = persist(state, step, loc, keep, background)
    signals.mark_written(loc, step, keep, background)
    return saved


def latest(*, location: str | None = None) -> Checkpoint | None:
    """The complete checkpoint with the highest step, or None (fresh start / nothing configured).

    Newer checkpoints that are incomplete or corrupt are skipped with a CheckpointWarning, so a
    job killed mid-save resumes from the last good one. A checkpoint this process staged for
    upload counts too (with `status="uploading"`): it is as good as uploaded here, and a new
    process never sees it.
    """
    loc = resolve(location)
    if loc is None:
        return None
    staged = {task.step: task for task in uploads(loc)}  # later tasks win for a step
    store = open_store(loc)
    steps = scan(store)
    for step in sorted(set(steps) | set(staged), reverse=True):
        task = staged.get(step)
        if task is not None:
            try:
                return task.load()
            except FileNotFoundError:
                steps = scan(store)  # uploaded (or superseded) since we looked
            except Exception as e:
                warnings.warn(f"skipping staged checkpoint step {step}: {type(e).__name__}: {e}",
                              CheckpointWarning, stacklevel=2)
        names = steps.get(step)
        if not names or all(".tmp-" in name for name in names):
            continue  # only a crashed write's temp file: nothing was ever complete here
        try:
            return load(store, step)
        except Exception as e:  # unpickling can raise almost anything
            warnings.warn(
                f"skipping checkpoint step {step} at {loc}: {type(e).__name__}: {e}",
                CheckpointWarning,
                stacklevel=2,
            )
    return None


def list_checkpoints(location: str | None = None, *, verify: bool = False) -> list[int]:
    """Complete steps, ascending. Checks marker and size; `verify=True` also checks the sha256."""
    loc = resolve(location)
    if loc is None:
        return []
    store = open_store(loc)
    check = verified if verify else looks_complete
    return [step for step in sorted(scan(store)) if check(store, step)]
