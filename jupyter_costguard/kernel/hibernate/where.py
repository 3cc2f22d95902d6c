"""Where a snapshot's bytes go: the local state folder, or an fsspec URL (s3://, gs://, ...)
when the server's snapshot store is one.

A local snapshot is written in a private temporary folder that is renamed into place. An object
store has no rename, so each file streams to its key under the snapshot's prefix (multipart: no
whole file is held in memory) and the manifest is written last, as the commit marker: a prefix
without a manifest is unfinished and is never loaded. A remote snapshot is restored by
streaming its files into a private local folder, each held to the size its manifest records,
and loading that folder as a local snapshot (every file is verified there first).

fsspec is imported only when such a URL is used. Credentials come from the environment or
fsspec's own configuration; what a URL carries of them never enters a message (`shown`).
"""

from __future__ import annotations

import contextlib
import os
from concurrent.futures import Executor
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit
from urllib.request import url2pathname

from jupyter_costguard.common.files import fsync_dir, open_private
from jupyter_costguard.kernel.hibernate.records import MANIFEST, CorruptSnapshot, SnapshotError
from jupyter_costguard.kernel.hibernate.sink import (
    Budget,
    CapReached,
    Sink,
    WriteFailed,
    write_private,
)

#: how much of a file an object-store write buffers before it sends a part (s3's minimum
#: part is 5 MiB); also what a download reads at a time
BLOCK = 16 << 20


def is_remote(loc: str | os.PathLike[str]) -> bool:
    """Whether `loc` is an fsspec URL rather than a local path (a file:// URL is local)."""
    text = os.fspath(loc)
    if "::" in text:
        return True
    return "://" in text and not text[:7].lower() == "file://"


def local_path(loc: str | os.PathLike[str]) -> Path:
    """The local folder a path or file:// URL names."""
    text = os.fspath(loc)
    if text[:7].lower() == "file://":
        parts = urlsplit(text)
        host = "" if parts.netloc in ("", "localhost") else parts.netloc
        return Path(url2pathname(host + parts.path))
    return Path(text)


def shown(loc: str | os.PathLike[str]) -> str:
    """`loc` as messages and answers show it: without a user, password or query (where a
    signed URL keeps its signature) written into it."""
    text = os.fspath(loc)
    if not is_remote(text):
        return text
    out = []
    for part in text.split("::"):
        try:
            parts = urlsplit(part)
        except ValueError:
            out.append("<url>")
            continue
        netloc = parts.netloc.rpartition("@")[2]
        out.append(urlunsplit(parts._replace(netloc=netloc, query="", fragment="")))
    return "::".join(out)


def scrub(text: str, loc: str | os.PathLike[str]) -> str:
    """`text` (an error from a store) with `loc` written as `shown(loc)`."""
    raw = os.fspath(loc)
    return text.replace(raw, shown(raw)) if raw else text


def child(base: str, name: str) -> str:
    """The location `name` under `base` (a folder or a URL prefix)."""
    if is_remote(base):
        return f"{base.rstrip('/')}/{name}"
    return os.fspath(local_path(base) / name)


def open_fs(url: str) -> tuple[Any, str]:
    """(filesystem, path) of an fsspec URL; SnapshotError saying what to install when the
    filesystem's package is missing."""
    try:
        import fsspec.core
    except ImportError:
        raise SnapshotError(f"the snapshot store {shown(url)} needs fsspec: pip install fsspec "
                            "(and s3fs for s3://, gcsfs for gs://)") from None
    try:
        fs, path = fsspec.core.url_to_fs(url)
    except ImportError as e:
        raise SnapshotError(f"the snapshot store {shown(url)}: {e}") from None
    return fs, str(path).rstrip("/")


def _as_oserror(e: BaseException) -> OSError:
    return e if isinstance(e, OSError) else OSError(f"{type(e).__name__}: {e}")


class Folder(Protocol):
    """Where `snapshot._write` puts one snapshot's files."""

    shown: str

    def sink(self, name: str, budget: Budget, executor: Executor) -> Sink: ...

    def drop(self, name: str) -> None: ...

    def seal(self, manifest: bytes) -> None: ...


class LocalFolder:
    """A private temporary folder (renamed into place by the caller)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.shown = str(path.parent)

    def sink(self, name: str, budget: Budget, executor: Executor) -> Sink:
        return Sink(self.path / name, budget, executor)

    def drop(self, name: str) -> None:
        (self.path / name).unlink()

    def seal(self, manifest: bytes) -> None:
        write_private(self.path / MANIFEST, manifest)
        fsync_dir(self.path)


class RemoteSink(Sink):
    """A Sink that streams to an object in an fsspec filesystem. Any failure of the store is a
    WriteFailed (never taken for the value's fault); `finish` completes the upload and
    `abandon` aborts it."""

    def __init__(self, fs: Any, path: str, budget: Budget, executor: Executor) -> None:
        self._fs = fs
        super().__init__(path, budget, executor)

    def _open(self, path: Path | str) -> Any:
        try:
            return self._fs.open(str(path), "wb", block_size=BLOCK)
        except Exception as e:
            raise WriteFailed(_as_oserror(e)) from e

    def write(self, data: Any) -> int:
        """Hand the bytes over a block at a time: an fsspec file copies what it is given into
        its buffer before it sends a part, so one large write (a pickled buffer) would
        otherwise be copied whole."""
        view = memoryview(data).cast("B")
        for start in range(0, view.nbytes, BLOCK):
            self._write_block(view[start:start + BLOCK])
        return view.nbytes

    def _write_block(self, data: memoryview) -> None:
        try:
            super().write(data)
        except (WriteFailed, CapReached):
            raise
        except Exception as e:
            raise WriteFailed(_as_oserror(e)) from e

    def finish(self) -> str:
        try:
            return super().finish()
        except WriteFailed:
            raise
        except Exception as e:  # a second close after a failed one, say
            raise WriteFailed(_as_oserror(e)) from e

    def _sync(self) -> None:
        try:
            self._file.close()  # the last part goes up and the upload is completed
        except Exception as e:
            raise _as_oserror(e) from e

    def abandon(self) -> None:
        with contextlib.suppress(Exception):
            self._file.discard()  # aborts a multipart upload (s3fs); a no-op elsewhere
        with contextlib.suppress(Exception):
            super().abandon()


class RemoteFolder:
    """A snapshot's prefix in an object store: its files, then its manifest."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.shown = shown(url)
        self.fs, self.root = open_fs(url)

    def _key(self, name: str) -> str:
        return f"{self.root}/{name}"

    def exists(self) -> bool:
        with contextlib.suppress(Exception):
            self.fs.invalidate_cache(self.root)
        try:
            return bool(self.fs.exists(self._key(MANIFEST))) or bool(
                self.fs.ls(self.root, detail=False))
        except FileNotFoundError:
            return False

    def sink(self, name: str, budget: Budget, executor: Executor) -> Sink:
        with contextlib.suppress(Exception):  # object stores have no folders to make
            self.fs.makedirs(self.root, exist_ok=True)
        return RemoteSink(self.fs, self._key(name), budget, executor)

    def drop(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self._key(name))

    def seal(self, manifest: bytes) -> None:
        """Write the manifest: from now on the snapshot is complete."""
        try:
            self.fs.pipe_file(self._key(MANIFEST), manifest)
        except Exception as e:
            raise WriteFailed(_as_oserror(e)) from e

    def discard(self) -> None:
        """Remove whatever is under the prefix (an unfinished or deleted snapshot)."""
        remove(self.url)


def remove(url: str) -> None:
    """Delete the snapshot at `url` (a prefix of an object store), manifest first so that a
    removal cut short leaves an unfinished snapshot, never a damaged complete one."""
    fs, root = open_fs(url)
    with contextlib.suppress(FileNotFoundError):
        fs.rm_file(f"{root}/{MANIFEST}")
    with contextlib.suppress(FileNotFoundError):
        fs.rm(root, recursive=True)
    with contextlib.suppress(Exception):
        fs.invalidate_cache(root)


def read_manifest_bytes(url: str, limit: int) -> bytes:
    """The manifest of the snapshot at `url`, at most `limit` + 1 bytes; CorruptSnapshot when
    there is none (an unfinished snapshot) or the store cannot be read."""
    fs, root = open_fs(url)
    with contextlib.suppress(Exception):
        fs.invalidate_cache(root)
    try:
        with fs.open(f"{root}/{MANIFEST}", "rb") as f:
            data: bytes = f.read(limit + 1)
    except FileNotFoundError:
        raise CorruptSnapshot(f"{shown(url)} has no manifest: the snapshot is incomplete or "
                              "not a snapshot") from None
    except Exception as e:
        raise CorruptSnapshot(f"the manifest in {shown(url)} cannot be read: "
                              f"{scrub(str(e), url)}") from None
    return data


def download(url: str, files: list[tuple[str, int]], dest: Path) -> None:
    """Stream each (name, size) of the snapshot at `url` into the private folder `dest`, never
    more than `size` bytes of it; CorruptSnapshot naming a file that is missing, shorter or
    longer."""
    fs, root = open_fs(url)
    for name, size in files:
        try:
            src = fs.open(f"{root}/{name}", "rb", block_size=BLOCK)
        except FileNotFoundError:
            raise CorruptSnapshot(f"the snapshot in {shown(url)} is damaged: {name} is "
                                  "missing; nothing was loaded") from None
        fd = open_private(dest / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        got = 0
        with src, os.fdopen(fd, "wb") as out:
            while True:
                try:
                    chunk = src.read(min(BLOCK, size - got + 1))
                except Exception as e:
                    raise CorruptSnapshot(f"{name} of the snapshot in {shown(url)} cannot be "
                                          f"read: {scrub(str(e), url)}; nothing was loaded"
                                          ) from None
                if not chunk:
                    break
                got += len(chunk)
                if got > size:
                    raise CorruptSnapshot(f"the snapshot in {shown(url)} is damaged: {name} "
                                          "is longer than its manifest says; nothing was "
                                          "loaded")
                out.write(chunk)
        if got != size:
            raise CorruptSnapshot(f"the snapshot in {shown(url)} is damaged: {name} is "
                                  "truncated; nothing was loaded")
