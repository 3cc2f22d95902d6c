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
path, a `file://` URL, or any fsspec URL (`s3://bucket/prefix`, `gs://...`, `memory://x`). Local
paths need only the standard library; fsspec is imported only for other URLs. This module imports
nothing from the rest of the package, so a job can import it cheaply.

Object storage (any fsspec URL that isn't `file`/`local`/`memory`) is written in the background,
so the GPU doesn't wait on the network: `save` pickles into a local staging directory
(`$COSTGUARD_CHECKPOINT_STAGING`, else `$COSTGUARD_JOB_DIR/checkpoint-staging`, else a temporary
directory) and returns; one uploader thread sends the data, then the marker, then prunes the
bucket. A newer save supersedes one still waiting (only the newest matters). `wait()` flushes;
it runs at interpreter exit too, and the job runner calls it after the last cell (its kernel is
killed, not shut down). An upload killed midway leaves no marker, so it never counts. In the
saving process `latest()` also sees a staged checkpoint that is newer than anything uploaded; a
new process (the retry after a crash) only sees what reached the bucket. Credentials and
endpoints are fsspec's: `AWS_ACCESS_KEY_ID`, `AWS_ENDPOINT_URL` (S3-compatible servers) and so on.

Final save on a warning signal: `save(state, step, every=N)` writes only every N-th call but
remembers the newest state. Within a job (`$COSTGUARD_JOB_DIR` set) the first `save` installs a
SIGUSR1 handler (`enable_final_save`) that persists that newest state synchronously, waits for
its upload, and tells the runner it may forward the signal (`$COSTGUARD_JOB_DIR/signal-ok`,
holding this process's pid). Slurm sends SIGUSR1 ahead of a time limit with `--signal`. The
state is pickled when the signal comes: an object changed in place since that `save` is
pickled as it is then.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import logging
import os
import pickle
import re
import secrets
import shutil
import signal
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit
from urllib.request import url2pathname

from jupyter_costguard._proc import pid_exists

__all__ = [
    "ENV_DIR",
    "ENV_JOB_DIR",
    "ENV_KEEP",
    "ENV_STAGING",
    "Checkpoint",
    "CheckpointError",
    "CheckpointWarning",
    "enable_final_save",
    "latest",
    "list_checkpoints",
    "location",
    "pending",
    "save",
    "wait",
]

ENV_DIR = "COSTGUARD_CHECKPOINT_DIR"
ENV_KEEP = "COSTGUARD_CHECKPOINT_KEEP"
ENV_STAGING = "COSTGUARD_CHECKPOINT_STAGING"
ENV_JOB_DIR = "COSTGUARD_JOB_DIR"
#: created in the job's directory once a SIGUSR1 handler is in place; holds the kernel's pid
SIGNAL_OK = "signal-ok"
#: fsspec protocols without a network behind them: written synchronously, like local paths
_NEAR_PROTOCOLS = frozenset({"file", "local", "memory"})
UPLOAD_TRIES = 3
DEFAULT_KEEP = 3
PICKLE_PROTOCOL = 5
MARKER_FORMAT = "costguard-checkpoint/1"

# step-000000000042.pkl / .done, optionally with a .tmp-<hex> suffix while being written
_NAME = re.compile(r"^step-(\d+)\.(pkl|done)(\.tmp-[0-9a-f]+)?$")


class CheckpointError(RuntimeError):
    """A checkpoint can't be saved: no location, a bad setting, or a missing optional dependency."""


class CheckpointWarning(UserWarning):
    """A checkpoint was skipped because it is incomplete or corrupt."""


_log = logging.getLogger(__name__)


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

    def put(self, name: str, local_path: str) -> None:
        """Copy a local file in as `name` (background uploads stream from the staging file)."""
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
        self._write_with(name, lambda f: f.write(data))

    def put(self, name: str, local_path: str) -> None:
        def copy(f: Any) -> None:
            with open(local_path, "rb") as src:
                shutil.copyfileobj(src, f, 1 << 20)

        self._write_with(name, copy)

    def _write_with(self, name: str, fill: Any) -> None:
        os.makedirs(self.root, exist_ok=True)
        final = os.path.join(self.root, name)
        tmp = f"{final}.tmp-{secrets.token_hex(6)}"
        try:
            with open(tmp, "xb") as f:
                fill(f)
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

    @property
    def near(self) -> bool:
        """No network behind it (memory://, file://): no point in uploading in the background."""
        protocol = self.fs.protocol
        protocols = (protocol,) if isinstance(protocol, str) else tuple(protocol)
        return any(p in _NEAR_PROTOCOLS for p in protocols)

    def _makedirs(self) -> None:
        if not self._made:
            # Object stores have no directories and may refuse to "create" a bucket; a real
            # problem shows up in the write that follows.
            with contextlib.suppress(Exception):
                self.fs.makedirs(self.root, exist_ok=True)
            self._made = True

    def write(self, name: str, data: bytes) -> None:
        self._makedirs()
        self.fs.pipe_file(self._path(name), data)

    def put(self, name: str, local_path: str) -> None:
        """Upload a local file, streamed from disk (multipart where the filesystem does it)."""
        self._makedirs()
        self.fs.put_file(local_path, self._path(name))

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
    job killed mid-save resumes from the last good one. A checkpoint this process staged for
    upload counts too (with `status="uploading"`): it is as good as uploaded here, and a new
    process never sees it.
    """
    loc = _resolve(location)
    if loc is None:
        return None
    staged = {task.step: task for task in _uploads(loc)}  # later tasks win for a step
    store = _store(loc)
    steps = _scan(store)
    for step in sorted(set(steps) | set(staged), reverse=True):
        task = staged.get(step)
        if task is not None:
            try:
                return task.load()
            except FileNotFoundError:
                steps = _scan(store)  # uploaded (or superseded) since we looked
            except Exception as e:
                warnings.warn(f"skipping staged checkpoint step {step}: {type(e).__name__}: {e}",
                              CheckpointWarning, stacklevel=2)
        names = steps.get(step)
        if not names or all(".tmp-" in name for name in names):
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


@dataclass
class _Newest:
    """The state of the newest `save` call per location, for a final save on SIGUSR1."""

    state: Any
    step: int
    keep: int
    background: bool | None
    persisted: bool


_lock = threading.RLock()  # re-entrant: the SIGUSR1 handler may run inside a `save`
_newest: dict[str, _Newest] = {}
_calls: dict[str, int] = {}


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
    keep = _keep(keep)
    loc = _resolve(location)
    if loc is None:
        raise CheckpointError(
            f"no checkpoint location: set the {ENV_DIR} environment variable (a directory or an "
            "fsspec URL such as s3://bucket/prefix) or pass location=..."
        )
    _auto_enable_final_save()
    with _lock:
        _calls[loc] = calls = _calls.get(loc, 0) + 1
        if calls % every:
            _newest[loc] = _Newest(state, step, keep, background, persisted=False)
            return Checkpoint(step=step, state=state, path="", saved_at=time.time(),
                              status="in-memory")
    saved = _persist(state, step, loc, keep, background)
    with _lock:  # written: nothing for a final save to do, and no reason to hold on to it
        _newest[loc] = _Newest(None, step, keep, background, persisted=True)
    return saved


def _marker_doc(step: int, size: int, sha256: str, saved_at: float) -> bytes:
    return json.dumps({
        "format": MARKER_FORMAT,
        "step": step,
        "size": size,
        "sha256": sha256,
        "saved_at": saved_at,
        "pickle_protocol": PICKLE_PROTOCOL,
    }).encode()


def _persist(state: Any, step: int, loc: str, keep: int, background: bool | None
             ) -> Checkpoint:
    store = _store(loc)
    if background is None:
        background = isinstance(store, _FsspecStore) and not store.near
    if background:
        return _stage(state, step, loc, keep, store)
    data = pickle.dumps(state, protocol=PICKLE_PROTOCOL)
    saved_at = time.time()
    marker = _marker_doc(step, len(data), hashlib.sha256(data).hexdigest(), saved_at)
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


# --- background uploads ----------------------------------------------------------------------


class _HashingWriter:
    """Pickles straight into the staging file while hashing, so a large state isn't held twice."""

    def __init__(self, f: Any) -> None:
        self.f = f
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, data: Any) -> int:
        view = memoryview(data)
        self.sha.update(view)
        self.size += view.nbytes
        return int(self.f.write(view))


@dataclass
class _Upload:
    """One staged checkpoint waiting for (or in) its upload."""

    location: str
    step: int
    keep: int
    path: str  # the staged data file
    size: int
    sha256: str
    saved_at: float
    marker: bytes = field(repr=False, default=b"")

    def load(self) -> Checkpoint:
        with open(self.path, "rb") as f:
            data = f.read()
        if len(data) != self.size or hashlib.sha256(data).hexdigest() != self.sha256:
            raise ValueError("staged data doesn't match what was saved")
        return Checkpoint(step=self.step, state=pickle.loads(data), path=self.path,
                          saved_at=self.saved_at, status="uploading")

    def discard(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.path)


_staging_lock = threading.Lock()
_staging_dir: str | None = None


def _staging() -> str:
    """This process's staging directory, in $COSTGUARD_CHECKPOINT_STAGING, else the job's
    directory, else the temporary directory (one per user there). One per process, so a retry
    never trusts a dead attempt's files, and the next process removes what a killed one left."""
    global _staging_dir
    with _staging_lock:
        if _staging_dir is not None and os.path.isdir(_staging_dir):
            return _staging_dir
        base = os.environ.get(ENV_STAGING, "").strip()
        job_dir = os.environ.get(ENV_JOB_DIR, "").strip()
        if not base and job_dir:
            base = os.path.join(job_dir, "checkpoint-staging")
        if not base:
            uid = os.getuid() if hasattr(os, "getuid") else 0
            base = os.path.join(tempfile.gettempdir(), f"costguard-checkpoint-{uid}")
            try:
                os.makedirs(base, mode=0o700, exist_ok=True)
                if hasattr(os, "getuid") and os.stat(base).st_uid != uid:
                    raise PermissionError(f"{base} belongs to another user")
            except OSError:
                _staging_dir = tempfile.mkdtemp(prefix="costguard-checkpoint-")
                return _staging_dir
        os.makedirs(base, exist_ok=True)
        _clean_stale_staging(base)
        _staging_dir = tempfile.mkdtemp(prefix=f"p{os.getpid()}-", dir=base)
        return _staging_dir


def _clean_stale_staging(base: str) -> None:
    """Remove staging directories of processes that are gone (a killed attempt's leftovers)."""
    with contextlib.suppress(OSError):
        for name in os.listdir(base):
            m = re.match(r"^p(\d+)-", name)
            if m and not pid_exists(int(m.group(1))):
                shutil.rmtree(os.path.join(base, name), ignore_errors=True)


def _stage(state: Any, step: int, loc: str, keep: int, store: _Store) -> Checkpoint:
    """Pickle into the staging directory and queue the upload; the caller doesn't wait."""
    key = hashlib.sha256(loc.encode()).hexdigest()[:12]
    path = os.path.join(_staging(), f"{key}-{_data_name(step)}.{secrets.token_hex(4)}")
    with open(path, "xb") as f:
        writer = _HashingWriter(f)
        try:
            pickle.dump(state, writer, protocol=PICKLE_PROTOCOL)
        except BaseException:
            f.close()
            with contextlib.suppress(OSError):
                os.unlink(path)
            raise
    saved_at = time.time()
    sha = writer.sha.hexdigest()
    task = _Upload(location=loc, step=step, keep=keep, path=path, size=writer.size,
                   sha256=sha, saved_at=saved_at,
                   marker=_marker_doc(step, writer.size, sha, saved_at))
    _uploader().submit(task)
    return Checkpoint(step=step, state=state, path=store.url(_data_name(step)),
                      saved_at=saved_at, status="uploading")


class _Uploader:
    """One thread uploads staged checkpoints: data, then marker, then prune, newest first per
    location. A save that arrives while an older one of the same location waits replaces it."""

    def __init__(self) -> None:
        self.cond = threading.Condition(threading.RLock())
        self.queue: dict[str, _Upload] = {}  # location -> the newest waiting upload
        self.current: _Upload | None = None
        self.errors: dict[str, str] = {}  # location -> why its newest upload failed
        self.thread = threading.Thread(target=self._run, name="costguard-checkpoint-upload",
                                       daemon=True)
        self.thread.start()

    def submit(self, task: _Upload) -> None:
        with self.cond:
            old = self.queue.pop(task.location, None)
            self.queue[task.location] = task
            self.cond.notify_all()
        if old is not None:
            old.discard()
            _log.debug("checkpoint step %d superseded by step %d before its upload",
                       old.step, task.step)

    def tasks(self, loc: str) -> list[_Upload]:
        with self.cond:
            found = [self.current] if self.current is not None else []
            if loc in self.queue:
                found.append(self.queue[loc])
        return [t for t in found if t is not None and t.location == loc]

    def wait(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.cond:
            while self.queue or self.current is not None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self.cond.wait(left)
            return not self.errors

    def _superseded(self, task: _Upload) -> bool:
        with self.cond:
            return task.location in self.queue

    def _run(self) -> None:
        while True:
            with self.cond:
                while not self.queue:
                    self.cond.wait()
                loc = next(iter(self.queue))
                task = self.current = self.queue.pop(loc)
            try:
                self._upload(task)
                with self.cond:
                    self.errors.pop(task.location, None)
            except Exception as e:
                with self.cond:
                    self.errors[task.location] = f"{type(e).__name__}: {e}"
                if self._superseded(task):
                    _log.warning("checkpoint step %d was not uploaded to %s (%s: %s); a newer "
                                 "one is next", task.step, task.location, type(e).__name__, e)
                else:
                    _log.warning("checkpoint step %d could not be uploaded to %s: %s: %s",
                                 task.step, task.location, type(e).__name__, e)
            finally:
                task.discard()
                with self.cond:
                    self.current = None
                    self.cond.notify_all()

    def _upload(self, task: _Upload) -> None:
        store = _store(task.location)
        data, marker = _data_name(task.step), _marker_name(task.step)
        for attempt in range(1, UPLOAD_TRIES + 1):
            try:
                store.remove(marker)  # an old marker must never describe the new data
                store.put(data, task.path)
                size = store.size(data)
                if size != task.size:
                    raise OSError(f"{size} bytes arrived of {task.size}")
                store.write(marker, task.marker)  # last: now the checkpoint counts
                break
            except Exception as e:
                if attempt == UPLOAD_TRIES or self._superseded(task):
                    raise
                delay = 2.0 ** attempt
                _log.warning("checkpoint step %d: upload failed (%s: %s), retrying in %g s",
                             task.step, type(e).__name__, e, delay)
                with self.cond:
                    self.cond.wait(delay)  # a newer save wakes us: it's the one that matters
                if self._superseded(task):
                    raise
        try:
            _prune(store, task.keep, task.step)
        except Exception as e:  # the checkpoint is complete; pruning is tried again next time
            _log.warning("pruning checkpoints at %s failed: %s: %s", task.location,
                         type(e).__name__, e)


_uploader_lock = threading.Lock()
_UPLOADER: _Uploader | None = None
_OWNER_PID = os.getpid()


def _uploader() -> _Uploader:
    global _UPLOADER
    with _uploader_lock:
        if _UPLOADER is None:
            _UPLOADER = _Uploader()
            _register_exit_flush()
        return _UPLOADER


def _register_exit_flush() -> None:
    """Flush at interpreter exit, early enough for the clients to still work.

    Plain `atexit` is too late: by then concurrent.futures has refused new work (aiobotocore,
    under s3fs, needs its thread pool), so the flush goes into threading's own exit hooks,
    which run first, newest first; registering after concurrent.futures is imported puts
    ours ahead of its shutdown. Where that hook doesn't exist, atexit it is.
    """
    import concurrent.futures.thread  # noqa: F401  (its exit hook must be older than ours)

    register = getattr(threading, "_register_atexit", None)
    if register is not None:
        try:
            register(_at_exit)
            return
        except RuntimeError:  # already shutting down
            pass
    atexit.register(_at_exit)


def _uploads(loc: str) -> list[_Upload]:
    up = _UPLOADER
    return up.tasks(loc) if up is not None else []


def pending(location: str | None = None) -> list[int]:
    """Steps saved at `location` (default: the configured one) whose upload hasn't finished."""
    loc = _resolve(location)
    if loc is None:
        return []
    return sorted(t.step for t in _uploads(loc))


def wait(timeout: float | None = None) -> bool:
    """Block until every staged checkpoint is uploaded (or `timeout` seconds pass).

    True when nothing is pending and each location's newest upload succeeded; failures are
    logged as they happen. Called at interpreter exit and by the job runner after the last
    cell, because a job's kernel is killed rather than shut down.
    """
    up = _UPLOADER
    if up is None or os.getpid() != _OWNER_PID:
        return True
    return up.wait(timeout)


def _at_exit() -> None:
    if os.getpid() != _OWNER_PID:
        return
    if not wait():
        _log.warning("some checkpoints were not uploaded before exit")
    d = _staging_dir
    if d is not None:
        shutil.rmtree(d, ignore_errors=True)


def _after_fork_in_child() -> None:
    """A forked child (a DataLoader worker) has no uploader thread: it starts its own if it
    saves, and never waits on the parent's queue."""
    global _UPLOADER, _OWNER_PID, _staging_dir, _uploader_lock, _staging_lock, _lock
    _UPLOADER = None
    _OWNER_PID = os.getpid()
    _staging_dir = None
    _uploader_lock = threading.Lock()
    _staging_lock = threading.Lock()
    _lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# --- final save on a warning signal ----------------------------------------------------------

_handlers: dict[int, int] = {}  # signal -> pid of the process that installed our handler
_auto_tried = False


def _auto_enable_final_save() -> None:
    """The first save inside a job installs the SIGUSR1 handler (main thread only)."""
    global _auto_tried
    if _auto_tried or not os.environ.get(ENV_JOB_DIR, "").strip():
        return
    if threading.current_thread() is not threading.main_thread():
        return
    _auto_tried = True
    try:
        enable_final_save()
    except Exception as e:
        _log.warning("no final checkpoint on SIGUSR1: %s: %s", type(e).__name__, e)


def enable_final_save(signum: int | None = None) -> bool:
    """On `signum` (default SIGUSR1), persist the newest state given to `save` and wait for its
    upload, then call whatever handler was there before.

    Inside a job this also writes `$COSTGUARD_JOB_DIR/signal-ok` (this process's pid), which
    tells the runner it may forward the batch system's warning signal to the kernel; without
    a handler that signal would kill it. Must be called from the main thread; returns False
    where it can't be installed (another thread, no SIGUSR1 on this platform).
    """
    sig = signum if signum is not None else getattr(signal, "SIGUSR1", None)
    if sig is None:
        return False
    if threading.current_thread() is not threading.main_thread():
        _log.warning("checkpoint.enable_final_save() must be called from the main thread")
        return False
    pid = os.getpid()
    with _lock:
        if _handlers.get(sig) != pid:
            previous = signal.getsignal(sig)

            def on_signal(signum: int, frame: Any) -> None:
                if os.getpid() == pid:  # not in a forked child that inherited the handler
                    _final_save(signum)
                if callable(previous):
                    previous(signum, frame)

            signal.signal(sig, on_signal)
            _handlers[sig] = pid
    _write_signal_ok()
    return True


def _write_signal_ok() -> None:
    job_dir = os.environ.get(ENV_JOB_DIR, "").strip()
    if not job_dir:
        return
    path = os.path.join(job_dir, SIGNAL_OK)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "w") as f:
            f.write(f"{os.getpid()}\n")
        os.replace(tmp, path)
    except OSError as e:
        _log.warning("could not write %s: %s", path, e)


def _final_save(signum: int) -> None:
    """Persist each location's newest unsaved state, then flush uploads; never raises (it
    runs inside a signal handler, in the middle of the user's code)."""
    with _lock:
        todo = [(loc, n) for loc, n in _newest.items() if not n.persisted]
    saved: list[str] = []
    for loc, n in todo:
        try:
            _persist(n.state, n.step, loc, n.keep, n.background)
        except Exception as e:
            _log.warning("final checkpoint of step %d at %s failed: %s: %s", n.step, loc,
                         type(e).__name__, e)
            continue
        n.persisted, n.state = True, None
        saved.append(f"step {n.step}")
    uploaded = wait()
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = str(signum)
    what = ", ".join(saved) if saved else "nothing new (the newest save was already written)"
    print(f"costguard: {name}: final checkpoint: {what}"
          + ("" if uploaded else "; some uploads failed"), file=sys.stderr, flush=True)
