"""Ground truth for the slicer bench: which earlier code cells the selected cell truly needs.

"Needs" is checked by running: a set of earlier cells is *sufficient* when running those cells
and then the selected cell in a fresh kernel gives the selected cell the same text output as
the full run (see slicebench.normalise).  The recorded set is found greedily: start from all
earlier code cells and try dropping each one, from the last to the first, keeping a drop when
the output still matches.  The result is a minimal sufficient set found greedily -- no single
cell of it can be dropped -- not necessarily the smallest one, and "same output" is the only
criterion (a cell whose effect does not show in the selected cell's text is not needed), with
one condition: no cell of the trial may raise.  Slices are whole cells, so a cell that is kept
needs what it uses even where the selected cell would not notice (a needed import cell whose
next line reads a name another cell defines: without that cell the import still happens and the
selected cell's output still matches, but the job would fail).

Before minimising, the full run is done twice and must give the same output with no error in
any cell; a notebook whose output is not reproducible is rejected.

    .venv/bin/python bench/slicer/truth.py              # every notebook whose truth is stale
    .venv/bin/python bench/slicer/truth.py --all        # recompute all
    .venv/bin/python bench/slicer/truth.py 03-cross     # names starting with these
    .venv/bin/python bench/slicer/truth.py --check      # rerun each recorded set: which
                                                        # raise or do not reproduce (then
                                                        # recompute those by name)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import slicebench as sb


class TruthError(RuntimeError):
    pass


def minimise(entry: dict[str, Any], log: Any = print) -> dict[str, Any]:
    """Recompute `needed`, `truth_output` and `source_hash` of one manifest entry."""
    cells = sb.read_notebook(entry)
    selected = entry["selected"]
    earlier = sb.earlier_code_ids(cells, selected)
    t0 = time.monotonic()
    first, second = sb.full_run(cells, selected), sb.full_run(cells, selected)
    if first.errors:
        raise TruthError(f"{entry['name']}: the full run raised: {first.errors}")
    truth = first.outputs[selected]
    if truth != second.outputs[selected]:
        raise TruthError(f"{entry['name']}: the selected cell's output differs between two "
                         f"full runs:\n{truth}\n---\n{second.outputs[selected]}")
    if not truth:
        raise TruthError(f"{entry['name']}: the selected cell has no text output")
    needed = list(earlier)
    runs = 2
    for cell_id in reversed(earlier):
        trial = [c for c in needed if c != cell_id]
        result = sb.run_subset(cells, trial, selected)
        runs += 1
        if not result.errors and result.outputs.get(selected) == truth:
            needed = trial
    # the greedy result must itself reproduce (it does by construction; check once more)
    check = sb.run_subset(cells, needed, selected)
    if check.errors or check.outputs.get(selected) != truth:
        raise TruthError(f"{entry['name']}: the minimised set does not reproduce on a rerun")
    entry.update(needed=needed, truth_output=truth, source_hash=sb.code_hash(cells),
                 truth_runs=runs + 1, truth_seconds=round(time.monotonic() - t0, 1))
    log(f"{entry['name']}: {len(needed)}/{len(earlier)} earlier code cells needed: "
        f"{', '.join(needed) or '-'}  ({runs + 1} runs, {entry['truth_seconds']} s)")
    return entry


def stale(entry: dict[str, Any]) -> bool:
    if entry.get("needed") is None or entry.get("truth_output") is None:
        return True
    return entry.get("source_hash") != sb.code_hash(sb.read_notebook(entry))


def recompute(names: list[str] | None = None, everything: bool = False) -> list[str]:
    """Recompute the truth of the chosen notebooks, save the manifest; the names that failed."""
    manifest = sb.load_manifest()
    failed = []
    for entry in manifest["notebooks"]:
        if names and not any(entry["name"].startswith(n) for n in names):
            continue
        if not (everything or names or stale(entry)):
            continue
        try:
            minimise(entry)
        except TruthError as e:
            print(f"REJECTED {e}", file=sys.stderr)
            failed.append(entry["name"])
        sb.save_manifest(manifest)
    return failed


def check(names: list[str] | None = None) -> list[str]:
    """Rerun each recorded set with its selected cell; the names whose set raised or did not
    reproduce the recorded output (their truth is then stale under the rule above)."""
    out = []
    for entry in sb.load_manifest()["notebooks"]:
        if names and not any(entry["name"].startswith(n) for n in names):
            continue
        cells = sb.read_notebook(entry)
        result = sb.run_subset(cells, entry["needed"], entry["selected"])
        ok = not result.errors and result.outputs.get(entry["selected"]) == entry["truth_output"]
        why = result.errors or "output differs"
        print(f"{entry['name']}: " + ("ok" if ok else f"STALE {why}"), flush=True)
        if not ok:
            out.append(entry["name"])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="notebook name prefixes (default: stale ones)")
    ap.add_argument("--all", action="store_true", help="recompute every notebook")
    ap.add_argument("--check", action="store_true",
                    help="rerun the recorded sets; say which raise or differ")
    args = ap.parse_args()
    if args.check:
        return 1 if check(args.names or None) else 0
    failed = recompute(args.names or None, args.all)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
