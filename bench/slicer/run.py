"""How precise is costguard's slicer on real notebooks?  (issue 15, item 4)

For every notebook of bench/slicer/manifest.json: slice it for its selected cell with
`slice_cells` (the cells as the frontend sends them), compare the earlier cells the slice
includes with the cells the selected cell truly needs (recorded in the manifest, found by
running: see truth.py), then run the notebook in full and the slice + selected cell, each in a
fresh kernel, and compare the selected cell's text output.

Prints a table per notebook and the totals:
  recall          needed cells the slice included / needed cells            (target 100 %)
  unneeded share  included earlier cells that were not needed / included     (target <= 15 %)
  reproduced      notebooks whose slice + selected cell gave the full run's output (target all)

    .venv/bin/python bench/slicer/run.py                     # the working tree's slicer
    .venv/bin/python bench/slicer/run.py --before            # the slicer committed at git HEAD
    .venv/bin/python bench/slicer/run.py --before bc96341    # ... or at any commit
    .venv/bin/python bench/slicer/run.py --slicer-module pkg # any module with slice_cells
    .venv/bin/python bench/slicer/run.py --json out.json     # also write every figure
    .venv/bin/python bench/slicer/run.py --no-exec           # set comparison only (seconds)
    .venv/bin/python bench/slicer/run.py --recompute-truth   # redo the ground truth first

It is a measurement: the exit status is 0 whatever the numbers (non-zero only on a crash).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import slicebench as sb
import truth


def measure(entry: dict[str, Any], slice_fn: Any, execute: bool) -> dict[str, Any]:
    cells = sb.read_notebook(entry)
    selected = entry["selected"]
    earlier = sb.earlier_code_ids(cells, selected)
    needed = list(entry["needed"])
    row: dict[str, Any] = {"name": entry["name"], "earlier": len(earlier), "needed": needed,
                           "truth_stale": truth.stale(entry)}
    try:
        result = slice_fn(cells, [selected])
    except Exception as e:  # a SliceError is a result too: nothing can be sent
        row.update(slice_error=f"{type(e).__name__}: {e}", included=[], reasons={},
                   unresolved=[])
    else:
        row["included"] = [c.cell_id for c in result.cells if not c.selected]
        row["reasons"] = {c.cell_id: c.reason for c in result.cells if not c.selected}
        row["unresolved"] = list(result.unresolved)
    inc = set(row["included"])
    row["found"] = [c for c in needed if c in inc]
    row["missed"] = [c for c in needed if c not in inc]
    row["unneeded"] = [c for c in row["included"] if c not in set(needed)]
    if execute:
        full = sb.full_run(cells, selected)
        part = sb.run_subset(cells, row["included"], selected) if "slice_error" not in row \
            else None
        row["full_output"] = full.outputs.get(selected)
        row["full_matches_truth"] = row["full_output"] == entry.get("truth_output")
        row["slice_output"] = part.outputs.get(selected) if part else None
        row["slice_errors"] = part.errors if part else {}
        row["output_match"] = part is not None and row["slice_output"] == row["full_output"]
        row["seconds"] = round(full.seconds + (part.seconds if part else 0), 1)
    return row


def totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    needed = sum(len(r["needed"]) for r in rows)
    found = sum(len(r["found"]) for r in rows)
    included = sum(len(r["included"]) for r in rows)
    unneeded = sum(len(r["unneeded"]) for r in rows)
    out: dict[str, Any] = {
        "notebooks": len(rows), "earlier_cells": sum(r["earlier"] for r in rows),
        "needed": needed, "found": found, "included": included, "unneeded": unneeded,
        "recall": found / needed if needed else 1.0,
        "unneeded_share": unneeded / included if included else 0.0,
        "complete_slices": sum(1 for r in rows if not r["missed"]),
    }
    if rows and "output_match" in rows[0]:
        out["reproduced"] = sum(1 for r in rows if r["output_match"])
        out["full_runs_matching_truth"] = sum(1 for r in rows if r["full_matches_truth"])
    return out


def show(rows: list[dict[str, Any]], tot: dict[str, Any], slicer: str) -> None:
    execd = "output_match" in (rows[0] if rows else {})
    print(f"slicer: {slicer}")
    head = f"{'notebook':40} {'earlier':>7} {'needed':>6} {'incl':>5} {'found':>5} {'unneed':>6}"
    print(head + ("  output" if execd else ""))
    for r in rows:
        line = (f"{r['name'][:40]:40} {r['earlier']:>7} {len(r['needed']):>6} "
                f"{len(r['included']):>5} {len(r['found']):>5} {len(r['unneeded']):>6}")
        if execd:
            line += "  " + ("same" if r["output_match"] else "DIFFERS")
            if not r["full_matches_truth"]:
                line += " (full run != recorded truth)"
        print(line)
    for r in rows:
        notes = []
        if r.get("slice_error"):
            notes.append(f"slice error: {r['slice_error']}")
        if r["missed"]:
            notes.append("missed " + ", ".join(r["missed"]))
        if r["unneeded"]:
            notes.append("unneeded " + "; ".join(f"{c} ({r['reasons'].get(c, '')})"
                                                 for c in r["unneeded"]))
        if r["truth_stale"]:
            notes.append("truth is stale (notebook changed): run with --recompute-truth")
        if notes:
            print(f"  {r['name']}: " + " | ".join(notes))
    print(f"recall {tot['found']}/{tot['needed']} = {tot['recall']:.1%}   "
          f"unneeded share {tot['unneeded']}/{tot['included']} = {tot['unneeded_share']:.1%}   "
          f"complete slices {tot['complete_slices']}/{tot['notebooks']}"
          + (f"   reproduced {tot['reproduced']}/{tot['notebooks']}" if execd else ""))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", metavar="OUT", help="write per-notebook rows and totals here")
    ap.add_argument("--slicer-module", metavar="MODULE",
                    help=f"module providing slice_cells (default {sb.SLICER_PACKAGE})")
    ap.add_argument("--before", nargs="?", const="HEAD", metavar="REV",
                    help="measure the slicer as committed at REV (default HEAD), copied to a "
                         "temp package: the slicer before uncommitted work")
    ap.add_argument("--no-exec", action="store_true", help="skip running the notebooks")
    ap.add_argument("--recompute-truth", action="store_true",
                    help="recompute the ground truth (truth.py --all) before measuring")
    ap.add_argument("--only", nargs="*", metavar="PREFIX", help="notebook name prefixes")
    args = ap.parse_args()

    if args.recompute_truth:
        truth.recompute(args.only or None, everything=True)
    slice_fn, slicer = sb.load_slicer(args.slicer_module, before=args.before)
    manifest = sb.load_manifest()
    rows = []
    t0 = time.monotonic()
    for entry in manifest["notebooks"]:
        if args.only and not any(entry["name"].startswith(p) for p in args.only):
            continue
        if entry.get("needed") is None:
            print(f"skipping {entry['name']}: no ground truth (run truth.py)", file=sys.stderr)
            continue
        rows.append(measure(entry, slice_fn, execute=not args.no_exec))
        print(f"  measured {entry['name']}", file=sys.stderr, flush=True)
    tot = totals(rows)
    tot["seconds"] = round(time.monotonic() - t0, 1)
    show(rows, tot, slicer)
    if args.json:
        Path(args.json).write_text(json.dumps({"slicer": slicer, "totals": tot, "notebooks": rows},
                                              indent=1, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
