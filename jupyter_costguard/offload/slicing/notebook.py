"""The cells the frontend sends (unsaved edits included), checked and normalised."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jupyter_costguard.offload.slicing.result import SliceError


@dataclass(frozen=True)
class NotebookCell:
    """One notebook cell as the slicer reads it."""

    index: int
    cell_id: str
    cell_type: str
    source: str


def check_cells(cells: Sequence[Mapping[str, Any]]) -> list[NotebookCell]:
    """The frontend's cells, checked and normalised into what the slicer reads; a missing id
    becomes `#<index>`. Raises `SliceError` naming the first bad cell."""
    out: list[NotebookCell] = []
    seen: set[str] = set()
    for index, cell in enumerate(cells):
        if not isinstance(cell, Mapping):
            raise SliceError(f"cell {index} is not an object", index=index)
        cell_type, cell_id, source = cell.get("cell_type"), cell.get("id"), cell.get("source", "")
        cell_id = f"#{index}" if cell_id in (None, "") else cell_id
        if not isinstance(cell_id, str):
            raise SliceError(f"cell {index} has an id that is not a string", index=index)
        if not isinstance(cell_type, str):
            raise SliceError(f"cell {index} (id {cell_id}) has no cell_type", cell_id, index)
        if isinstance(source, list) and all(isinstance(line, str) for line in source):
            source = "".join(source)
        if not isinstance(source, str):
            raise SliceError(f"cell {index} (id {cell_id}) has a bad source", cell_id, index)
        if cell_id in seen:
            raise SliceError(f"cell id {cell_id!r} appears twice in the notebook", cell_id, index)
        seen.add(cell_id)
        out.append(NotebookCell(index, cell_id, cell_type, source))
    return out
