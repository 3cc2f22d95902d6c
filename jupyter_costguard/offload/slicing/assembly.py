"""The slice itself: walk back from the last selected cell, pulling in the earlier cells that
define what the cells already in need, until nothing new is needed."""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from jupyter_costguard.offload.slicing.analysis import CellAnalyser, CellNames
from jupyter_costguard.offload.slicing.ipython import transformer
from jupyter_costguard.offload.slicing.notebook import NotebookCell, check_cells
from jupyter_costguard.offload.slicing.notices import slice_warnings
from jupyter_costguard.offload.slicing.result import Slice, SlicedCell, SliceError
from jupyter_costguard.offload.slicing.state import NotebookState, is_pseudo, setup_of, shown

#: Names the job's interpreter or IPython provides; never reported as unresolved.
_PROVIDED = frozenset(dir(builtins)) | frozenset(
    {"__builtins__", "__class__", "get_ipython", "In", "Out", "exit", "quit", "display"}
    | {"_", "__", "___", "_i", "_ii", "_iii", "_ih", "_oh", "_dh"}
)


def _brief(ex: BaseException) -> str:
    if isinstance(ex, MemoryError) and not str(ex):
        return "the parser ran out of room (code nested or chained too deeply)"
    text = str(ex) or "no detail"
    return text if len(text) <= 200 else text[:200] + "..."


def _reason(names: CellNames, provides: set[str], starred: set[str]) -> str:
    """Why a cell that was not selected is in the slice, in words the user can check."""
    parts = [f"from {module} import *" for module in names.stars] if starred else []
    if starred:
        parts[-1] += f" (may provide {', '.join(sorted(starred))})"
    state = {p for p in provides if is_pseudo(p) and not p.startswith("<setup:")}
    provides = {shown(p) for p in provides - state}
    defined = sorted(provides & names.binds)
    imported = sorted((provides & names.imports) - names.binds)
    changed = sorted(provides - names.binds - names.imports)
    for verb, group in (("imports", imported), ("defines", defined), ("changes", changed)):
        if group:
            parts.append(f"{verb} {', '.join(group)}")
    written = sorted(p[len("<file:"):-1] for p in state if p.startswith("<file:"))
    if written:
        parts.append(f"writes {', '.join(written)}")
    if "<cwd>" in state:
        parts.append("changes the working directory")
    if "<sys>" in state:
        parts.append("changes sys.path or sys.modules")
    generators = sorted(p[len("<rng:"):-1] for p in state if p.startswith("<rng:"))
    if generators:
        parts.append(f"seeds or draws from the global random generator of {', '.join(generators)}")
    return "; ".join(parts)


def slice_cells(
    cells: Sequence[Mapping[str, Any]], selected: Sequence[str], given: Iterable[str] = ()
) -> Slice:
    """The selected cells plus the earlier code cells they need, transitively, in order.

    `given` names are sent into the job by value, so no cell is pulled in just to define them.
    Cells after the last selected one are not looked at (not even parsed).
    """
    if isinstance(selected, str):
        raise SliceError("selected must be a list of cell ids, not a single string")
    wanted = list(dict.fromkeys(selected))
    if not wanted:
        raise SliceError("no cells selected")
    entries = check_cells(cells)
    by_id = {e.cell_id: e for e in entries}
    for cell_id in wanted:
        entry = by_id.get(cell_id)
        if entry is None:
            raise SliceError(f"no cell with id {cell_id!r} in the notebook", cell_id=cell_id)
        if entry.cell_type != "code":
            raise SliceError(
                f"cell {entry.index} (id {cell_id}) is a {entry.cell_type} cell, not code",
                cell_id,
                entry.index,
            )
    last = max(by_id[c].index for c in wanted)

    transform = transformer()

    analysed = []
    head = [e for e in entries[: last + 1] if e.cell_type == "code"]
    state = NotebookState.for_sources([e.source for e in head])
    for e in head:
        if e.cell_type == "code":
            where = f"cell {e.index} (id {e.cell_id})"
            try:
                code = transform(e.source)
                analyser = CellAnalyser(transform, state.writers, where, e.index, e.cell_id, state)
                names = analyser.run(code)
            except SliceError:
                raise
            except Exception as ex:  # RecursionError, MemoryError, ValueError, ...
                # pathological code (`lambda: ` * 3000, `+1` * 100000, ...) exhausts the
                # parser or the analysis: the request's fault, not the server's
                raise SliceError(
                    f"{where} cannot be analysed: {type(ex).__name__}: {_brief(ex)}",
                    e.cell_id,
                    e.index,
                ) from None
            analysed.append((e, code, names))

    givens, chosen = frozenset(given) | {setup_of(g) for g in given}, set(wanted)
    late: set[str] = set()
    while True:  # until the functions pulled in need no new names
        picked, defines, unresolved = _walk(analysed, chosen, givens, late)
        more = set().union(*(n.late for e, _, n in analysed if e.index in picked)) - late
        if not more:
            break
        late |= more
    return Slice(
        cells=tuple(picked.values())[::-1],
        defines=tuple(sorted(defines)),
        unresolved=tuple(sorted({shown(n) for n in unresolved if not is_pseudo(shown(n))})),
        warnings=tuple(slice_warnings(analysed, set(picked))),
    )


def _walk(
    analysed: list[tuple[NotebookCell, str, CellNames]],
    chosen: set[str],
    givens: frozenset[str],
    late: set[str],
) -> tuple[dict[int, SlicedCell], set[str], set[str]]:
    """Walk back from the last selected cell, pulling in cells that define what is needed.

    `late` names are used by functions in the slice; a function runs when it is called, which
    may be as late as the last selected cell, so they count as that cell's uses.
    """
    hard: set[str] = set()
    soft: set[str] = set()
    picked: dict[int, SlicedCell] = {}
    defines: set[str] = set()
    modules: set[str] = set()  # imported and never bound otherwise: `time.sleep()` is no result
    bound: set[str] = set()
    for e, code, names in reversed(analysed):  # the first one is the last selected cell
        provides = names.provides_all & (hard | soft)
        is_selected = e.cell_id in chosen
        star = bool(names.stars) and not is_selected and bool(hard - _PROVIDED)
        if not (is_selected or provides or star):
            continue
        maybe_starred = hard - _PROVIDED if star else set()
        reason = "selected" if is_selected else _reason(names, provides, maybe_starred)
        shown_provides = tuple(sorted({shown(p) for p in provides}))
        picked[e.index] = SlicedCell(
            e.index, e.cell_id, e.source, code, is_selected, shown_provides, reason
        )
        if is_selected:
            defines |= names.results
        modules |= names.imports
        bound |= names.binds
        # a name this cell binds only maybe (in a branch or loop) keeps its earlier binding
        # alive only if a cell after it reads it (a loop may run zero times)
        kept = names.maybe & (hard | soft)
        hard = (hard - names.provides_all - maybe_starred) | names.hard  # maybe-bound: now soft
        if len(picked) == 1:
            hard |= late
        soft = (soft - names.definite) | names.soft | maybe_starred | kept
        hard -= givens
        soft -= givens | hard
    return picked, defines - (modules - bound), hard - _PROVIDED - givens
