"""The step files on a store: `step-NNN.pkl` (the pickled state) and `step-NNN.done` (its
completion marker), how to tell a complete step from a crashed write, and keep-K pruning.

A step counts only when its marker matches its data, so the data is always written first and the
marker last, and pruning deletes the marker first.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import re
import time
from typing import Any

from jupyter_costguard.kernel.checkpoint.records import Checkpoint
from jupyter_costguard.kernel.checkpoint.stores import Store

PICKLE_PROTOCOL = 5
MARKER_FORMAT = "costguard-checkpoint/1"

# step-000000000042.pkl / .done, optionally with a .tmp-<hex> suffix while being written
_NAME = re.compile(r"^step-(\d+)\.(pkl|done)(\.tmp-[0-9a-f]+)?$")


def data_name(step: int) -> str:
    return f"step-{step:012d}.pkl"


def marker_name(step: int) -> str:
    return f"step-{step:012d}.done"


def marker_doc(step: int, size: int, sha256: str, saved_at: float) -> bytes:
    """The completion marker of `size` bytes of data with this sha256."""
    return json.dumps({
        "format": MARKER_FORMAT,
        "step": step,
        "size": size,
        "sha256": sha256,
        "saved_at": saved_at,
        "pickle_protocol": PICKLE_PROTOCOL,
    }).encode()


# --- reading ---------------------------------------------------------------------------------


def scan(store: Store) -> dict[int, set[str]]:
    """Every step mentioned in the directory (data, marker or temp file) and its file names."""
    steps: dict[int, set[str]] = {}
    for name in store.names():
        m = _NAME.match(name)
        if m:
            steps.setdefault(int(m.group(1)), set()).add(name)
    return steps


def read_marker(store: Store, step: int) -> dict[str, Any]:
    """The parsed completion marker; raises ValueError/OSError when it's missing or malformed."""
    try:
        raw = store.read(marker_name(step))
    except FileNotFoundError:
        raise ValueError("no completion marker (the save didn't finish)") from None
    doc = json.loads(raw)
    if not (
        isinstance(doc, dict)
        and isinstance(doc.get("size"), int)
        and isinstance(doc.get("sha256"), str)
        and isinstance(doc.get("saved_at"), (int, float))
    ):
        raise ValueError("malformed completion marker")
    return doc


def looks_complete(store: Store, step: int) -> bool:
    """Marker present and sizes agree; the hash is checked when the checkpoint is loaded."""
    try:
        return bool(read_marker(store, step)["size"] == store.size(data_name(step)))
    except (OSError, ValueError):
        return False


def _verified_data(store: Store, step: int) -> tuple[dict[str, Any], bytes]:
    """The marker and the data it describes; ValueError/OSError when they don't match."""
    doc = read_marker(store, step)
    try:
        data = store.read(data_name(step))
    except FileNotFoundError:
        raise ValueError("data file missing") from None
    if len(data) != doc["size"]:
        raise ValueError(f"data is {len(data)} bytes, marker says {doc['size']}")
    if hashlib.sha256(data).hexdigest() != doc["sha256"]:
        raise ValueError("sha256 of data doesn't match the marker")
    return doc, data


def verified(store: Store, step: int) -> bool:
    """Marker present and the data matches its size and sha256 (nothing is unpickled)."""
    try:
        _verified_data(store, step)
    except (OSError, ValueError):
        return False
    return True


def load(store: Store, step: int) -> Checkpoint:
    """Load and verify one checkpoint; raises ValueError/OSError/unpickling errors if it's bad."""
    doc, data = _verified_data(store, step)
    state = pickle.loads(data)
    return Checkpoint(step=step, state=state, path=store.url(data_name(step)),
                      saved_at=float(doc["saved_at"]))


# --- writing ---------------------------------------------------------------------------------


def write(store: Store, state: Any, step: int, keep: int) -> Checkpoint:
    """Write `state` as `step` now (data, then marker), then prune to `keep`."""
    data = pickle.dumps(state, protocol=PICKLE_PROTOCOL)
    saved_at = time.time()
    marker = marker_doc(step, len(data), hashlib.sha256(data).hexdigest(), saved_at)
    # Overwriting a step: drop its old marker first, so a crash before the new marker is written
    # leaves "incomplete" (skipped) rather than an old marker describing new data.
    store.remove(marker_name(step))
    store.write(data_name(step), data)
    store.write(marker_name(step), marker)
    prune(store, keep, step)
    return Checkpoint(step=step, state=state, path=store.url(data_name(step)), saved_at=saved_at)


def prune(store: Store, keep: int, saved: int) -> None:
    """Delete complete checkpoints beyond the `keep` highest (never `saved`), leftovers (temp
    files, data without a marker) older than everything kept, and stale temp files up to `saved`.

    One writer per location is assumed: a temp file at or below the step just saved can only be
    from a write that crashed.
    """
    steps = scan(store)
    complete = [s for s in sorted(steps, reverse=True) if looks_complete(store, s)]
    kept = set(complete[:keep]) | {saved}
    oldest_kept = min(complete[:keep], default=saved)
    for step, names in steps.items():
        if step in kept:
            if step <= saved:  # temp files of an earlier, crashed write of a step we now have
                for name in names:
                    if ".tmp-" in name:
                        store.remove(name)
            continue
        if step in complete or step < oldest_kept:
            # marker first: a crash mid-prune leaves an incomplete step, never a marker
            # pointing at deleted data
            for name in sorted(names, key=lambda n: not n.endswith(".done")):
                store.remove(name)
