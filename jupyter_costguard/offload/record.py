"""What a job records so it can be run again and its result trusted.

Taken at submit, off the IO loop: the code, hashes of the cells as submitted and of the
notebook file, the git commit and dirty state of the working directory, and a manifest of the
data files the user declared. The kernel's interpreter and packages are added by the runner
(``env.json``) when the job has run, since only the job's own kernel knows them.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from jupyter_costguard.offload.errors import JobError

#: files up to this size get a sha256 in the manifest; bigger ones only size and mtime
HASH_LIMIT_BYTES = 64 << 20
#: what one manifest reads for hashes in all (the worker thread's time is bounded by it)
MAX_HASH_TOTAL_BYTES = HASH_LIMIT_BYTES
#: files one manifest may examine, across all declared inputs
MAX_INPUT_FILES = 10_000
GIT_TIMEOUT_SECONDS = 5.0


def sha256_file(path: Path, limit: int | None = None) -> str | None:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
                if limit is not None and f.tell() > limit:
                    return None
    except OSError:
        return None
    return h.hexdigest()


def cells_hash(cells: Sequence[Any]) -> str:
    """Of the code cells' sources as submitted (unsaved edits included)."""
    sources = []
    for c in cells:
        if isinstance(c, dict) and c.get("cell_type") == "code":
            src = c.get("source", "")
            sources.append("".join(src) if isinstance(src, list) else str(src))
    return hashlib.sha256(json.dumps(sources).encode()).hexdigest()


def git_state(cwd: str) -> dict[str, Any] | None:
    """commit, branch and dirty state of the repository holding `cwd` (None outside one)."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", cwd, *args], capture_output=True, text=True,
                                  timeout=GIT_TIMEOUT_SECONDS, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return None
    status = git("status", "--porcelain", "--untracked-files=no") or ""
    return {"commit": commit, "branch": git("rev-parse", "--abbrev-ref", "HEAD"),
            "dirty": bool(status), "changed_files": len(status.splitlines())}


def _refuse_outside(root: Path, name: str, link: Path) -> None:
    """JobError when `link` (a symlink met while walking `name`) points outside `root`."""
    try:
        target = link.resolve()
    except (OSError, RuntimeError) as e:  # a loop, or unreadable
        raise JobError(f"inputs: {name}: cannot follow the link {link.name}: {e}") from None
    if not target.is_relative_to(root):
        raise JobError(f"inputs: {name}: {os.path.relpath(link, root)} links outside the "
                       "server's root directory; copy the file in or drop the link")


def _walk(root: Path, name: str, path: Path) -> Iterator[Path]:
    """The files under `path` in order, without following links to directories; a link
    anywhere that leads out of `root` is refused."""
    if not path.is_dir():
        yield path
        return
    for top, dirs, files in os.walk(path):
        dirs.sort()
        here = Path(top)
        for d in dirs:
            if (here / d).is_symlink():
                _refuse_outside(root, name, here / d)
        for f in sorted(files):
            full = here / f
            if full.is_symlink():
                _refuse_outside(root, name, full)
            yield full


def manifest(root: Path, cwd: Path, inputs: Sequence[str]) -> list[dict[str, Any]]:
    """Declared input files (relative to the notebook's directory; directories walked).

    Bounded: at most `MAX_INPUT_FILES` files in all (more is a 413), and at most
    `MAX_HASH_TOTAL_BYTES` read for hashes (files past that budget, or bigger than
    `HASH_LIMIT_BYTES`, get size and mtime only). A symlink that leads out of the server's
    root is refused (400): the manifest would describe, and the job could read, a file the
    server does not serve."""
    root = root.resolve()
    entries: list[dict[str, Any]] = []
    examined = 0
    hash_budget = MAX_HASH_TOTAL_BYTES
    for name in inputs:
        given = cwd / name
        if given.is_symlink():
            _refuse_outside(root, name, given)
        path = given.resolve()
        if not path.is_relative_to(root):
            entries.append({"path": name, "error": "outside the server's root directory"})
            continue
        if not path.exists():
            entries.append({"path": name, "error": "not found"})
            continue
        for f in _walk(root, name, path):
            examined += 1
            if examined > MAX_INPUT_FILES:
                raise JobError(f"inputs name more than the limit of {MAX_INPUT_FILES} files; "
                               "declare fewer or larger files", 413)
            try:
                st = f.stat()
            except OSError as e:
                entries.append({"path": os.path.relpath(f, cwd), "error": str(e)})
                continue
            entry: dict[str, Any] = {
                "path": os.path.relpath(f, cwd), "size_bytes": st.st_size,
                "modified": st.st_mtime, "sha256": None,
            }
            if st.st_size > HASH_LIMIT_BYTES:
                entry["sha256_skipped"] = f"larger than {HASH_LIMIT_BYTES >> 20} MiB"
            elif st.st_size > hash_budget:
                entry["sha256_skipped"] = (f"past the manifest's hash budget of "
                                           f"{MAX_HASH_TOTAL_BYTES >> 20} MiB")
            else:
                hash_budget -= st.st_size
                entry["sha256"] = sha256_file(f, HASH_LIMIT_BYTES)
            entries.append(entry)
    return entries


def make_record(root: Path, notebook: Path, cwd: Path, code: str, cells: Sequence[Any],
                inputs: Sequence[str], user: str | None) -> dict[str, Any]:
    return {
        "code": code,
        "cells_sha256": cells_hash(cells),
        "notebook_file_sha256": sha256_file(notebook),
        "git": git_state(str(cwd)),
        "inputs": manifest(root, cwd, inputs),
        "submitted_by": user,
        "server": {"python": sys.version.split()[0], "platform": platform.platform(),
                   "executable": sys.executable},
    }
