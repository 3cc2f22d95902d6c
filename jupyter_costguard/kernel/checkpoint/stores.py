"""Where checkpoint files live: a flat directory on local disk (standard library) or on any
fsspec filesystem (imported only when such a URL is used)."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from typing import Any
from urllib.parse import urlsplit
from urllib.request import url2pathname

from jupyter_costguard.common.files import fsync_dir
from jupyter_costguard.kernel.checkpoint.records import CheckpointError

#: fsspec protocols without a network behind them: written synchronously, like local paths
_NEAR_PROTOCOLS = frozenset({"file", "local", "memory"})


class Store:
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


def private_makedirs(path: str) -> None:
    """Make `path` and its missing parents 0700 (umask or not); an existing directory is the
    user's to set and is left as it is."""
    missing = []
    p = os.path.abspath(path)
    while not os.path.exists(p):
        missing.append(p)
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    os.makedirs(path, mode=0o700, exist_ok=True)
    for d in missing:
        os.chmod(d, 0o700)


def private_create(path: str) -> Any:
    """A new file at `path`, 0600 whatever the umask, open for writing bytes (exclusive)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)
    except OSError:
        os.close(fd)
        raise
    return os.fdopen(fd, "wb")


class LocalStore(Store):
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
        private_makedirs(self.root)
        final = os.path.join(self.root, name)
        tmp = f"{final}.tmp-{secrets.token_hex(6)}"
        try:
            with private_create(tmp) as f:
                fill(f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, final)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        fsync_dir(self.root)

    def remove(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(self.root, name))

    def url(self, name: str) -> str:
        return os.path.join(self.root, name)


class FsspecStore(Store):
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


def open_store(loc: str) -> Store:
    """Local paths and file:// URLs use the stdlib; anything else goes through fsspec."""
    if "::" not in loc:
        if "://" not in loc:
            return LocalStore(loc)
        if loc[:7].lower() == "file://":
            parts = urlsplit(loc)
            host = "" if parts.netloc in ("", "localhost") else parts.netloc
            return LocalStore(url2pathname(host + parts.path))
    return FsspecStore(loc)
