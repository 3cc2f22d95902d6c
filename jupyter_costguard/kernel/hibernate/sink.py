"""Writing a snapshot's files: private (0600, links not followed), hashed as they stream, held
to the snapshot's size cap, and fsynced, so the manifest can vouch for what is on disk."""

from __future__ import annotations

import os
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any

from jupyter_costguard.common.files import open_private
from jupyter_costguard.kernel.hibernate.digest import ChunkedHash

#: a write at least this large is hashed on another thread while it is written (the hash and
#: the write both let go of the GIL)
OVERLAP_MIN = 1 << 20


class CapReached(Exception):
    """Writing the next chunk would take the snapshot over its size cap."""


class WriteFailed(Exception):
    """The disk refused a write (full, quota, gone): not the value's fault."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


class Budget:
    """The bytes the whole snapshot may still take."""

    def __init__(self, max_bytes: int) -> None:
        self.left = max_bytes


class Sink:
    """A write-only file that hashes what passes through and stops at the budget: numpy,
    pickle and torch all stream into it one chunk at a time."""

    def __init__(self, path: Path | str, budget: Budget, executor: Executor) -> None:
        self._file = self._open(path)
        self._budget = budget
        self._executor = executor
        self._hash = ChunkedHash()
        self.bytes = 0

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        n = view.nbytes
        if n > self._budget.left:
            raise CapReached()
        self._budget.left -= n
        self.bytes += n
        hashing: Future[None] | None = None
        if n >= OVERLAP_MIN:  # one update at a time: this one ends before the next write
            hashing = self._executor.submit(self._hash.update, view)
        if hashing is None:
            self._hash.update(view)
        done = 0
        try:
            while done < n:  # an unbuffered write may take less than all of it
                done += self._file.write(view[done:]) or 0
        except OSError as e:
            raise WriteFailed(e) from e
        finally:
            if hashing is not None:
                hashing.result()
        return n

    def _open(self, path: Path | str) -> Any:
        """The file the bytes go to: a new private local file (`where.RemoteSink` streams to
        an object store instead)."""
        fd = open_private(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        return os.fdopen(fd, "wb", buffering=0)

    def _sync(self) -> None:
        """Make what was written durable (a hook, as `_open` is)."""
        os.fsync(self._file.fileno())

    def flush(self) -> None:
        """Nothing is buffered here; torch and pickle call it."""

    def writable(self) -> bool:
        return True

    def finish(self) -> str:
        """fsync and close; the digest (`digest.ChunkedHash`) of what was written."""
        try:
            self._sync()
        except OSError as e:
            self._file.close()
            raise WriteFailed(e) from e
        self._file.close()
        return self._hash.hexdigest()

    def abandon(self) -> None:
        """Close without syncing and give the bytes back to the budget (the file is deleted
        by the caller)."""
        self._budget.left += self.bytes
        self._file.close()


def write_private(path: Path, data: bytes) -> None:
    """A small file (the manifest), 0600 and fsynced."""
    fd = open_private(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(fd)
