"""Checkpoints for offloaded batch jobs, so a killed or preempted job resumes instead of restarting.

A job calls `save(state, step)` as it goes and `latest()` when it starts. The contract:

* Atomic: the pickled state is written first, then a small completion marker
  (`step-NNN.done`, JSON with size and sha256). Only a step whose marker matches its data counts,
  so a crash mid-write never leaves a checkpoint that `latest()` would pick. Local files are also
  written via a temporary file, fsync and `os.replace`.
* Keep-K: after a new checkpoint is complete, all but the `keep` highest steps are deleted
  (default `$COSTGUARD_CHECKPOINT_KEEP`, else 3); the one just saved is never deleted.
* Resume: `latest()` returns the complete checkpoint with the highest step; a corrupt or
  incomplete newer one is skipped with a warning.

The location comes from `$COSTGUARD_CHECKPOINT_DIR` (set by the backend) or `location=`: a local
path, a `file://` URL, or any fsspec URL (`s3://bucket/prefix`, `memory://x`). Local paths need
only the standard library; fsspec is imported only for other URLs. This module imports nothing
from the rest of the package, so a job can import it cheaply.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import re
import secrets
import time
import warnings
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit
from urllib.request import url2pathname

__all__ = [
    "ENV_DIR",
    "ENV_KEEP",
    "Checkpoint",
    "CheckpointError",
    "CheckpointWarning",
    "latest",
    "list_checkpoints",
    "location",
    "save",
]

ENV_DIR = "COSTGUARD_CHECKPOINT_DIR"
ENV_KEEP = "COSTGUARD_CHECKPOINT_KEEP"
DEFAULT_KEEP = 3
PICKLE_PROTOCOL = 5
MARKER_FORMAT = "costguard-checkpoint/1"

# step-000000000042.pkl / .done, optionally with a .tmp-<hex> suffix while being written
_NAME = re.compile(r"^step-(\d+)\.(pkl|done)(\.tmp-[0-9a-f]+)?$")


class CheckpointError(RuntimeError):
    """A checkpoint can't be saved: no location, a bad setting, or a missing optional dependency."""


class CheckpointWarning(UserWarning):
    """A checkpoint was skipped because it is incomplete or corrupt."""


@dataclass(frozen=True)
class Checkpoint:
    """A loaded checkpoint: resume at `step + 1` from `state`."""

    step: int
    state: Any
    path: str
    saved_at: float


def _data_name(step: int) -> str:
    return f"step-{step:012d}.pkl"


def _marker_name(step: int) -> str:
    return f"step-{step:012d}.done"


# --- storage: a flat directory of files, local (stdlib) or fsspec ---------------------------


class _Store:
    """The few file operations checkpoints need; subclasses for local disk and fsspec."""

    def names(self) -> list[str]:
        """Base names in the directory; empty when it doesn't exist yet."""
        raise NotImplementedError

    def read(self, name: str) -> bytes:
        raise NotImplementedError

    def size(self, name: str) -> int:
        raise NotImplementedError

    def write(self, name: str, data: bytes) -> None:
        """Write `name` as a whole; atomic where the filesystem allows it."""
        raise NotImplementedError

    def remove(self, name: str) -> None:
        """Delete `name`; a missing file is not an error (pruning may race a reader)."""
        raise NotImplementedError

    def url(self, name: str) -> str:
        raise NotImplementedError


class _LocalStore(_Store):
    """Local disk: tmp file + fsync + os.replace + directory fsync, so renames survive a crash."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(os.path.expanduser(root))

    def names(self) -> list[str]:
        try:
            return os.listdir(self.root)
        except FileNotFoundError:
            return []

    def read(self, name: str) -> bytes:
        with open(os.path.join(self.root, name), "rb") as f:
            return f.read()

    def size(self, name: str) -> int:
        return os.stat(os.path.join(self.root, name)).st_size

    def write(self, name: str, data: bytes) -> None:
        os.makedirs(self.root, exist_ok=True)
        final = os.path.join(self.root, name)
        tmp = f"{final}.tmp-{secrets.token_hex(6)}"
        try:
            with open(tmp, "xb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, final)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        self._fsync_dir()

    def _fsync_dir(self) -> None:
        # Makes the rename itself durable; not possible on every platform (Windows), hence best
        # effort.
        try:
            fd = os.open(self.root, os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)

    def remove(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(self.root, name))

    def url(self, name: str) -> str:
        return os.path.join(self.root, name)


class _FsspecStore(_Store):
    """Any fsspec filesystem. Writes aren't atomic there; the completion marker makes them safe."""

    def __init__(self, url: str) -> None:
        try:
            import fsspec.core
        except ImportError as e:
            raise CheckpointError(
                f"checkpoint location {url!r} needs fsspec: pip install fsspec "
                "(and s3fs for s3://, gcsfs for gs://)"
            ) from e
        try:
            fs, root = fsspec.core.url_to_fs(url)
        except ImportError as e:  # fsspec is there, the filesystem's package isn't
            raise CheckpointError(
                f"checkpoint location {url!r}: {e} (pip install fsspec, and s3fs for s3://)"
            ) from e
        self.fs: Any = fs
        self.root: str = str(root).rstrip("/")
        self._made = False

    def _path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def names(self) -> list[str]:
        # Another process (the job) writes here; don't answer from a cached listing.
        self.fs.invalidate_cache(self.root)
        try:
            entries = self.fs.ls(self.root, detail=False)
        except FileNotFoundError:
            return []
        return [str(p).rstrip("/").rsplit("/", 1)[-1] for p in entries]

    def read(self, name: str) -> bytes:
        return bytes(self.fs.cat_file(self._path(name)))

    def size(self, name: str) -> int:
        return int(self.fs.size(self._path(name)))

    def write(self, name: str, data: bytes) -> None:
        if not self._made:
            # Object stores have no directories and may refuse to "create" a bucket; a real
            # problem shows up in the write below.
            with contextlib.suppress(Exception):
                self.fs.makedirs(self.root, exist_ok=True)
            self._made = True
        self.fs.pipe_file(self._path(name), data)

    def remove(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self._path(name))

    def url(self, name: str) -> str:
        return str(self.fs.unstrip_protocol(self._path(name)))


def _store(loc: str) -> _Store:
    """Local paths and file:// URLs use the stdlib; anything else goes through fsspec."""
    if "::" not in loc:
        if "://" not in loc:
            return _LocalStore(loc)
        if loc[:7].lower() == "file://":
            parts = urlsplit(loc)
            host = "" if parts.netloc in ("", "localhost") else parts.netloc
            return _LocalStore(url2pathname(host + parts.path))
    return _FsspecStore(loc)


# --- settings -------------------------------------------------------------------------------


def location() -> str | None:
    """The configured checkpoint location (`$COSTGUARD_CHECKPOINT_DIR`), or None."""
    value = os.environ.get(ENV_DIR, "").strip()
    return value or None


def _resolve(loc: str | None) -> str | None:
    if loc is not None and loc.strip():
        return loc.strip()
    return location()


def _keep(keep: int | None) -> int:
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


# --- reading ---------------------------------------------------------------------------------


def _scan(store: _Store) -> dict[int, set[str]]:
    """Every step mentioned in the directory (data, marker or temp file) and its file names."""
    steps: dict[int, set[str]] = {}
    for name in store.names():
        m = _NAME.match(name)
        if m:
            steps.setdefault(int(m.group(1)), set()).add(name)
    return steps


def _marker(store: _Store, step: int) -> dict[str, Any]:
    """The parsed completion marker; raises ValueError/OSError when it's missing or malformed."""
    try:
        raw = store.read(_marker_name(step))
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


def _complete_cheap(store: _Store, step: int) -> bool:
    """Marker present and sizes agree; the hash is checked when the checkpoint is loaded."""
    try:
        return bool(_marker(store, step)["size"] == store.size(_data_name(step)))
    except (OSError, ValueError):
        return False


def _load(store: _Store, step: int) -> Checkpoint:
    """Load and verify one checkpoint; raises ValueError/OSError/unpickling errors if it's bad."""
    doc = _marker(store, step)
    try:
        data = store.read(_data_name(step))
    except FileNotFoundError:
        raise ValueError("data file missing") from None
    if len(data) != doc["size"]:
        raise ValueError(f"data is {len(data)} bytes, marker says {doc['size']}")
    if hashlib.sha256(data).hexdigest() != doc["sha256"]:
        raise ValueError("sha256 of data doesn't match the marker")
    state = pickle.loads(data)
    return Checkpoint(step=step, state=state, path=store.url(_data_name(step)),
                      saved_at=float(doc["saved_at"]))


def latest(*, location: str | None = None) -> Checkpoint | None:
    """The complete checkpoint with the highest step, or None (fresh start / nothing configured).

    Newer checkpoints that are incomplete or corrupt are skipped with a CheckpointWarning, so a
    job killed mid-save resumes from the last good one.
    """
    loc = _resolve(location)
    if loc is None:
        return None
    store = _store(loc)
    for step, names in sorted(_scan(store).items(), reverse=True):
        if all(".tmp-" in name for name in names):
            continue  # only a crashed write's temp file: nothing was ever complete here
        try:
            return _load(store, step)
        except Exception as e:  # unpickling can raise almost anything
            warnings.warn(
                f"skipping checkpoint step {step} at {loc}: {type(e).__name__}: {e}",
                CheckpointWarning,
                stacklevel=2,
            )
    return None


def list_checkpoints(location: str | None = None, *, verify: bool = False) -> list[int]:
    """Complete steps, ascending. Checks marker and size; `verify=True` also checks the sha256."""
    loc = _resolve(location)
    if loc is None:
        return []
    store = _store(loc)
    done = []
    for step in sorted(_scan(store)):
        if verify:
            with contextlib.suppress(OSError, ValueError):
                doc = _marker(store, step)
                data = store.read(_data_name(step))
                if len(data) == doc["size"] and hashlib.sha256(data).hexdigest() == doc["sha256"]:
                    done.append(step)
        elif _complete_cheap(store, step):
            done.append(step)
    return done


# --- writing ---------------------------------------------------------------------------------


def save(state: Any, step: int, *, location: str | None = None,
         keep: int | None = None) -> Checkpoint:
    """Save `state` as checkpoint `step`: data first, then the completion marker, then prune.

    Saving a step at or below an existing one is allowed (it overwrites or adds an entry);
    `latest()` always picks the highest complete step.
    """
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be a non-negative int, not {step!r}")
    keep = _keep(keep)
    loc = _resolve(location)
    if loc is None:
        raise CheckpointError(
            f"no checkpoint location: set the {ENV_DIR} environment variable (a directory or an "
            "fsspec URL such as s3://bucket/prefix) or pass location=..."
        )
    store = _store(loc)
    data = pickle.dumps(state, protocol=PICKLE_PROTOCOL)
    saved_at = time.time()
    marker = json.dumps({
        "format": MARKER_FORMAT,
        "step": step,
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "saved_at": saved_at,
        "pickle_protocol": PICKLE_PROTOCOL,
    }).encode()
    # Overwriting a step: drop its old marker first, so a crash before the new marker is written
    # leaves "incomplete" (skipped) rather than an old marker describing new data.
    store.remove(_marker_name(step))
    store.write(_data_name(step), data)
    store.write(_marker_name(step), marker)
    _prune(store, keep, step)
    return Checkpoint(step=step, state=state, path=store.url(_data_name(step)), saved_at=saved_at)


def _prune(store: _Store, keep: int, saved: int) -> None:
    """Delete complete checkpoints beyond the `keep` highest (never `saved`), leftovers (temp
    files, data without a marker) older than everything kept, and stale temp files up to `saved`.

    One writer per location is assumed: a temp file at or below the step just saved can only be
    from a write that crashed.
    """
    steps = _scan(store)
    complete = [s for s in sorted(steps, reverse=True) if _complete_cheap(store, s)]
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
