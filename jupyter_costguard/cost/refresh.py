"""Refresh the user's instance catalog from gpuhunt's published price catalog.

Why: the shipped catalog is a dated snapshot of list prices in one region per provider.
dstack publishes, hourly, the offers gpuhunt collects from the providers' price lists; this
module turns them into a costguard catalog file (same header as ``data/catalog.csv``) that the
user passes as an extra catalog file, so the prices are current and cover every region.

gpuhunt is an optional dependency (the ``prices`` extra: ``pip install '.[prices]'``), imported only
when a refresh runs.

Where the data comes from (gpuhunt 0.1.34, ``gpuhunt/_internal/catalog.py``): each "offline"
provider is published on its own under ``$GPUHUNT_CATALOG_URL`` (default dstack's public S3
bucket, ``.../v3``): ``<url>/<provider>/version`` names the latest version (``YYYYMMDD-<run>``)
and ``<url>/<provider>/<version>/catalog.zip`` holds ``<provider>.csv``. Only that download
path is used: a bare ``gpuhunt.Catalog`` with no online providers added, loaded explicitly,
and read from its downloaded per-provider catalogs. ``gpuhunt.query()`` is never called: it
would add the online providers (vast.ai, ...), whose APIs are queried live. gpuhunt keeps no
cache on disk. ``GPUHUNT_CATALOG_DIR`` (gpuhunt's local-files switch for ``query()``) is not
consulted.

How offers become rows: one row per (provider, instance type, region). ``on_demand_per_hour``
is the cheapest on-demand offer for that key, ``spot_per_hour`` the cheapest spot one (empty if
none). Keys with only spot offers are skipped: a row needs an on-demand price. GCP offers are
per zone and are folded into their region (``us-central1-a`` -> ``us-central1``; GCP prices
per region). Skipped and counted, with the reason: offers with no positive finite price or with
nonsense hardware figures; accelerators that are not NVIDIA GPUs (TPUs, AMD: NVML cannot see
them); offers flagged as a different pricing model (GCP DWS calendar mode, RunPod clusters).
Prices are USD per hour (gpuhunt's unit); memory is copied as gpuhunt gives it (GB as the
providers state it, which costguard reads as GiB). ``gpu_share`` is left empty (default rule).

Provider names: gpuhunt's, except ``lambdalabs`` -> ``lambda`` (the shipped catalog's name).

GPU names: gpuhunt's short names are mapped to the names NVML reports, so that rows match the
GPUs costguard sees (``catalog.normalize_gpu_name``), with `_NVML_NAMES` (name, and per-GPU GB
where the name alone is ambiguous) and `_PCIE_TYPES` (instance types that carry the PCIe part
of a name gpuhunt does not split). A name in neither keeps gpuhunt's spelling, as is.

``retrieved`` is the date in the provider catalog's version (the day dstack built it), or the
fetch date where the version does not start with a date.

The server runs the same refresh in the background (`CatalogRefresher`) every
``c.CostGuard.catalog_refresh_hours`` when gpuhunt is installed.
"""

from __future__ import annotations

import asyncio
import csv
import io
import logging
import math
import os
import re
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any

from jupyter_costguard.common.files import data_dir
from jupyter_costguard.cost.catalog import COLUMNS, Catalog, CatalogError

#: gpuhunt's provider name -> costguard's, where they differ.
_COSTGUARD_NAME = {"lambdalabs": "lambda"}
_GPUHUNT_NAME = {v: k for k, v in _COSTGUARD_NAME.items()}

#: (gpuhunt GPU name, per-GPU GB or None for any) -> the name NVML reports.
_NVML_NAMES: dict[tuple[str, int | None], str] = {
    ("A100", 40): "NVIDIA A100-SXM4-40GB",
    ("A100", 80): "NVIDIA A100-SXM4-80GB",
    ("V100", 16): "Tesla V100-SXM2-16GB",
    ("V100", 32): "Tesla V100-SXM2-32GB",
    ("H100", None): "NVIDIA H100 80GB HBM3",
    ("H100NVL", None): "NVIDIA H100 NVL",
    ("H200", None): "NVIDIA H200",
    ("B200", None): "NVIDIA B200",
    ("L4", None): "NVIDIA L4",
    ("L40", None): "NVIDIA L40",
    ("L40S", None): "NVIDIA L40S",
    ("A10", None): "NVIDIA A10",
    ("A10G", None): "NVIDIA A10G",
    ("A40", None): "NVIDIA A40",
    ("A6000", None): "NVIDIA RTX A6000",
    ("T4", None): "Tesla T4",
}
#: (costguard provider, instance type pattern, gpuhunt GPU name, NVML name): PCIe parts.
_PCIE_TYPES = (
    ("azure", re.compile(r"Standard_NC\d+ads_A100_v4"), "A100", "NVIDIA A100 80GB PCIe"),
    ("azure", re.compile(r"Standard_NC\d+s_v3"), "V100", "Tesla V100-PCIE-16GB"),
    ("lambda", re.compile(r"gpu_\d+x_a100"), "A100", "NVIDIA A100-PCIE-40GB"),
    ("lambda", re.compile(r"gpu_\d+x_h100_pcie"), "H100", "NVIDIA H100 PCIe"),
)
#: gpuhunt offer flags that mark a pricing model other than plain on-demand/spot.
_OTHER_PRICING_FLAGS = frozenset({"gcp-dws-calendar-mode", "runpod-cluster"})

_GCP_ZONE = re.compile(r"^(.+-[a-z]+\d+)-[a-z]$")
_VERSION_DATE = re.compile(r"^(\d{4})(\d{2})(\d{2})")
_FETCHED = "# fetched:"
_AWS_SPOT_NOTE = ("spot_per_hour: AWS market price when gpuhunt collected it (indicative: "
                  "spot prices move with supply and demand)")
_MISSING = ("the price refresh needs gpuhunt, the prices extra: pip install '.[prices]' in a "
            "clone of jupyter-costguard (or pip install gpuhunt)")


class RefreshError(RuntimeError):
    """The catalog could not be refreshed; the message says why (and names the URL)."""


@dataclass(frozen=True)
class UpdateResult:
    """What `update_catalog` wrote, for the CLI to report."""

    path: Path
    rows: int
    providers: tuple[str, ...]  # costguard names, those written
    versions: dict[str, str]  # costguard provider -> gpuhunt catalog version
    catalog_url: str
    gpuhunt_version: str
    fetched: str  # ISO UTC, as in the file's "# fetched:" line
    skipped: int
    skip_reasons: dict[str, int] = field(default_factory=dict)  # reason -> offers
    failed: dict[str, str] = field(default_factory=dict)  # provider not loaded -> why


def user_catalog_path() -> Path:
    """Where the refreshed catalog lives: ``<jupyter data dir>/costguard/catalog.csv``."""
    return data_dir() / "catalog.csv"


def user_catalog_files() -> tuple[str, ...]:
    """The refreshed catalog when there is one: what the server, `detect` and `catalog` load
    first on top of the shipped catalog."""
    user = user_catalog_path()
    return (str(user),) if user.is_file() else ()


def read_fetched(path: Path) -> str | None:
    """The ``# fetched:`` timestamp of a refreshed file; None if absent or unreadable."""
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if not line.startswith("#"):
                    return None
                if line.startswith(_FETCHED):
                    return line[len(_FETCHED):].strip() or None
    except (OSError, UnicodeDecodeError):
        return None
    return None


def update_catalog(path: Path | None = None, providers: Sequence[str] | None = None,
                   now: datetime | None = None, timeout: float = 60.0) -> UpdateResult:
    """Download gpuhunt's catalog and replace ``path`` (default `user_catalog_path`) whole.

    ``providers`` (costguard or gpuhunt names) limits the rows written; each one named must
    load. Without it, every offline provider that loads is written and the rest are reported
    in ``failed``; if none loads, nothing is written. gpuhunt's ``Catalog.load`` fetches every
    offline provider either way (it has no per-provider load) and sets no socket timeout of
    its own, so each of its requests gets ``timeout`` seconds here (the process's default
    socket timeout, restored after): a mirror that hangs is an error, not a hang.
    """
    try:
        import gpuhunt
        from gpuhunt._internal import catalog as gh_catalog
    except ImportError:
        raise RefreshError(_MISSING) from None
    offline = [str(p) for p in gh_catalog.OFFLINE_PROVIDERS]
    wanted = offline if providers is None else [_gpuhunt_name(p, offline) for p in providers]
    url = os.environ.get("GPUHUNT_CATALOG_URL", gh_catalog.CATALOG_URL).rstrip("/")
    fetched_at = now or datetime.now(timezone.utc)
    if fetched_at.tzinfo is None:
        fetched_at = fetched_at.replace(tzinfo=timezone.utc)
    fetched_at = fetched_at.astimezone(timezone.utc)
    fetched = fetched_at.strftime("%Y-%m-%dT%H:%M:%SZ")

    catalog = gpuhunt.Catalog(balance_resources=False, auto_reload=False)
    before = socket.getdefaulttimeout()
    socket.setdefaulttimeout(timeout)
    try:
        with _load_failures() as failures:
            try:
                catalog.load()
            except Exception as e:  # gpuhunt raises GPUHuntError when no provider loaded
                raise RefreshError(_failure_message(url, wanted, failures, e)) from None
    finally:
        socket.setdefaulttimeout(before)
    loaded: dict[str, Any] = dict(getattr(catalog, "catalog", {}))
    missing = [p for p in wanted if p not in loaded]
    if missing and (providers is not None or len(missing) == len(wanted)):
        raise RefreshError(_failure_message(url, missing, failures, None))

    rows: dict[tuple[str, str, str], dict[str, Any]] = {}
    skips: dict[str, int] = {}
    versions: dict[str, str] = {}
    for name in wanted:
        if name not in loaded:
            continue
        provider = _COSTGUARD_NAME.get(name, name)
        version = str(loaded[name].version)
        versions[provider] = version
        source = f"gpuhunt catalog v{version} ({url}/{name}/{version}/catalog.zip)"
        retrieved = _version_date(version) or fetched_at.date().isoformat()
        for item in loaded[name].items:
            reason = _add_offer(rows, provider, item, source, retrieved)
            if reason:
                skips[reason] = skips.get(reason, 0) + 1
    for key in [k for k, r in rows.items() if r["on_demand_per_hour"] is None]:
        del rows[key]
        skips["spot offers only, no on-demand price"] = (
            skips.get("spot offers only, no on-demand price", 0) + 1)

    target = path if path is not None else user_catalog_path()
    gh_version = _dist_version()
    header = [
        "# jupyter-costguard instance catalog, refreshed from gpuhunt's published catalog.",
        "# Replaced whole by each refresh: put your own overrides in another file.",
        f"{_FETCHED} {fetched}",
        f"# source: gpuhunt {gh_version} catalog {url}",
        "# versions: " + ", ".join(f"{p} {v}" for p, v in sorted(versions.items())),
    ]
    ordered = [rows[k] for k in sorted(rows, key=lambda k: tuple(s.lower() for s in k))]
    _write_atomic(target, header, ordered)
    return UpdateResult(
        path=target, rows=len(ordered), providers=tuple(sorted(versions)), versions=versions,
        catalog_url=url, gpuhunt_version=gh_version, fetched=fetched,
        skipped=sum(skips.values()), skip_reasons=skips,
        failed={_COSTGUARD_NAME.get(p, p): failures.get(p, "not loaded") for p in missing},
    )


def nvml_gpu_name(provider: str, instance_type: str, gpu_name: str,
                  gpu_memory: float | None) -> str:
    """The NVML name for gpuhunt's GPU name (see the module docstring); unknown: as is."""
    short = gpu_name.strip().upper()
    for prov, pattern, name, nvml in _PCIE_TYPES:
        if prov == provider and name == short and pattern.fullmatch(instance_type):
            return nvml
    if gpu_memory is not None and math.isfinite(gpu_memory):
        hit = _NVML_NAMES.get((short, round(gpu_memory)))
        if hit:
            return hit
    return _NVML_NAMES.get((short, None), gpu_name.strip())


def _gpuhunt_name(name: str, offline: list[str]) -> str:
    n = name.strip().lower()
    n = _GPUHUNT_NAME.get(n, n)
    if n not in offline:
        known = sorted(_COSTGUARD_NAME.get(p, p) for p in offline)
        raise RefreshError(f"unknown price catalog provider {name!r}; known: {', '.join(known)}")
    return n


def _add_offer(rows: dict[tuple[str, str, str], dict[str, Any]], provider: str, item: Any,
               source: str, retrieved: str) -> str | None:
    """Merge one gpuhunt offer into its row; the reason it does not fit, else None."""
    price = _finite(item.price)
    if price is None or price <= 0:
        return "no price"
    if set(item.flags or ()) & _OTHER_PRICING_FLAGS:
        return "other pricing model (reservation, cluster)"
    gpu_count, cpu, memory = item.gpu_count, item.cpu, _finite(item.memory)
    gpu_memory = _finite(item.gpu_memory) if item.gpu_memory is not None else None
    instance, location = str(item.instance_name or "").strip(), str(item.location or "").strip()
    if (not instance or not location or any(c in instance + location for c in "\r\n")
            or not isinstance(gpu_count, int) or gpu_count < 0 or not isinstance(cpu, int)
            or cpu < 1 or memory is None or memory <= 0
            or (item.gpu_memory is not None and (gpu_memory is None or gpu_memory < 0))):
        return "nonsense hardware figures"
    gpu_model = ""
    if gpu_count:
        vendor = getattr(item.gpu_vendor, "value", item.gpu_vendor)
        if vendor != "nvidia":
            return "not an NVIDIA GPU"
        if not item.gpu_name:
            return "nonsense hardware figures"
        gpu_model = nvml_gpu_name(provider, instance, item.gpu_name, gpu_memory)
    region = location
    if provider == "gcp" and (m := _GCP_ZONE.match(location)):
        region = m.group(1)
    key = (provider, instance, region)
    row = rows.get(key)
    if row is None:
        row = rows[key] = {
            "provider": provider, "instance_type": instance, "gpu_model": gpu_model,
            "gpu_count": gpu_count, "gpu_memory_gib": gpu_memory if gpu_count else None,
            "vcpus": cpu, "memory_gib": memory, "region": region, "currency": "USD",
            "on_demand_per_hour": None, "spot_per_hour": None, "gpu_share": None,
            "source_url": source, "retrieved": retrieved,
            # the spot figure is from the same download; AWS's is a market price
            "spot_source_url": "", "spot_retrieved": None,
            "notes": _AWS_SPOT_NOTE if provider == "aws" else "",
        }
    column = "spot_per_hour" if item.spot else "on_demand_per_hour"
    if row[column] is None or price < row[column]:
        row[column] = price
    return None


def _write_atomic(path: Path, header: list[str], rows: list[dict[str, Any]]) -> None:
    """Write beside ``path`` and rename over it: a reader sees the old file or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    buf = io.StringIO()
    buf.write("\n".join(header) + "\n")
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    for row in rows:
        writer.writerow([_cell(row[c]) for c in COLUMNS])
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(buf.getvalue())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    return str(value)


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _version_date(version: str) -> str | None:
    m = _VERSION_DATE.match(version)
    if not m:
        return None
    try:
        return date(int(m.group(1)), int(m.group(2)), int(m.group(3))).isoformat()
    except ValueError:
        return None


def _dist_version() -> str:
    """gpuhunt's installed version, for the file's source line."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gpuhunt")
    except PackageNotFoundError:
        return "unknown"


def _failure_message(url: str, providers: list[str], failures: dict[str, str],
                     error: Exception | None) -> str:
    names = [_COSTGUARD_NAME.get(p, p) for p in providers]
    why = [f"{_COSTGUARD_NAME.get(p, p)}: {failures[p]}" for p in providers if p in failures]
    if not why and error is not None:
        why = [str(error.__cause__ or error)]
    return (f"could not download the price catalog of {', '.join(names)} from {url}"
            + (f" ({'; '.join(why)})" if why else ""))


class _CaptureFailures(logging.Filter):
    """Takes gpuhunt's per-provider "Failed to load" records (with tracebacks) off the log."""

    def __init__(self) -> None:
        super().__init__()
        self.failures: dict[str, str] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            args = record.args if isinstance(record.args, tuple) else ()
            provider = str(args[0]) if args else "?"
            self.failures[provider] = str(record.exc_info[1]) or type(record.exc_info[1]).__name__
            return False
        return True


@contextmanager
def _load_failures() -> Iterator[dict[str, str]]:
    """Collect why providers failed to load, as `RefreshError` reports it, not a traceback."""
    logger = logging.getLogger("gpuhunt._internal.catalog")
    capture = _CaptureFailures()
    logger.addFilter(capture)
    try:
        yield capture.failures
    finally:
        logger.removeFilter(capture)


#: The first background refresh waits this long after the server starts (or the interval,
#: when shorter): it competes with nothing the server does at start.
FIRST_REFRESH_DELAY_SECONDS = 60.0
#: After a failed background refresh, the next try comes this soon (or the interval, when
#: shorter) rather than a whole interval later.
RETRY_SECONDS = 3600.0


def background_refresh_off(hours: float) -> str | None:
    """Why the server does not refresh the catalog in the background; None when it does."""
    import importlib.util

    if not hours > 0:
        return "c.CostGuard.catalog_refresh_hours is 0"
    if importlib.util.find_spec("gpuhunt") is None:
        return "gpuhunt is not installed (the prices extra: pip install '.[prices]' in a clone)"
    return None


class CatalogRefresher:
    """The server's background refresh of the user catalog, every ``interval`` seconds.

    Each refresh is ``jupyter costguard catalog update`` in a child process: gpuhunt's
    downloads block and set the process-wide default socket timeout, so a child keeps both
    off the server, and a child can be stopped at ``timeout`` whatever it is doing. The new
    file replaces the user catalog only once it loads as a catalog, so a failed, slow or
    broken refresh keeps the last good file. ``on_new`` (given the file) is then called on a
    thread, to load it and put it to use; nothing here runs on the IO loop but the waiting.
    The first refresh comes when the file is due (its ``# fetched:`` time plus ``interval``),
    and not before `FIRST_REFRESH_DELAY_SECONDS` (or ``interval``) after start.
    """

    def __init__(self, interval: float, timeout: float, on_new: Callable[[Path], None], *,
                 log: logging.Logger, path: Path | None = None,
                 now: Callable[[], float] = time.time) -> None:
        self.interval = interval
        self.timeout = timeout
        self.on_new = on_new
        self.log = log
        self.path = path if path is not None else user_catalog_path()
        self.now = now
        self.refreshes = 0  # good ones, for tests and logs
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Schedule the refreshes on the running loop."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Cancel the schedule and stop a refresh under way (its child is killed)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task

    def first_delay(self) -> float:
        """Seconds until the first refresh: when the file is due, not before the start delay."""
        due = 0.0
        fetched = read_fetched(self.path)
        if fetched:
            with suppress(ValueError):
                at = datetime.strptime(fetched, "%Y-%m-%dT%H:%M:%SZ").replace(
                    tzinfo=timezone.utc).timestamp()
                due = at + self.interval - self.now()
        return max(due, min(FIRST_REFRESH_DELAY_SECONDS, self.interval))

    async def _run(self) -> None:
        delay = self.first_delay()
        while True:
            await asyncio.sleep(delay)
            try:
                ok = await self.refresh_once()
            except Exception:  # never let one bad refresh end the schedule
                self.log.exception("costguard: background catalog refresh failed")
                ok = False
            delay = self.interval if ok else min(RETRY_SECONDS, self.interval)

    async def refresh_once(self) -> bool:
        """One refresh: download in a child, check, install, use. False (logged) if it failed;
        the user catalog is then as it was."""
        tmp = self.path.with_name(f".{self.path.name}.refresh")
        cmd = [sys.executable, "-m", "jupyter_costguard.cli", "catalog", "update",
               "--output", str(tmp), "--timeout", f"{max(1.0, self.timeout / 2):g}"]
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            failed = await self._child(cmd)
            if failed is None:
                loop = asyncio.get_running_loop()
                failed = await loop.run_in_executor(None, self._install, tmp)
        finally:
            with suppress(OSError):
                tmp.unlink()
        if failed:
            self.log.warning("costguard: background catalog refresh failed, keeping %s: %s",
                             self.path if self.path.is_file() else "the shipped catalog",
                             failed)
            return False
        self.refreshes += 1
        self.log.info("costguard: catalog refreshed in the background: %s (fetched %s)",
                      self.path, read_fetched(self.path))
        return True

    async def _child(self, cmd: list[str]) -> str | None:
        """Run the update; why it failed, or None."""
        proc = await asyncio.create_subprocess_exec(
            *cmd, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
        try:
            _, err = await asyncio.wait_for(proc.communicate(), self.timeout)
        except asyncio.TimeoutError:
            return f"stopped after {self.timeout:g} s (c.CostGuard.catalog_refresh_timeout)"
        finally:
            if proc.returncode is None:  # timed out, or the server is stopping
                proc.kill()
                await proc.wait()
        if proc.returncode != 0:
            lines = err.decode("utf-8", "replace").strip().splitlines()
            return lines[-1][:500] if lines else f"exit status {proc.returncode}"
        return None

    def _install(self, tmp: Path) -> str | None:
        """On a thread: the new file must load on top of the shipped catalog; then it
        replaces the user catalog and is put to use. Why not, or None."""
        try:
            catalog = Catalog.load([tmp])
        except CatalogError as e:
            return f"the downloaded catalog does not load: {e}"
        if not any(r.origin.startswith(str(tmp)) for r in catalog.rows):
            return "the downloaded catalog has no rows"
        os.replace(tmp, self.path)
        try:
            self.on_new(self.path)
        except Exception as e:  # the file is good; what uses it is told at the next refresh
            return f"{self.path} written but not put to use: {e}"
        return None
