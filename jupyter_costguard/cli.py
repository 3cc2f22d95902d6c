"""`jupyter costguard …`: the catalog, a spend report from the ledger, and config help."""

from __future__ import annotations

import argparse
import sqlite3
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jupyter_costguard.cost.catalog import Catalog, CatalogError
from jupyter_costguard.cost.ledger import default_db_path


def _catalog(args: argparse.Namespace) -> int:
    try:
        catalog = Catalog.load(args.catalog_file or ())
    except CatalogError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rows = [r for r in catalog.rows
            if (not args.provider or r.provider == args.provider) and (not args.gpu or r.is_gpu)]
    print(f"{'provider':<10} {'instance type':<34} {'GPUs':<28} {'vCPU':>5} {'RAM GiB':>8} "
          f"{'on-demand/h':>12} {'spot/h':>8}  retrieved")
    for r in sorted(rows, key=lambda r: (r.provider, r.on_demand_per_hour)):
        gpus = f"{r.gpu_count}× {r.gpu_model}" if r.gpu_count else "-"
        spot = f"{r.spot_per_hour:.2f}" if r.spot_per_hour is not None else "-"
        print(f"{r.provider:<10} {r.instance_type:<34} {gpus[:28]:<28} {r.vcpus:>5} "
              f"{r.memory_gib:>8g} {r.currency} {r.on_demand_per_hour:>8.2f} {spot:>8}  "
              f"{r.retrieved or '-'}")
    return 0


def _report(args: argparse.Namespace) -> int:
    db = Path(args.db)
    if not db.exists():
        print(f"error: no ledger at {db} (set --db, or run the server with costguard first)",
              file=sys.stderr)
        return 2
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    server = con.execute("SELECT spend, waste, unattributed, seconds FROM server").fetchone()
    rows = con.execute(
        "SELECT path, SUM(spend), SUM(waste), COUNT(*) FROM consumer WHERE path != ''"
        " GROUP BY path ORDER BY SUM(spend) DESC LIMIT ?", (args.top,)).fetchall()
    con.close()
    if server:
        spend, waste, unattributed, seconds = server
        print(f"server: spent {spend:.2f} over {seconds / 3600:.1f} h sampled; "
              f"waste {waste:.2f}; unattributed {unattributed:.2f}")
    print(f"{'notebook':<50} {'spend':>10} {'waste':>10} {'kernels':>8}")
    for path, spend, waste, kernels in rows:
        print(f"{path[:50]:<50} {spend:>10.4f} {waste:>10.4f} {kernels:>8}")
    return 0


def _own_options(app: Any) -> dict[str, Any]:
    """The options costguard adds (those the parts mix into CostGuard), not ExtensionApp's."""
    from jupyter_server.extension.application import ExtensionApp

    inherited = ExtensionApp.class_traits(config=True)
    return {n: t for n, t in app.class_traits(config=True).items() if n not in inherited}


def _help_all(_: argparse.Namespace) -> int:
    from jupyter_costguard.app import CostGuard

    print("c.CostGuard options (set them in jupyter_server_config.py):\n")
    for _name, trait in sorted(_own_options(CostGuard).items()):
        print(CostGuard.class_get_trait_help(trait))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="jupyter costguard", description=__doc__)
    parser.add_argument("--help-all", action="store_true",
                        help="print every c.CostGuard option with its help and default")
    sub = parser.add_subparsers(dest="command")
    cat = sub.add_parser("catalog", help="list the instance catalog")
    cat.add_argument("--provider", help="only this provider (aws, gcp, azure, …)")
    cat.add_argument("--gpu", action="store_true", help="only GPU instances")
    cat.add_argument("--catalog-file", action="append", help="extra catalog file(s)")
    cat.set_defaults(func=_catalog)
    rep = sub.add_parser("report", help="spend per notebook from the ledger")
    rep.add_argument("--db", default=default_db_path(), help="ledger file (default: %(default)s)")
    rep.add_argument("--top", type=int, default=20, help="how many notebooks")
    rep.set_defaults(func=_report)
    args = parser.parse_args(argv)
    if args.help_all:
        return _help_all(args)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
