"""The one call the server sends a kernel for each operation, and how it reads the answer.

The server runs `save_code(...)` / `restore_code(...)` in the kernel as a cell. The call binds
no name in the user's namespace, prints one line (`REPLY_PREFIX` + JSON) on stdout, and returns
None, so nothing lands in `Out`. `parse_reply` finds that line in the cell's output. Errors are
answered too ({"error": message, "error_type": ...}), never raised into the user's history.
"""

from __future__ import annotations

import json
import os
from typing import Any

from jupyter_costguard.kernel.hibernate.records import SnapshotTooLarge, Unsaved
from jupyter_costguard.kernel.hibernate.snapshot import LEAVE_LIVE, restore, save

REPLY_PREFIX = "costguard-hibernate: "
_MODULE = "jupyter_costguard.kernel.hibernate"


def _shell() -> Any:
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        raise RuntimeError("not in an IPython kernel")
    return shell


def _answer(doc: dict[str, Any]) -> dict[str, Any]:
    print(REPLY_PREFIX + json.dumps(doc), flush=True)
    return doc


def _error(e: Exception) -> dict[str, Any]:
    doc: dict[str, Any] = {"error": str(e), "error_type": type(e).__name__}
    if isinstance(e, SnapshotTooLarge):
        doc["largest"] = [{"name": n, "bytes": b} for n, b in e.largest]
    if isinstance(e, Unsaved):
        doc["unsaved"] = [{"name": s.name, "reason": s.reason} for s in e.blocking]
    return doc


def kernel_save(dest: str, max_bytes: int, leave: str = LEAVE_LIVE,
                abandoned: str | None = None) -> dict[str, Any]:
    """Snapshot this kernel's namespace into `dest` (`save`'s `leave` and `abandoned`);
    answers the manifest (with `saved` and `bytes`) and the execution count (a cell that runs
    after the save changes it), or the error. The kernel's variables are untouched either
    way."""
    shell = _shell()
    try:
        manifest = save(shell.user_ns, dest, max_bytes, hidden=shell.user_ns_hidden,
                        leave=leave, abandoned=abandoned)
    except Exception as e:  # the answer says why; the kernel's variables stay as they were
        return _answer(_error(e))
    return _answer({**manifest.to_dict(), "saved": manifest.saved, "bytes": manifest.bytes,
                    "execution_count": _count(shell)})


def execution_count() -> dict[str, Any]:
    """The kernel's execution count: what the server compares after a save to see whether a
    cell ran since (the server's own calls do not count)."""
    return _answer({"execution_count": _count(_shell())})


def _count(shell: Any) -> int:
    return int(getattr(shell, "execution_count", 0) or 0)


def kernel_restore(src: str, expect_digest: str | None = None, staging: str | None = None
                   ) -> dict[str, Any]:
    """Load the snapshot in `src` into this kernel's namespace; answers the RestoreResult or
    the error (a damaged snapshot loads nothing)."""
    shell = _shell()
    try:
        result = restore(shell.user_ns, src, expect_digest=expect_digest, staging=staging)
    except Exception as e:
        return _answer(_error(e))
    return _answer(result.to_dict())


def save_code(dest: str | os.PathLike[str], max_bytes: int, leave: str = LEAVE_LIVE,
              abandoned: str | os.PathLike[str] | None = None) -> str:
    """The cell the server runs to hibernate a kernel into `dest`."""
    marker = None if abandoned is None else os.fspath(abandoned)
    return (f"__import__({_MODULE!r}, fromlist=['kernel_save'])"
            f".kernel_save({os.fspath(dest)!r}, {int(max_bytes)!r}, {str(leave)!r}, "
            f"{marker!r});")


def count_code() -> str:
    """The cell the server runs after a save, queued behind any cell sent meanwhile: its
    answer says whether one ran."""
    return f"__import__({_MODULE!r}, fromlist=['execution_count']).execution_count();"


def restore_code(src: str | os.PathLike[str], expect_digest: str | None = None,
                 staging: str | os.PathLike[str] | None = None) -> str:
    """The cell the server runs to restore the snapshot in `src` (whose manifest digest it
    checked) into a kernel; a snapshot in an object store is fetched into `staging` first."""
    where = None if staging is None else os.fspath(staging)
    return (f"__import__({_MODULE!r}, fromlist=['kernel_restore'])"
            f".kernel_restore({os.fspath(src)!r}, {expect_digest!r}, {where!r});")


def parse_reply(stdout: str) -> dict[str, Any] | None:
    """The answer in a cell's stdout (the last reply line), or None if there is none."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(REPLY_PREFIX):
            doc = json.loads(line[len(REPLY_PREFIX):])
            return doc if isinstance(doc, dict) else None
    return None
