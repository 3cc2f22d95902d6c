"""The warnings of a slice: the caveats the analysis found in each cell up to the last selected
one, said in relation to the slice (whether the cell is in the job, whether the job reads what
an excluded cell may have written)."""

from __future__ import annotations

from collections.abc import Sequence

from jupyter_costguard.offload.slicing.analysis import CellNames
from jupyter_costguard.offload.slicing.caveats import first_line
from jupyter_costguard.offload.slicing.notebook import NotebookCell

#: Caveats that matter only in relation to other cells.
_STAR, _COMPUTED_WRITE, _COMPUTED_READ = "star-import", "computed-write", "computed-read"


def slice_warnings(analysed: Sequence[tuple[NotebookCell, str, CellNames]], picked: set[int]
                   ) -> list[str]:
    """The warnings of a slice: per cell up to the last selected one, in notebook order."""
    reads_computed = any(
        _COMPUTED_READ in names.caveats for e, _, names in analysed if e.index in picked
    )
    out: list[str] = []
    for e, _, names in analysed:
        included = e.index in picked
        label = f'cell "{first_line(e.source)}"'
        for why in names.caveats:
            if why == _COMPUTED_READ:
                continue
            if why == _STAR:
                if included:
                    out.append(f"{label}: a star import brings in names that are not known")
                continue
            if why == _COMPUTED_WRITE:
                if not included and reads_computed:
                    out.append(
                        f"{label}: writes a file whose path is computed and is not in the job;"
                        " select it too if the job reads that file"
                    )
                continue
            where = "in the job" if included else "not in the job; select it too if it matters"
            out.append(f"{label}: {why} ({where})")
    return out
