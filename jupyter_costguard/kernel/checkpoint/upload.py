"""Background uploads to object storage, so the GPU doesn't wait on the network.

`persist` writes near stores (local disk, memory://) at once; for object storage it pickles into
a staging directory of this process and queues the upload on one thread, which sends the data,
then the marker, then prunes. Only the newest waiting upload per location matters. `wait`
flushes, at interpreter exit too; a forked child starts afresh.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import logging
import os
import pickle
import re
import secrets
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from jupyter_costguard.common.proc import pid_exists
from jupyter_costguard.kernel.checkpoint.records import Checkpoint
from jupyter_costguard.kernel.checkpoint.settings import ENV_JOB_DIR, ENV_STAGING, resolve
from jupyter_costguard.kernel.checkpoint.steps import (
    PICKLE_PROTOCOL,
    data_name,
    marker_doc,
    marker_name,
    prune,
    write,
)
from jupyter_costguard.kernel.checkpoint.stores import (
    FsspecStore,
    Store,
    open_store,
    private_create,
    private_makedirs,
)
from jupyter_costguard.offload import jobdir

UPLOAD_TRIES = 3

_log = logging.getLogger(__name__)


def persist(state: Any, step: int, loc: str, keep: int, background: bool | None
            ) -> Checkpoint:
    """Write `state` as `step` at `loc`: now, or staged for the uploader (`background`, by
    default for object storage)."""
    store = open_store(loc)
    if background is None:
        background = isinstance(store, FsspecStore) and not store.near
    if background:
        return _stage(state, step, loc, keep, store)
    return write(store, state, step, keep)


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
class Upload:
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
            base = os.path.join(job_dir, jobdir.CHECKPOINT_STAGING)
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
        private_makedirs(base)
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


def _stage(state: Any, step: int, loc: str, keep: int, store: Store) -> Checkpoint:
    """Pickle into the staging directory and queue the upload; the caller doesn't wait."""
    key = hashlib.sha256(loc.encode()).hexdigest()[:12]
    path = os.path.join(_staging(), f"{key}-{data_name(step)}.{secrets.token_hex(4)}")
    with private_create(path) as f:
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
    task = Upload(location=loc, step=step, keep=keep, path=path, size=writer.size,
                  sha256=sha, saved_at=saved_at,
                  marker=marker_doc(step, writer.size, sha, saved_at))
    _uploader().submit(task)
    return Checkpoint(step=step, state=state, path=store.url(data_name(step)),
                      saved_at=saved_at, status="uploading")


class _Uploader:
    """One thread uploads staged checkpoints: data, then marker, then prune, newest first per
    location. A save that arrives while an older one of the same location waits replaces it."""

    def __init__(self) -> None:
        self.cond = threading.Condition(threading.RLock())
        self.queue: dict[str, Upload] = {}  # location -> the newest waiting upload
        self.current: Upload | None = None
        self.errors: dict[str, str] = {}  # location -> why its newest upload failed
        self.thread = threading.Thread(target=self._drain_queue, name="costguard-checkpoint-upload",
                                       daemon=True)
        self.thread.start()

    def submit(self, task: Upload) -> None:
        with self.cond:
            old = self.queue.pop(task.location, None)
            self.queue[task.location] = task
            self.cond.notify_all()
        if old is not None:
            old.discard()
            _log.debug("checkpoint step %d superseded by step %d before its upload",
                       old.step, task.step)

    def tasks(self, loc: str) -> list[Upload]:
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

    def _superseded(self, task: Upload) -> bool:
        with self.cond:
            return task.location in self.queue

    def _drain_queue(self) -> None:
        """The thread's loop: upload what waits, one at a time, for the life of the kernel."""
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

    def _upload(self, task: Upload) -> None:
        store = open_store(task.location)
        data, marker = data_name(task.step), marker_name(task.step)
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
            prune(store, task.keep, task.step)
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


def uploads(loc: str) -> list[Upload]:
    """This process's uploads to `loc` not finished yet (the one in flight first)."""
    up = _UPLOADER
    return up.tasks(loc) if up is not None else []


def pending(location: str | None = None) -> list[int]:
    """Steps saved at `location` (default: the configured one) whose upload hasn't finished."""
    loc = resolve(location)
    if loc is None:
        return []
    return sorted(t.step for t in uploads(loc))


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
    global _UPLOADER, _OWNER_PID, _staging_dir, _uploader_lock, _staging_lock
    _UPLOADER = None
    _OWNER_PID = os.getpid()
    _staging_dir = None
    _uploader_lock = threading.Lock()
    _staging_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

