"""The digest that vouches for a snapshot file: a hash of each fixed-size chunk, combined.

Format 3 (written now) hashes with BLAKE3, format 2 with sha256; format 1 recorded the plain
sha256 of the whole file. All three are read. BLAKE3 (the `blake3` package, Rust with SIMD)
hashes about 4 GB/s on one core here, against 1.6 GB/s for sha256 with SHA extensions (the
fastest hash in the standard library), and a page-cached read copies about 3-4 GB/s: with
sha256 the hashing cost a restore more than the read itself; with BLAKE3, about as much.

Hashing fixed-size chunks lets every core hash a different chunk while reading it (the hash
and `os.preadv` both let go of the GIL), straight into the buffer the value is built from,
piece by piece so each piece is hashed while it is still in the core's cache: each byte is
read once and hashed where it lies. BLAKE3's own multithreading (`max_threads=AUTO`) is not
used: it hashes a buffer already in memory, a second pass over it from RAM, and its worker
threads stay alive in the kernel after the call.

The file's digest is the hash over a fixed prefix (naming the format), the chunk size, the
file size and the chunk digests in order: a chunk swapped with another (of this file or
another), a chunk moved, a file cut at a chunk boundary or grown all change it.

Why unkeyed: the digest needs to be collision resistant (BLAKE3-256 is, as sha256 is), not
secret. What says the server wrote the snapshot is the server's HMAC over the manifest, which
lists every file's size and digest (`hibernate/mac.py`), with a key that never leaves the
server; the kernel checks each file against the manifest the server checked. Keyed BLAKE3 as
the MAC would put the key into the kernel (which computes the digests while it writes, and
runs whatever code the notebook runs), and the manifest would still need the MAC of its own
(names, kinds, offsets); it would buy no speed (the manifest is small).

Where `blake3` cannot be imported (a kernel environment costguard was installed into without
its dependencies), saves write format 2, and a format 3 snapshot is refused with the reason.

Threads come from a pool the caller owns for one save or restore (`pool()`), so none is left
behind in the kernel afterwards.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

try:
    import blake3
except ImportError:  # pragma: no cover - a dependency; see the module's docstring
    blake3 = None  # type: ignore[assignment]

#: the bytes each chunk digest covers
CHUNK = 8 << 20
#: what one read or hash call takes at a time within a chunk: small enough to stay in cache
#: between the read and the hash
PIECE = 1 << 20
#: the most threads one save or restore uses
MAX_WORKERS = 8
_PREFIX = {2: b"costguard-hibernate chunked sha256 v2\n",
           3: b"costguard-hibernate chunked blake3 v3\n"}


class Hash(Protocol):
    def update(self, data: Any, /) -> Any: ...
    def digest(self) -> bytes: ...


class NoHash(Exception):
    """The hash this snapshot's format needs cannot be computed here (blake3 is missing)."""


@dataclass(frozen=True)
class Scheme:
    """How a snapshot's files are hashed: its manifest's `format` and `chunk` (the bytes each
    chunk digest covers; 0 for format 1, one digest per file)."""

    format: int
    chunk: int

    def new(self) -> Hash:
        """A fresh hash of this format's kind; NoHash where it cannot be made here."""
        if self.format == 3:
            if blake3 is None:
                raise NoHash("this snapshot is checked with BLAKE3, and the blake3 package is "
                             "not installed in this kernel's environment (pip install blake3)")
            return blake3.blake3()
        return hashlib.sha256()


def current() -> Scheme:
    """The scheme new snapshots are written with: BLAKE3 chunks (format 3) where blake3 is
    installed, else sha256 chunks (format 2)."""
    return Scheme(3 if blake3 is not None else 2, CHUNK)


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


def combine(scheme: Scheme, size: int, digests: list[bytes]) -> str:
    """The file digest from its chunks' digests, in order."""
    if scheme.chunk == 0:  # format 1: the whole file's sha256 is the digest
        (only,) = digests
        return only.hex()
    head = _PREFIX[scheme.format] + f"{scheme.chunk} {size}\n".encode("ascii")
    h = scheme.new()
    h.update(head + b"".join(digests))
    return h.digest().hex()


class ChunkedHash:
    """Hashes a stream written in pieces of any size, cutting it into chunks of the scheme's
    size (default: the one new snapshots are written with)."""

    def __init__(self, scheme: Scheme | None = None) -> None:
        self.scheme = scheme or current()
        self.chunk = self.scheme.chunk
        self.size = 0
        self._digests: list[bytes] = []
        self._current = self.scheme.new()
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
                self._current = self.scheme.new()
                self._in_current = 0

    def hexdigest(self) -> str:
        digests = self._digests + ([self._current.digest()]
                                   if self._in_current or not self._digests else [])
        return combine(self.scheme, self.size, digests)


class ShortRead(Exception):
    """The file ended before the size its snapshot records: it shrank while being read."""


def read(fd: int, size: int, scheme: Scheme, executor: ThreadPoolExecutor, *,
         head: bytes = b"", body: memoryview | None = None) -> str:
    """Read the file `fd` (`size` bytes) and return its digest under `scheme`, its chunks read
    and hashed on `executor`'s threads. The file's first `len(head)` bytes are taken from
    `head` (already read, and parsed, by the caller: what is hashed is what was parsed); the
    rest is read into `body` (`size - len(head)` bytes) or, without one, through small scratch
    buffers. Raises ShortRead if the file ends early, NoHash if the scheme's hash is missing
    here (before anything is read)."""
    if body is not None and len(head) + body.nbytes != size:
        raise ValueError("head and body do not add up to the file's size")
    scheme.new()  # NoHash now, not from a thread midway
    step = scheme.chunk or max(size, 1)
    futures: list[Future[bytes]] = [
        executor.submit(_chunk, fd, start, min(start + step, size), scheme, head, body)
        for start in range(0, max(size, 1), step)]
    try:
        digests = [f.result() for f in futures]
    finally:
        for f in futures:  # an error in one: the others stop writing into `body` first
            f.cancel()
        for f in futures:
            if not f.cancelled():
                f.exception()
    return combine(scheme, size, digests)


def _chunk(fd: int, start: int, end: int, scheme: Scheme, head: bytes,
           body: memoryview | None) -> bytes:
    """The hash of the file's bytes [start, end), read into `body` where they go there."""
    h = scheme.new()
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
