"""Refresh the shipped price snapshot (jupyter_costguard/data/catalog.csv) from a local copy of
SkyPilot's public price catalogs (github.com/skypilot-org/skypilot-catalog).

    python scripts/refresh_catalog.py PATH/TO/skypilot-catalog [--catalog FILE]
        [--snapshot CLOUD=COMMIT,DATE ...] [--dry-run]

For each AWS, GCP and Azure GPU row of the shipped catalog it reads, in the row's region, the
on-demand and spot figures of the newest catalog version that has the cloud's `vms.csv`
(catalogs/vN/CLOUD/vms.csv) and writes them into the row, each dated by that file's last commit
(`git log` of the checkout) and sourced by its URL at that commit. Where the checkout is not a
git repository (a copy of the files), `--snapshot CLOUD=COMMIT,DATE` names both; its DATE is
then the date the copy was read unless the commit's own date is known, and the notes say which.

- AWS: the on-demand price, and as the spot figure the lowest of the region's availability
  zones' spot prices (local and wavelength zones left out; AWS spot prices move hourly).
- GCP: SkyPilot lists a GPU VM's machine and its GPUs apart: each figure is the two parts
  added (the machine's row and the GPU row of the same count in the region).
- Azure: the published on-demand and spot list prices in the region.

A figure the shipped row dates later than the snapshot (a provider's newer published price,
e.g. a price cut SkyPilot had not picked up) is kept, and the header says so. A spot figure
equal to or above on-demand (no spot offer) is left out. Rows SkyPilot does not list are
left as they are. The header's sources block (between the markers) is rewritten.
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "jupyter_costguard" / "data" / "catalog.csv"
REPO_URL = "https://github.com/skypilot-org/skypilot-catalog"
CLOUDS = ("aws", "gcp", "azure")
BEGIN = "# --- sources: written by scripts/refresh_catalog.py ---"
END = "# --- end of sources ---"
#: an ordinary availability zone id (use1-az4), not a local or wavelength zone (use1-atl2-az1)
_STANDARD_ZONE = re.compile(r"^[a-z]+[0-9]+-az[0-9]+$")
#: SkyPilot's accelerator name for the GPU model NVML reports (the shipped rows' gpu_model)
GPU_NAMES = (
    ("A100-SXM4-80GB", "A100-80GB"), ("A100 80GB", "A100-80GB"), ("A100", "A100"),
    ("H100", "H100"), ("L40S", "L40S"), ("L4", "L4"), ("T4", "T4"), ("V100", "V100"),
    ("A10G", "A10G"),
)


@dataclass(frozen=True)
class Snapshot:
    """One cloud's file: where it is, the commit it is at and that commit's date."""

    cloud: str
    version: str
    path: Path
    commit: str
    day: str
    date_is_commit: bool = True

    @property
    def url(self) -> str:
        return f"{REPO_URL}/blob/{self.commit}/catalogs/{self.version}/{self.cloud}/vms.csv"

    def named(self) -> str:
        when = (f"committed {self.day}" if self.date_is_commit
                else f"read {self.day}; the commit's own date could not be read")
        return (f"SkyPilot's catalog {self.cloud}/vms.csv ({self.version}) at commit "
                f"{self.commit[:8]} ({when})")


@dataclass
class Figures:
    on_demand: float | None = None
    spot: float | None = None
    detail: str = ""
    #: the GPU part of the on-demand price, where the provider publishes the split (GCP)
    gpu_share: float | None = None


@dataclass
class Report:
    changed: list[str] = field(default_factory=list)
    kept_newer: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


def newest_version(checkout: Path, cloud: str) -> str | None:
    """The highest catalogs/vN that has CLOUD/vms.csv (None: the copy has no file for it)."""
    versions = [p.parent.parent.name for p in (checkout / "catalogs").glob(f"v*/{cloud}/vms.csv")]
    versions = [v for v in versions if v[1:].isdigit()]
    return max(versions, key=lambda v: int(v[1:])) if versions else None


def git_snapshot(checkout: Path, rel: str) -> tuple[str, str] | None:
    """The last commit of `rel` and its commit date, where the checkout is a git repository."""
    try:
        out = subprocess.run(["git", "-C", str(checkout), "log", "-1", "--format=%H %cs", "--",
                              rel], capture_output=True, text=True, timeout=60, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    parts = out.stdout.split()
    return (parts[0], parts[1]) if len(parts) == 2 else None


def snapshots(checkout: Path, given: dict[str, tuple[str, str]]) -> dict[str, Snapshot]:
    found = {}
    for cloud in CLOUDS:
        version = newest_version(checkout, cloud)
        if version is None:  # that cloud's rows stay as they are (and the header says whence)
            print(f"no catalogs/v*/{cloud}/vms.csv under {checkout}: {cloud} rows left as they "
                  "are", file=sys.stderr)
            continue
        rel = f"catalogs/{version}/{cloud}/vms.csv"
        if cloud in given:
            commit, day = given[cloud]
            snap = Snapshot(cloud, version, checkout / rel, commit, day, date_is_commit=False)
        else:
            at = git_snapshot(checkout, rel)
            if at is None:
                raise SystemExit(f"{checkout} is not a git checkout: name {cloud}'s commit and "
                                 f"date with --snapshot {cloud}=COMMIT,YYYY-MM-DD")
            snap = Snapshot(cloud, version, checkout / rel, at[0], at[1])
        date.fromisoformat(snap.day)
        found[cloud] = snap
    return found


def _num(raw: str | None) -> float | None:
    try:
        x = float(raw) if raw not in (None, "") else None
    except ValueError:
        return None
    return x if x is not None and x > 0 else None


def _text(x: float) -> str:
    return f"{x:.6f}".rstrip("0").rstrip(".")


def read_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def aws_figures(rows: Iterable[dict[str, str]], instance_type: str, region: str) -> Figures:
    mine = [r for r in rows if r["InstanceType"] == instance_type and r["Region"] == region]
    prices = [p for r in mine if (p := _num(r.get("Price"))) is not None]
    if not prices:
        return Figures()
    on_demand = max(set(prices), key=prices.count)  # the zones agree; the most common if not
    spots = [s for r in mine if _STANDARD_ZONE.match(r.get("AvailabilityZone", ""))
             and (s := _num(r.get("SpotPrice"))) is not None and s < on_demand]
    return Figures(on_demand, min(spots) if spots else None,
                   "the lowest of its availability zones' figures, local zones left out")


def azure_figures(rows: Iterable[dict[str, str]], instance_type: str, region: str) -> Figures:
    mine = [r for r in rows if r["InstanceType"] == instance_type and r["Region"] == region]
    prices = [p for r in mine if (p := _num(r.get("Price"))) is not None]
    if not prices:
        return Figures()
    on_demand = min(prices)
    spots = [s for r in mine if (s := _num(r.get("SpotPrice"))) is not None and s < on_demand]
    return Figures(on_demand, min(spots) if spots else None, "")


def gpu_name(model: str) -> str | None:
    return next((name for key, name in GPU_NAMES if key in model), None)


def gcp_figures(rows: Sequence[dict[str, str]], instance_type: str, region: str, model: str,
                count: int) -> Figures:
    machine = instance_type.split("+", 1)[0]
    vm = [r for r in rows if r["InstanceType"] == machine and r["Region"] == region]
    name = gpu_name(model)
    gpus = [r for r in rows if not r["InstanceType"] and r["Region"] == region
            and r.get("AcceleratorName") == name
            and _num(r.get("AcceleratorCount")) == float(count)]
    if not vm or not gpus:
        return Figures()

    def cheapest(rs: list[dict[str, str]], col: str) -> float | None:
        xs = [x for r in rs if (x := _num(r.get(col))) is not None]
        return min(xs) if xs else None

    parts = {col: (cheapest(vm, col), cheapest(gpus, col)) for col in ("Price", "SpotPrice")}
    od_vm, od_gpu = parts["Price"]
    sp_vm, sp_gpu = parts["SpotPrice"]
    if od_vm is None or od_gpu is None:
        return Figures()
    on_demand = round(od_vm + od_gpu, 6)
    spot = round(sp_vm + sp_gpu, 6) if sp_vm is not None and sp_gpu is not None else None
    detail = (f"SkyPilot lists the VM and its GPUs apart, so each figure is the VM part + the "
              f"{count}x {name} part (on-demand {_text(od_vm)} + {_text(od_gpu)}"
              + (f", spot {_text(sp_vm)} + {_text(sp_gpu)})" if spot is not None else ")"))
    return Figures(on_demand, spot if spot is not None and spot < on_demand else None, detail,
                   gpu_share=round(od_gpu / on_demand, 2))


def figures_for(row: dict[str, str], files: dict[str, list[dict[str, str]]]) -> Figures:
    provider, itype, region = row["provider"], row["instance_type"], row["region"]
    if provider == "aws":
        return aws_figures(files["aws"], itype, region)
    if provider == "azure":
        return azure_figures(files["azure"], itype, region)
    return gcp_figures(files["gcp"], itype, region, row["gpu_model"], int(row["gpu_count"]))


SPOT_KIND = {
    "aws": "indicative AWS market price (Linux, {region}, {detail}; AWS spot prices move "
           "hourly with supply and demand)",
    "gcp": "GCP's published spot list price ({region})",
    "azure": "Azure's published spot list price (Linux, {region})",
}


def refresh_row(row: dict[str, str], fig: Figures, snap: Snapshot, report: Report) -> None:
    """Write the snapshot's figures into the row, keeping any figure dated after it."""
    name = f"{row['provider']} {row['instance_type']}"
    old_spot_note = next((n for n in row["notes"].split("; ")
                          if n.startswith("spot_per_hour: ")), "")
    spot_note = od_note = ""
    if row["spot_retrieved"] > snap.day:  # a newer spot figure than the snapshot: kept
        if fig.spot is not None:
            report.kept_newer.append(f"{name}: spot {row['spot_per_hour']} of "
                                     f"{row['spot_retrieved']}")
        spot_note = old_spot_note
    elif fig.spot is not None:
        row.update(spot_per_hour=_text(fig.spot), spot_source_url=snap.url,
                   spot_retrieved=snap.day)
        kind = SPOT_KIND[row["provider"]].format(region=row["region"], detail=fig.detail)
        spot_note = f"spot_per_hour: {kind}"
    else:  # none published now: no older figure left behind as if it were current
        row.update(spot_per_hour="", spot_source_url="", spot_retrieved="")
    assert fig.on_demand is not None
    if row["retrieved"] > snap.day:
        report.kept_newer.append(f"{name}: on-demand {row['on_demand_per_hour']} of "
                                 f"{row['retrieved']} (SkyPilot's: {_text(fig.on_demand)})")
        od_note = (f"on_demand_per_hour: the provider's figure of {row['retrieved']}, kept: "
                   f"newer than {snap.named()}, which gives {_text(fig.on_demand)}")
    else:
        row.update(on_demand_per_hour=_text(fig.on_demand), source_url=snap.url,
                   retrieved=snap.day)
        if fig.gpu_share is not None:
            row["gpu_share"] = f"{fig.gpu_share:.2f}"
        od_note = "on_demand_per_hour: the published list price"
    gcp = fig.detail if row["provider"] == "gcp" else ""
    ours = [what for what, fresh in (("spot", row["spot_source_url"] == snap.url),
                                     ("on-demand", row["source_url"] == snap.url)) if fresh]
    whence = f"{' and '.join(ours)} from {snap.named()}" if ours else ""
    row["notes"] = "; ".join(n for n in (spot_note, od_note, gcp, whence) if n)
    report.changed.append(name)


def sources_block(snaps: dict[str, Snapshot], report: Report,
                  rows: list[dict[str, str]]) -> list[str]:
    lines = [BEGIN, "# The AWS, GCP and Azure GPU rows' on-demand and spot figures come from:"]
    lines += [f"#  - {s.named()}: {s.url}" for s in snaps.values()]
    for cloud in CLOUDS:
        if cloud in snaps:
            continue
        lines.append(f"#  - {cloud}: not in the copy this refresh read; its rows keep their "
                     "own sources and dates (notes), SkyPilot's among them:")
        cited = sorted({(url, day) for r in rows if r["provider"] == cloud
                        for url, day in ((r["source_url"], r["retrieved"]),
                                         (r["spot_source_url"], r["spot_retrieved"]))
                        if url.startswith(REPO_URL)})
        lines += [f"#    {url} (dated {day})" for url, day in cited] or ["#    none"]
    if report.kept_newer:
        lines.append("# Kept where SkyPilot is behind a provider's newer published figure "
                     "(dated after its snapshot):")
        lines += [f"#  - {k}" for k in report.kept_newer]
    lines.append(END)
    return lines


def split_catalog(text: str) -> tuple[list[str], str]:
    lines = text.splitlines(keepends=True)
    n = next(i for i, line in enumerate(lines) if not line.startswith("#"))
    return [line.rstrip("\n") for line in lines[:n]], "".join(lines[n:])


def refresh(catalog_text: str, snaps: dict[str, Snapshot]) -> tuple[str, Report]:
    header, body = split_catalog(catalog_text)
    reader = csv.DictReader(io.StringIO(body))
    columns = list(reader.fieldnames or [])
    rows = list(reader)
    files = {cloud: read_rows(snap.path) for cloud, snap in snaps.items()}
    report = Report()
    for row in rows:
        if row["provider"] not in snaps or int(row["gpu_count"] or 0) <= 0:
            continue
        fig = figures_for(row, files)
        if fig.on_demand is None:
            report.missing.append(f"{row['provider']} {row['instance_type']}")
            continue
        refresh_row(row, fig, snaps[row["provider"]], report)
    if BEGIN in header:
        header = header[:header.index(BEGIN)] + header[header.index(END) + 1:]
    out = io.StringIO()
    out.write("\n".join(header + sources_block(snaps, report, rows)) + "\n")
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue(), report


def _snapshot_arg(raw: str) -> tuple[str, tuple[str, str]]:
    cloud, _, rest = raw.partition("=")
    commit, _, day = rest.partition(",")
    if cloud not in CLOUDS or not commit or not day:
        raise argparse.ArgumentTypeError("CLOUD=COMMIT,YYYY-MM-DD, CLOUD one of "
                                         + ", ".join(CLOUDS))
    return cloud, (commit, day)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkout", type=Path, help="a copy of skypilot-catalog (its catalogs/)")
    p.add_argument("--catalog", type=Path, default=SHIPPED, help="the CSV to refresh in place")
    p.add_argument("--snapshot", type=_snapshot_arg, action="append", default=[],
                   help="CLOUD=COMMIT,DATE where the checkout is not a git repository")
    p.add_argument("--dry-run", action="store_true", help="print the result, write nothing")
    args = p.parse_args(argv)
    snaps = snapshots(args.checkout, dict(args.snapshot))
    text, report = refresh(args.catalog.read_text(), snaps)
    if args.dry_run:
        sys.stdout.write(text)
    else:
        args.catalog.write_text(text)
    print(f"refreshed {len(report.changed)} rows; kept {len(report.kept_newer)} newer "
          f"figures; not listed: {', '.join(report.missing) or 'none'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
