"""`jupyter costguard …`: the catalog and its refresh, what pricing the server would decide, a
spend report from the ledger, and config help."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jupyter_costguard.cost.catalog import Catalog, CatalogError
from jupyter_costguard.cost.ledger import default_db_path, read_report


def _catalog(args: argparse.Namespace) -> int:
    from jupyter_costguard.cost.refresh import read_fetched, user_catalog_files

    user = user_catalog_files()
    try:
        catalog = Catalog.load(user + tuple(args.catalog_file or ()))
    except CatalogError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for path in user:
        print(f"# with the refreshed catalog {path} (fetched {read_fetched(Path(path)) or '?'})")
    rows = [r for r in catalog.rows
            if (not args.provider or r.provider == args.provider) and (not args.gpu or r.is_gpu)
            and (not args.region or r.region == args.region)]
    print(f"{'provider':<10} {'instance type':<34} {'region':<16} {'GPUs':<28} {'vCPU':>5} "
          f"{'RAM GiB':>8} {'on-demand/h':>12} {'spot/h':>8}  retrieved")
    for r in sorted(rows, key=lambda r: (r.provider, r.on_demand_per_hour, r.region)):
        gpus = f"{r.gpu_count}× {r.gpu_model}" if r.gpu_count else "-"
        spot = f"{r.spot_per_hour:.2f}" if r.spot_per_hour is not None else "-"
        print(f"{r.provider:<10} {r.instance_type:<34} {(r.region or '-')[:16]:<16} "
              f"{gpus[:28]:<28} {r.vcpus:>5} {r.memory_gib:>8g} {r.currency} "
              f"{r.on_demand_per_hour:>8.2f} {spot:>8}  {r.retrieved or '-'}")
    return 0


def _catalog_update(args: argparse.Namespace) -> int:
    from jupyter_costguard.cost.refresh import RefreshError, update_catalog

    try:
        r = update_catalog(Path(args.output) if args.output else None,
                           providers=args.provider or None, timeout=args.timeout)
    except RefreshError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {r.rows} rows ({', '.join(r.providers)}) to {r.path}, fetched {r.fetched} "
          f"from {r.catalog_url}")
    if r.skipped:
        print(f"skipped {r.skipped} offers: "
              + ", ".join(f"{n} {why}" for why, n in r.skip_reasons.items()))
    for provider, why in r.failed.items():
        print(f"warning: {provider} not loaded: {why}", file=sys.stderr)
    if not args.output:
        print("the server and `jupyter costguard detect` load it on top of the shipped "
              "catalog (restart the server to use it)")
    return 0


def _server_config(paths: Sequence[str]) -> Any:
    """The Jupyter server's configuration as the server would read it (each folder of its
    config path, lowest priority first: `jupyter_server_config.d/*.json`, where installed
    packages put theirs, then `jupyter_server_config.json` and `.py`; then any --config file),
    so `detect` decides with the same c.CostGuard settings."""
    from jupyter_core.paths import jupyter_config_path
    from traitlets.config import Config
    from traitlets.config.loader import JSONFileConfigLoader, PyFileConfigLoader

    config = Config()
    files: list[tuple[str, str]] = []
    for d in reversed(jupyter_config_path()):
        drop_in = Path(d) / "jupyter_server_config.d"
        if drop_in.is_dir():
            files += [(str(drop_in), f.name) for f in sorted(drop_in.glob("*.json"))]
        files += [(d, f"jupyter_server_config{ext}") for ext in (".json", ".py")]
    files += [(str(Path(p).parent), Path(p).name) for p in paths]
    for folder, name in files:
        if not (Path(folder) / name).is_file():
            continue
        loader = (JSONFileConfigLoader if name.endswith(".json") else PyFileConfigLoader)(
            name, path=folder)
        config.merge(loader.load_config())
    return config


def _detect(args: argparse.Namespace) -> int:
    from traitlets.config import Configurable

    from jupyter_costguard.cloud.container import read_cgroup_limits
    from jupyter_costguard.cloud.metadata import lookup
    from jupyter_costguard.cost.config import CostTraits
    from jupyter_costguard.cost.pricedoc import price_doc
    from jupyter_costguard.cost.pricing import ContainerFacts
    from jupyter_costguard.cost.service import decide_pricing, dmi_provider, load_catalog
    from jupyter_costguard.sampling.sources import SamplingTraits
    from jupyter_costguard.sampling.telemetry import Telemetry

    class CostGuard(Configurable, CostTraits, SamplingTraits):
        """The server extension's pricing and sampling options (`c.CostGuard.*`), without
        the server: so detect starts in a fraction of a second."""

    app = CostGuard(config=_server_config(args.config or ()))
    config = app.pricing_config()
    try:
        catalog = load_catalog(config)
    except CatalogError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    started = time.monotonic()
    answer = lookup(timeout=app.cloud_metadata_timeout, enabled=app.cloud_metadata)
    source = app.gpu_source()
    try:
        sample = Telemetry(source).sample([])
    finally:
        source.close()
    pricing = decide_pricing(
        config, catalog, sample, environ=dict(os.environ),
        simulated_type=getattr(source, "instance_type", None), provider=dmi_provider(),
        metadata=answer, container=ContainerFacts(read_cgroup_limits(),
                                                  mode=app.container_share))
    i = pricing.instance
    share = pricing.share
    # what the server's status says of the price (`status.price`), and the rate beside it
    doc = {
        **price_doc(pricing, time.time(), config.stale_after_days),
        "rate_per_hour": pricing.rate_per_hour, "currency": pricing.currency,
        "source": pricing.source, "price_date": i.retrieved if i else None,
        "price_source_url": (i.source_url or i.origin) if i else None,
        "gpu_share": pricing.gpu_share, "detail": pricing.detail,
        "seconds": round(time.monotonic() - started, 3),
    }
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    rate = (f"{pricing.rate_per_hour:.4g} {pricing.currency}/h"
            if pricing.rate_per_hour is not None else "unpriced")
    print(f"rate:      {rate} ({pricing.source})")
    for key in ("provider", "instance_type", "region", "market", "price_date"):
        print(f"{key + ':':<10} {doc[key] if doc[key] is not None else '-'}")
    if pricing.region_note:
        print(f"region:    {pricing.region_note}")
    if pricing.market_note:  # a spot machine priced at on-demand: say so, and the fix
        print(f"priced:    {pricing.market_priced}: {pricing.market_note}")
    if share is not None:
        print(f"share:     {share.detail}")
    print(f"detail:    {pricing.detail}")
    print("tried:")
    for step in pricing.tried:
        print(f"  - {step}")
    return 0


def _report(args: argparse.Namespace) -> int:
    db = Path(args.db)
    if not db.exists():
        print(f"error: no ledger at {db} (set --db, or run the server with costguard first)",
              file=sys.stderr)
        return 2
    report = read_report(db, args.top)
    if report.server:
        s = report.server
        print(f"server: spent {s.spend:.2f} over {s.seconds / 3600:.1f} h sampled; "
              f"waste {s.waste:.2f}; unattributed {s.unattributed:.2f}")
    print(f"{'notebook':<50} {'spend':>10} {'waste':>10} {'kernels':>8}")
    for n in report.notebooks:
        print(f"{n.path[:50]:<50} {n.spend:>10.4f} {n.waste:>10.4f} {n.kernels:>8}")
    return 0


def _own_options(app: Any) -> dict[str, Any]:
    """The options CostGuard itself adds (its own settings), not ExtensionApp's."""
    from jupyter_server.extension.application import ExtensionApp

    inherited = ExtensionApp.class_traits(config=True)
    return {n: t for n, t in app.class_traits(config=True).items() if n not in inherited}


def _help_all(_: argparse.Namespace) -> int:
    """CostGuard's own options, then each component's under its own name (`c.Offload`, …)."""
    from jupyter_costguard.app import COMPONENTS, CostGuard

    print("c.CostGuard options (set them in jupyter_server_config.py):\n")
    for _name, trait in sorted(_own_options(CostGuard).items()):
        print(CostGuard.class_get_trait_help(trait))
    for cls in COMPONENTS:
        print(f"\nc.{cls.__name__} options:\n")
        for _name, trait in sorted(cls.class_traits(config=True).items()):
            print(cls.class_get_trait_help(trait))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="jupyter costguard", description=__doc__)
    parser.add_argument("--help-all", action="store_true",
                        help="print every c.CostGuard option with its help and default")
    sub = parser.add_subparsers(dest="command")
    cat = sub.add_parser("catalog", help="list the instance catalog")
    cat.add_argument("--provider", help="only this provider (aws, gcp, azure, …)")
    cat.add_argument("--gpu", action="store_true", help="only GPU instances")
    cat.add_argument("--region", help="only this region")
    cat.add_argument("--catalog-file", action="append", help="extra catalog file(s)")
    cat.set_defaults(func=_catalog)
    cat_sub = cat.add_subparsers(dest="catalog_command")
    upd = cat_sub.add_parser(
        "update", help="refresh prices from dstack's gpuhunt catalog into the user catalog "
        "(needs the prices extra, gpuhunt: pip install '.[prices]' in a clone; honours "
        "GPUHUNT_CATALOG_URL)")
    upd.add_argument("--provider", action="append",
                     help="only this provider (repeatable; aws, gcp, azure, lambda, …)")
    upd.add_argument("--output", help="file to write (default: the user catalog under "
                     "Jupyter's data directory, which the server loads)")
    upd.add_argument("--timeout", type=float, default=60.0,
                     help="seconds each download may take (default: %(default)s)")
    upd.set_defaults(func=_catalog_update)
    det = sub.add_parser("detect", help="what pricing the server would decide here, and how")
    det.add_argument("--json", action="store_true", help="as JSON")
    det.add_argument("--config", action="append",
                     help="a jupyter_server_config file to read on top of the usual ones")
    det.set_defaults(func=_detect)
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
