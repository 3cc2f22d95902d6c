"""The digest that vouches for a snapshot file: sha256 of each fixed-size chunk, combined.

sha256 is the fastest cryptographic hash in the standard library on CPUs with SHA extensions
(about 1.6 GB/s on one core; blake2b and blake2s are slower there), and on one core it costs
several times a page-cached read. Hashing fixed-size chunks lets every core hash a different
chunk while reading it (hashlib and `os.preadv` both let go of the GIL), straight into the
buffer the value is built from, so each byte is read once and hashed where it lies.

The file's digest is sha256 over a fixed prefix, the chunk size, the file size and the chunk
digests in order: a chunk swapped with another (of this file or another), a chunk moved, a
file cut at a chunk boundary or grown all change it. Format 1 snapshots recorded the plain
sha256 of the whole file (`chunk` 0 here); they are still read, on one core.

Threads come from a pool the caller owns for one save or restore (`pool()`), so none is left
behind in the kernel afterwards.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

#: the bytes each chunk digest covers
CHUNK = 8 << 20
#: what one read or hash call takes at a time within a chunk: small enough to stay in cache
#: between the read and the hash
PIECE = 1 << 20
#: the most threads one save or restore uses
MAX_WORKERS = 8
_PREFIX = b"costguard-hibernate chunked sha256 v2\n"


def workers() -> int:
    """Threads for reading and hashing: the cores this process may run on, up to MAX_WORKERS."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(MAX_WORKERS, cores))


def pool() -> ThreadPoolExecutor:
    """A pool for one save or restore; use it in a `with` so its threads end with it."""
    return ThreadPoolExecutor(workers(), thread_name_prefix="costguard-hibernate")


def combine(chunk: int, size: int, digests: list[bytes]) -> str:
    """The file digest from its chunks' sha256 digests, in order."""
    if chunk == 0:  # format 1: the whole file's sha256 is the digest
        (only,) = digests
        return only.hex()
    head = _PREFIX + f"{chunk} {size}\n".encode("ascii")
    return hashlib.sha256(head + b"".join(digests)).hexdigest()


class ChunkedHash:
    """Hashes a stream written in pieces of any size, cutting it into `chunk`-byte chunks."""

    def __init__(self, chunk: int = CHUNK) -> None:
        self.chunk = chunk
        self.size = 0
        self._digests: list[bytes] = []
        self._current = hashlib.sha256()
        self._in_current = 0

    def update(self, data: Any) -> None:
        view = memoryview(data).cast("B")
        while view.nbytes:
            room = self.chunk - self._in_current
            piece = view[:room]
            self._current.update(piece)
            self._in_current += piece.nbytes
            self.size += piece.nbytes
            view = view[piece.nbytes:]
            if self._in_current == self.chunk:
                self._digests.append(self._current.digest())
                self._current = hashlib.sha256()
                self._in_current = 0

    def hexdigest(self) -> str:
        digests = self._digests + ([self._current.digest()]
                                   if self._in_current or not self._digests else [])
        return combine(self.chunk, self.size, digests)


class ShortRead(Exception):
    """The file ended before the size its snapshot records: it shrank while being read."""


def read(fd: int, size: int, chunk: int, executor: ThreadPoolExecutor, *,
         head: bytes = b"", body: memoryview | None = None) -> str:
    """Read the file `fd` (`size` bytes) and return its digest, its chunks read and hashed on
    `executor`'s threads. The file's first `len(head)` bytes are taken from `head` (already
    read, and parsed, by the caller: what is hashed is what was parsed); the rest is read into
    `body` (`size - len(head)` bytes) or, without one, through small scratch buffers. Raises
    ShortRead if the file ends early."""
    if body is not None and len(head) + body.nbytes != size:
        raise ValueError("head and body do not add up to the file's size")
    step = chunk or max(size, 1)
    futures: list[Future[bytes]] = [
        executor.submit(_chunk, fd, start, min(start + step, size), head, body)
        for start in range(0, max(size, 1), step)]
    try:
        digests = [f.result() for f in futures]
    finally:
        for f in futures:  # an error in one: the others stop writing into `body` first
            f.cancel()
        for f in futures:
            if not f.cancelled():
                f.exception()
    return combine(chunk, size, digests)


def _chunk(fd: int, start: int, end: int, head: bytes, body: memoryview | None) -> bytes:
    """sha256 of the file's bytes [start, end), read into `body` where they go there."""
    h = hashlib.sha256()
    if start < len(head):
        h.update(memoryview(head)[start:min(end, len(head))])
    scratch = memoryview(bytearray(PIECE)) if body is None else None
    for piece_start, piece_end in _pieces(max(start, len(head)), end):
        if body is not None:
            buf = body[piece_start - len(head):piece_end - len(head)]
        else:
            assert scratch is not None
            buf = scratch[:piece_end - piece_start]
        done = 0
        while done < buf.nbytes:  # a read may return less than asked
            got = os.preadv(fd, [buf[done:]], piece_start + done)
            if not got:
                raise ShortRead()
            done += got
        h.update(buf)
    return h.digest()


def _pieces(start: int, end: int) -> Iterator[tuple[int, int]]:
    for s in range(start, end, PIECE):
        yield s, min(s + PIECE, end)
