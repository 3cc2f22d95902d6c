"""What the slicer returns (the cells a job runs, and why each is there) and what it raises."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class SliceError(ValueError):
    """Bad input to the slicer; `cell_id`/`index` name the offending cell when there is one."""

    def __init__(self, message: str, cell_id: str | None = None, index: int | None = None) -> None:
        super().__init__(message)
        self.cell_id = cell_id
        self.index = index


@dataclass(frozen=True)
class SlicedCell:
    """One cell of the slice, with why it is there so the user can check the choice."""

    index: int  # position in the notebook's cell list, markdown cells included
    cell_id: str
    source: str  # as the user wrote it
    code: str  # after IPython's transformations: what the job runs
    selected: bool
    provides: tuple[str, ...]  # names later included cells need from it (sorted)
    reason: str  # e.g. "selected", "imports np", "defines df; changes model"


@dataclass(frozen=True)
class Slice:
    """The cells a job must run, in notebook order, and what the caller needs to know about them."""

    cells: tuple[SlicedCell, ...]
    defines: tuple[str, ...]  # names the selected cells bind: the natural results to bring back
    unresolved: tuple[str, ...]  # names used that no included cell, builtin or `given` provides
    #: where the slicer could not decide (exec, %run, computed file paths...), per cell
    warnings: tuple[str, ...] = ()

    @property
    def code(self) -> str:
        """One script, each cell headed by a comment so tracebacks can be traced to cells."""
        parts = []
        for cell in self.cells:
            body = cell.code if cell.code.endswith("\n") or not cell.code else cell.code + "\n"
            cell_id = " ".join(cell.cell_id.splitlines())  # an id must not end the comment
            parts.append(f"# cell {cell.index} (id {cell_id})\n{body}")
        return "".join(parts)

    def to_json(self) -> dict[str, Any]:
        """What the frontend shows before the job is submitted (`warnings` only when some)."""
        doc: dict[str, Any] = {
            "cells": [
                {
                    "index": c.index,
                    "cell_id": c.cell_id,
                    "selected": c.selected,
                    "provides": list(c.provides),
                    "reason": c.reason,
                    "source": c.source,
                }
                for c in self.cells
            ],
            "defines": list(self.defines),
            "unresolved": list(self.unresolved),
        }
        if self.warnings:  # absent when there are none, as in documents stored before
            doc["warnings"] = list(self.warnings)
        return doc
