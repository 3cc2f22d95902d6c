"""Where costguard keeps its files, and how it writes one that only the user may read.

The data folder is ``<jupyter data dir>/costguard`` (the ledger, the jobs, the refreshed
catalog); writes are private (0600, links not followed) and atomic (a reader sees the old file
or the new one). Standard library and `jupyter_core` only: the job runner and code inside a
kernel write with the same rules.
"""

from __future__ import annotations

import os
from pathlib import Path

#: every file costguard writes for the user, and every directory it makes for them
PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700


def data_dir() -> Path:
    """``<jupyter data dir>/costguard``: the default home of the ledger, jobs and catalog."""
    from jupyter_core.paths import jupyter_data_dir

    return Path(jupyter_data_dir()) / "costguard"


def fsync_dir(path: Path | str) -> None:
    """Make a rename in `path` durable: best effort, where the platform allows a directory
    fsync (not on Windows)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def open_private(path: Path | str, flags: int = os.O_WRONLY | os.O_CREAT | os.O_APPEND) -> int:
    """A file descriptor of `path`, created 0600 (umask or not; an existing file is made
    0600 too). A link in its place is not followed: a job cannot point costguard's writes
    (or that chmod) at a file elsewhere."""
    fd = os.open(path, flags | getattr(os, "O_NOFOLLOW", 0), PRIVATE_FILE)
    try:
        os.fchmod(fd, PRIVATE_FILE)
    except OSError:
        os.close(fd)
        raise
    return fd


def write_bytes(path: Path | str, data: bytes) -> None:
    """Write `data` so a reader sees the old file or the new one, never half of one; the file
    is 0600."""
    path = Path(path)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    fd = open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
