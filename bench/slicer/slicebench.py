"""Shared pieces of the slicer bench: the manifest, running cells in a fresh kernel, the
output comparison, and loading a slicer (the working tree's or the one committed at git HEAD).

A "run" is always a fresh ``python3`` (ipykernel) kernel whose working directory is
``bench/slicer/notebooks``, so the notebooks' relative data paths (``../data/...``) work.  The
cells run one after the other like a user's Run All; an error does not stop the run (it is
recorded as the cell's output), so a slice that misses a cell shows up as a mismatch.

What is compared is the selected cell's *text* output: its stdout stream, and the
``text/plain`` of its ``execute_result`` and ``display_data`` messages (a figure reads
``<Figure size 640x480 with 1 Axes>``, so figure state that leaks from earlier cells counts),
or ``ERROR ename: evalue`` when it raised.  Normalised: memory addresses (``0x7f...``) masked,
trailing whitespace and blank lines at the ends stripped.  stderr (warnings) is ignored.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
NOTEBOOKS = HERE / "notebooks"
MANIFEST = HERE / "manifest.json"
SLICER_PACKAGE = "jupyter_costguard.offload.slicing"

CELL_TIMEOUT_S = 300.0
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{4,}")


def load_manifest() -> dict[str, Any]:
    manifest: dict[str, Any] = json.loads(MANIFEST.read_text())
    return manifest


def save_manifest(manifest: dict[str, Any]) -> None:
    MANIFEST.write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")


def read_notebook(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """The notebook's cells as the frontend sends them: nbformat dicts with id, type, source."""
    nb = json.loads((HERE / entry["file"]).read_text())
    cells = []
    for cell in nb["cells"]:
        source = cell.get("source", "")
        if isinstance(source, list):
            source = "".join(source)
        cells.append({"id": cell["id"], "cell_type": cell["cell_type"], "source": source,
                      "metadata": cell.get("metadata", {}),
                      **({"outputs": [], "execution_count": None}
                         if cell["cell_type"] == "code" else {})})
    return cells


def code_hash(cells: Sequence[dict[str, Any]]) -> str:
    """Changes when a code cell's id or source changes: the recorded truth is then stale."""
    h = hashlib.sha256()
    for c in cells:
        if c["cell_type"] == "code":
            h.update(c["id"].encode() + b"\0" + c["source"].encode() + b"\0")
    return h.hexdigest()[:16]


def earlier_code_ids(cells: Sequence[dict[str, Any]], selected: str) -> list[str]:
    """The code cells before the selected one, in notebook order."""
    out: list[str] = []
    for c in cells:
        if c["id"] == selected:
            return out
        if c["cell_type"] == "code":
            out.append(c["id"])
    raise KeyError(selected)


def normalise(text: str) -> str:
    text = _ADDRESS.sub("0x?", text)
    lines = [line.rstrip() for line in text.splitlines()]
    return "\n".join(lines).strip("\n")


@dataclass
class RunResult:
    outputs: dict[str, str]  # cell id -> normalised text output
    errors: dict[str, str] = field(default_factory=dict)  # cell id -> "ename: evalue"
    seconds: float = 0.0


def run_cells(cells: Sequence[tuple[str, str]], timeout: float = CELL_TIMEOUT_S) -> RunResult:
    """Run (id, source) pairs in order in one fresh python3 kernel; text output of each."""
    from jupyter_client.manager import start_new_kernel

    t0 = time.monotonic()
    env = dict(os.environ)
    env.pop("MPLBACKEND", None)  # the kernel's default: matplotlib-inline
    km, kc = start_new_kernel(kernel_name="python3", cwd=str(NOTEBOOKS), env=env,
                              stderr=subprocess.DEVNULL)  # its transport warnings
    outputs: dict[str, str] = {}
    errors: dict[str, str] = {}
    try:
        for cell_id, source in cells:
            parts: list[str] = []

            def hook(msg: dict[str, Any], parts: list[str] = parts, cell_id: str = cell_id) -> None:
                kind, content = msg["header"]["msg_type"], msg["content"]
                if kind == "stream" and content.get("name") == "stdout":
                    parts.append(content["text"])
                elif kind in ("execute_result", "display_data"):
                    text = content.get("data", {}).get("text/plain")
                    if text is not None:
                        parts.append(text + "\n")
                elif kind == "error":
                    errors[cell_id] = f"{content['ename']}: {content['evalue']}"
                    parts.append(f"ERROR {content['ename']}: {content['evalue']}\n")

            reply = kc.execute_interactive(source, output_hook=hook, timeout=timeout,
                                           allow_stdin=False, store_history=True)
            if reply["content"].get("status") == "error" and cell_id not in errors:
                c = reply["content"]
                errors[cell_id] = f"{c.get('ename')}: {c.get('evalue')}"
                parts.append(f"ERROR {c.get('ename')}: {c.get('evalue')}\n")
            outputs[cell_id] = normalise("".join(parts))
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    return RunResult(outputs, errors, time.monotonic() - t0)


def run_subset(cells: Sequence[dict[str, Any]], ids: Sequence[str] | set[str], selected: str
               ) -> RunResult:
    """The code cells in `ids` (notebook order), then the selected cell, in a fresh kernel."""
    keep = set(ids) | {selected}
    pairs = []
    for c in cells:
        if c["cell_type"] == "code" and c["id"] in keep:
            pairs.append((c["id"], c["source"]))
        if c["id"] == selected:
            break
    return run_cells(pairs)


def full_run(cells: Sequence[dict[str, Any]], selected: str) -> RunResult:
    """Every code cell up to and including the selected one (the notebooks end there)."""
    return run_subset(cells, earlier_code_ids(cells, selected), selected)


# --- slicers -----------------------------------------------------------------------------------

SliceFn = Callable[..., Any]


def load_slicer(module: str | None = None, before: str | None = None) -> tuple[SliceFn, str]:
    """`slice_cells` from the working tree, from a module path, or as committed at `before`."""
    if before:
        module = _committed_slicer(before)
    name = module or SLICER_PACKAGE
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    mod = importlib.import_module(name)
    return mod.slice_cells, name


def _committed_slicer(rev: str) -> str:
    """Copy the slicer package as committed at `rev` into a temp package, imports rewritten
    (its modules import each other as ``jupyter_costguard.offload.slicing.*``)."""
    rel = SLICER_PACKAGE.replace(".", "/")
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", rev], check=True,
                            capture_output=True, text=True).stdout.strip()
    names = subprocess.run(["git", "-C", str(REPO), "ls-tree", "--name-only", commit, rel + "/"],
                           check=True, capture_output=True, text=True).stdout.split()
    pkg = f"costguard_slicer_head_{commit[:10]}"
    root = Path(tempfile.mkdtemp(prefix="slicer-before-"))
    (root / pkg).mkdir()
    for path in names:
        if not path.endswith(".py"):
            continue
        text = subprocess.run(["git", "-C", str(REPO), "show", f"{commit}:{path}"], check=True,
                              capture_output=True, text=True).stdout
        (root / pkg / Path(path).name).write_text(text.replace(SLICER_PACKAGE, pkg))
    sys.path.insert(0, str(root))
    return pkg
