"""Which of the names a job's selected cells define the rest of the notebook reads: what is
worth bringing back from the job into the user's kernel.

A training loop leaves its scratch names behind (``epoch``, ``grad``, ``err``, ``f``, ``y``,
``ckpt``); bringing them all back would pickle them (a batch of tensors can be large) and
overwrite the user's variables of the same names for nothing. The names worth having are those
a later cell reads before it rebinds them: ``print(weights)`` after the training cell wants
``weights``, nothing else.

Later cells are every code cell after the first selected one that is not itself selected
(selected cells run in the job), in notebook order, with the slicer's own def/use analysis
(`CellAnalyser`, magics understood). A name a later cell surely rebinds before reading (``y =
...`` at its top level, outside any branch) is the user's own from there on, so cells after it
do not count for that name. A later cell reads a name when it loads it at module level, changes
it in place, or calls a function that reads it: a function's body counts as read by every cell
that names the function (the body may run then), and a cell that defines functions counts as
reading their free names. A later cell that does not parse (half-written) counts as reading each
of the names that appears in it as a word.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from jupyter_costguard.offload.slicing.analysis import CellAnalyser, CellNames, Effects
from jupyter_costguard.offload.slicing.ipython import transformer
from jupyter_costguard.offload.slicing.notebook import NotebookCell, check_cells
from jupyter_costguard.offload.slicing.result import SliceError
from jupyter_costguard.offload.slicing.state import NotebookState

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _analyse(e: NotebookCell, transform: Any, writers: dict[str, Effects],
             state: NotebookState | None = None) -> tuple[CellNames, set[str]] | None:
    """The cell's names and the free names of the functions it defines; None if it does not
    parse or cannot be analysed."""
    try:
        analyser = CellAnalyser(transform, writers, f"cell {e.index}", e.index, e.cell_id, state)
        names = analyser.run(transform(e.source))
    except (SliceError, RecursionError, MemoryError, ValueError, SyntaxError):
        return None
    return names, set(analyser.later)


def _is_code(e: NotebookCell, transform: Any) -> bool:
    """Whether a code cell holds a statement (blank or comment-only cells do not)."""
    if not e.source.strip():
        return False
    try:
        return bool(ast.parse(transform(e.source)).body)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return True  # something is there, if half-written


def follows(cells: Sequence[Mapping[str, Any]], selected: Iterable[str]) -> bool:
    """Whether a non-empty code cell comes after the last selected one."""
    entries = check_cells(cells)
    chosen = set(selected)
    last = max((e.index for e in entries if e.cell_id in chosen), default=-1)
    transform = transformer()
    return any(e.cell_type == "code" and _is_code(e, transform) for e in entries[last + 1:])


def used_later(cells: Sequence[Mapping[str, Any]], selected: Iterable[str],
               names: Iterable[str]) -> tuple[str, ...]:
    """Those of `names` (what the selected cells define) that a cell after the first
    selected one, not itself selected, reads (see the module's docstring), sorted."""
    entries = check_cells(cells)
    chosen = set(selected)
    first = min((e.index for e in entries if e.cell_id in chosen), default=len(entries))
    pending, used = set(names), set()
    transform = transformer()
    state = NotebookState.for_sources([e.source for e in entries if e.cell_type == "code"])
    writers = state.writers
    #: name bound by a cell -> free names of the functions that cell defines
    lazy: dict[str, set[str]] = {}

    def reads(direct: set[str]) -> set[str]:
        """`direct` and, transitively, the free names of the functions it names."""
        out, todo = set(), list(direct)
        while todo:
            name = todo.pop()
            if name in out:
                continue
            out.add(name)
            todo.extend(lazy.get(name, ()))
        return out

    for e in entries:
        if e.cell_type != "code":
            continue
        found = _analyse(e, transform, writers, state)
        later = e.index > first and e.cell_id not in chosen
        if found is None:
            if later:  # half-written: any name it spells may be read
                used |= pending & reads(set(_WORD.findall(e.source)))
            continue
        cell, free = found
        if later:
            direct = cell.hard | cell.soft | cell.maybe | cell.late | cell.mutates | free
            used |= pending & reads(direct)
            pending -= cell.definite - cell.mutates  # surely rebound: the user's from here on
        for name in cell.binds:
            lazy[name] = free
    return tuple(sorted(used))
