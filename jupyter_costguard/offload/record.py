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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: files up to this size get a sha256 in the manifest; bigger ones only size and mtime
HASH_LIMIT_BYTES = 64 << 20
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


def manifest(root: Path, cwd: Path, inputs: Sequence[str]) -> list[dict[str, Any]]:
    """Declared input files (relative to the notebook's directory; directories walked)."""
    entries: list[dict[str, Any]] = []
    for name in inputs:
        path = (cwd / name).resolve()
        if not path.is_relative_to(root):
            entries.append({"path": name, "error": "outside the server's root directory"})
            continue
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        if not path.exists():
            entries.append({"path": name, "error": "not found"})
            continue
        for f in files[:10000]:
            try:
                st = f.stat()
            except OSError as e:
                entries.append({"path": str(f.relative_to(cwd)), "error": str(e)})
                continue
            entries.append({
                "path": os.path.relpath(f, cwd), "size_bytes": st.st_size,
                "modified": st.st_mtime,
                "sha256": sha256_file(f, HASH_LIMIT_BYTES) if st.st_size <= HASH_LIMIT_BYTES
                else None,
            })
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
