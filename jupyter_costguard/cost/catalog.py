"""The instance catalog: dated list prices per instance type, and their GPU/host split.

What the instance costs per hour, and which part of that is the GPUs.

The shipped catalog (``data/catalog.csv``) holds dated *list* prices; real bills differ
(negotiated rates, savings plans, other regions), so user files can replace or add rows.

GPU share: the spend model splits the rate R into a GPU part (``R * gpu_share``, divided among
the GPUs) and a host part (the rest, divided by CPU time). The catalog gives ``gpu_share``
where the provider publishes the split. Otherwise the default rule is::

    host = vcpus * HOST_PER_VCPU_HOUR + memory_gib * HOST_PER_GIB_HOUR   (0.04, 0.005 $/h)
    host = min(host, MAX_HOST_FRACTION * on_demand_per_hour)            (at most 50%)
    gpu_share = 1 - host / on_demand_per_hour                           (0.0 for CPU-only)

i.e. roughly what a comparable CPU-only VM costs, never more than half of a GPU instance.
The same fraction is applied to the spot rate. With only an ``hourly_rate``, the share is the
``gpu_share`` argument, else ``HOURLY_RATE_GPU_SHARE`` (0.9) when GPUs are present, else 0.0.
An explicit ``gpu_share`` argument always wins over the catalog.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from datetime import date
from importlib.resources import files
from pathlib import Path
from typing import Any

HOST_PER_VCPU_HOUR = 0.04
HOST_PER_GIB_HOUR = 0.005
MAX_HOST_FRACTION = 0.5
#: Relative memory difference (observed vs nominal) still accepted by `Catalog.match`.
MEMORY_TOLERANCE = 0.10
#: Candidates whose relative memory distance is within this of the best one tie.
TIE_MARGIN = 0.02

MARKET_ON_DEMAND = "on-demand"
MARKET_SPOT = "spot"
MARKETS = (MARKET_ON_DEMAND, MARKET_SPOT)

COLUMNS = (
    "provider", "instance_type", "gpu_model", "gpu_count", "gpu_memory_gib", "vcpus",
    "memory_gib", "region", "currency", "on_demand_per_hour", "spot_per_hour", "gpu_share",
    "source_url", "retrieved", "spot_source_url", "spot_retrieved", "notes",
)
#: Columns a file may leave out even where every column is required (the shipped file's
#: header has them all; files written before they existed still load).
OPTIONAL_COLUMNS = ("spot_source_url", "spot_retrieved", "notes")
#: Columns a user row must give when it adds a new instance type (rather than overriding).
REQUIRED_FOR_NEW = ("provider", "instance_type", "gpu_count", "vcpus", "memory_gib",
                    "on_demand_per_hour")
#: Column name in files -> InstanceType field (the rest are the same).
_FIELD_OF = {"gpu_share": "catalog_gpu_share"}

_SHIPPED = "catalog.csv"
GIB_BYTES = 1024**3


class CatalogError(ValueError):
    """A catalog file is unreadable or has a bad row; the message names file and line."""


@dataclass(frozen=True)
class InstanceType:
    """One row of the catalog: an instance type and its list prices."""

    provider: str
    instance_type: str
    gpu_model: str  # as NVML names it; "" for CPU-only
    gpu_count: int
    gpu_memory_gib: float | None  # per GPU
    vcpus: int
    memory_gib: float
    region: str
    currency: str
    on_demand_per_hour: float
    spot_per_hour: float | None  # None where no spot price is known
    catalog_gpu_share: float | None  # the catalog's "gpu_share" column; None = default rule
    source_url: str
    retrieved: str | None  # ISO date the prices are from; None for user rows that omit it
    origin: str = ""  # "file:line" the row came from, for messages
    #: "USD at 0.92 EUR/USD (2026-11-30)" when the prices were converted at load
    converted_from: str | None = None
    #: where and when the spot figure is from, when not the row's own source and date (a
    #: spot snapshot is taken apart from the list prices); empty: the row's
    spot_source_url: str = ""
    spot_retrieved: str | None = None
    #: what kind of figure the prices are ("spot: indicative market price ..."), for people
    notes: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return (self.provider.lower(), self.instance_type.lower())

    @property
    def regional_key(self) -> tuple[str, str, str]:
        return (*self.key, self.region.lower())

    @property
    def name(self) -> str:
        """``provider/instance_type``: unambiguous across providers."""
        return f"{self.provider}/{self.instance_type}"

    @property
    def is_gpu(self) -> bool:
        return self.gpu_count > 0

    @property
    def gpu_share(self) -> float:
        """Fraction of the rate that is the GPU part: catalog value, else the default rule."""
        if self.catalog_gpu_share is not None:
            return self.catalog_gpu_share
        return default_gpu_share(self.gpu_count, self.vcpus, self.memory_gib,
                                 self.on_demand_per_hour)

    def rate(self, market: str) -> float | None:
        """Hourly rate in ``market``; None for spot when no spot price is known."""
        check_market(market)
        return self.spot_per_hour if market == MARKET_SPOT else self.on_demand_per_hour

    def priced_as(self, market: str) -> InstanceType:
        """This row as the price in ``market`` is dated and sourced: a spot figure carries the
        date and source of the spot snapshot, which may differ from the list prices'."""
        if market != MARKET_SPOT or self.spot_per_hour is None:
            return self
        return replace(self, retrieved=self.spot_retrieved or self.retrieved,
                       source_url=self.spot_source_url or self.source_url)

    def describe(self) -> str:
        gpus = f"{self.gpu_count}x {self.gpu_model}, " if self.is_gpu else "no GPU, "
        return (f"{self.name} ({gpus}{self.vcpus} vCPU, {format_gib(self.memory_gib)} GiB, "
                f"{self.region or 'region unknown'})")


def default_gpu_share(gpu_count: int, vcpus: int, memory_gib: float, rate: float) -> float:
    """The documented default split (module docstring): host ≈ a CPU VM, at most half."""
    if gpu_count <= 0:
        return 0.0
    if rate <= 0:
        return 1.0 - MAX_HOST_FRACTION
    host = vcpus * HOST_PER_VCPU_HOUR + memory_gib * HOST_PER_GIB_HOUR
    host = min(host, MAX_HOST_FRACTION * rate)
    return 1.0 - host / rate


def normalize_gpu_name(name: str) -> str:
    """Compare GPU names loosely: NVML spells the same part differently across drivers."""
    n = name.strip().lower()
    n = re.sub(r"\s+mig\s+\S+$", "", n)  # "NVIDIA A100-SXM4-40GB MIG 1g.5gb"
    n = re.sub(r"^(nvidia|tesla)\s+", "", n)
    n = re.sub(r"^(nvidia|tesla)\s+", "", n)  # "NVIDIA Tesla T4"
    return re.sub(r"[\s\-_]+", "", n)


RowKey = tuple[str, str, str]  # (provider, instance_type, region), lower case


class Catalog:
    """Instance types by (provider, instance_type, region); later rows replace earlier ones.

    A type's first region is its *home*: the row shape matching and a price without a known
    region use, and the one a region the catalog lacks falls back to (saying so).
    """

    def __init__(self, rows: Iterable[InstanceType] = ()) -> None:
        self._rows: dict[RowKey, InstanceType] = {}
        self._home: dict[tuple[str, str], str] = {}
        for row in rows:
            self._put(row)

    def _put(self, row: InstanceType) -> None:
        self._rows[row.regional_key] = row
        self._home.setdefault(row.key, row.region.lower())

    @classmethod
    def load(cls, extra_files: Sequence[str | Path] = (), *, currency: str | None = None,
             exchange_rates: Mapping[str, float] | None = None,
             rates_date: str | None = None) -> Catalog:
        """The shipped catalog, then each user file (CSV or JSON) in order on top; rows in
        another currency than ``currency`` are converted once, here, where
        ``exchange_rates`` (units of ``currency`` per unit of the row's) has a rate."""
        text = files("jupyter_costguard").joinpath("data").joinpath(_SHIPPED).read_text("utf-8")
        catalog = cls()
        catalog._merge(_parse_csv(text, f"shipped {_SHIPPED}"), shipped=True)
        for path in extra_files:
            catalog.merge_file(path)
        if currency:
            catalog._convert(currency.upper(), exchange_rates or {}, rates_date)
        return catalog

    def _convert(self, currency: str, rates: Mapping[str, float], date_: str | None) -> None:
        by_code = {k.strip().upper(): float(v) for k, v in rates.items()}
        for key, row in list(self._rows.items()):
            rate = by_code.get(row.currency.upper())
            if row.currency.upper() == currency or rate is None or not rate > 0:
                continue
            dated = f" ({date_})" if date_ else ""
            self._rows[key] = replace(
                row, currency=currency, on_demand_per_hour=row.on_demand_per_hour * rate,
                spot_per_hour=None if row.spot_per_hour is None else row.spot_per_hour * rate,
                converted_from=f"{row.currency} at {rate:g} {currency}/{row.currency}{dated}")

    def merge_file(self, path: str | Path) -> None:
        """Add or override rows from a user file; a row may give only the columns it changes."""
        p = Path(path)
        try:
            text = p.read_text("utf-8-sig")  # Excel writes a BOM
        except (OSError, UnicodeDecodeError) as e:
            raise CatalogError(f"{p}: cannot read catalog file: {e}") from e
        if p.suffix.lower() == ".json" or (p.suffix.lower() != ".csv"
                                            and text.lstrip().startswith("[")):
            raw = _parse_json(text, str(p))
        else:
            raw = _parse_csv(text, str(p))
        self._merge(raw, shipped=False, default_source=p.resolve().as_uri())

    def _merge(self, raw: list[_RawRow], *, shipped: bool, default_source: str = "") -> None:
        """A user row without a region overrides the type's home row; with a region, that
        region's row (a new region starts from the home row's shape)."""
        seen: dict[RowKey, int] = {}
        pending: list[InstanceType] = []
        for r in raw:
            where = f"{r.file}:{r.line}"
            provider = _text(r.values.get("provider"), "provider", where)
            itype = _text(r.values.get("instance_type"), "instance_type", where)
            if not provider or not itype:
                raise CatalogError(f"{where}: provider and instance_type must not be empty")
            region = _text(r.values.get("region"), "region", where)
            home = self._home.get((provider.lower(), itype.lower()))
            region_key = region.lower() if region else (home or "")
            key = (provider.lower(), itype.lower(), region_key)
            if key in seen:
                in_region = f" in {region}" if region else ""
                raise CatalogError(f"{where}: {provider}/{itype}{in_region} already given on "
                                   f"line {seen[key]} of the same file")
            seen[key] = r.line
            base = None
            if not shipped:
                base = self._rows.get(key)
                shape = self._rows.get((key[0], key[1], home)) if home is not None else None
                if base is None and shape is not None:
                    # a new region takes the home row's shape, not its region's spot figure
                    # (a market price of that region only)
                    base = replace(shape, spot_per_hour=None, spot_source_url="",
                                   spot_retrieved=None)
            pending.append(_build_row(r.values, where, base, shipped=shipped,
                                      default_source=default_source))
        for row in pending:
            self._put(row)

    def _homes(self) -> Iterator[InstanceType]:
        """One row per (provider, instance_type): its home region's."""
        for (provider, itype), region in self._home.items():
            row = self._rows.get((provider, itype, region))
            if row is not None:
                yield row

    def regions(self, instance: InstanceType) -> tuple[str, ...]:
        """The regions the catalog prices this type in."""
        return tuple(sorted(r.region for k, r in self._rows.items()
                            if (k[0], k[1]) == instance.key))

    def in_region(self, instance: InstanceType, region: str | None
                  ) -> tuple[InstanceType, str | None]:
        """(row, note): this type's row in ``region``; where the catalog has none, the home
        row and a note naming both ("price of us-east-1; eu-north-1 not in the catalog")."""
        if not region:
            return instance, None
        row = self._rows.get((*instance.key, region.strip().lower()))
        if row is not None:
            return row, None
        home = self._rows.get((*instance.key, self._home.get(instance.key, "")), instance)
        return home, (f"price of {home.region or 'an unnamed region'}; {region} not in the "
                      f"catalog for {instance.name}")

    @property
    def rows(self) -> tuple[InstanceType, ...]:
        return tuple(self._rows.values())

    @property
    def providers(self) -> tuple[str, ...]:
        return tuple(sorted({r.provider for r in self._rows.values()}))

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[InstanceType]:
        return iter(self.rows)

    def find(self, instance_type: str) -> tuple[InstanceType, ...]:
        """Every provider's row with this name (``provider/name`` narrows to one provider)."""
        provider, name = _split_name(instance_type)
        name = name.strip().lower()
        return tuple(r for r in self._homes() if r.instance_type.lower() == name
                     and (provider is None or r.provider.lower() == provider.lower()))

    def get(self, instance_type: str, provider: str | None = None,
            region: str | None = None) -> InstanceType | None:
        """The row for this type (case-insensitive) in ``region`` (default: its home), or
        None if unknown, ambiguous, or not priced in that region."""
        if provider is not None:
            key = (provider.strip().lower(), instance_type.strip().lower())
            wanted = region.strip().lower() if region else self._home.get(key)
            return None if wanted is None else self._rows.get((*key, wanted))
        found = self.find(instance_type)
        if len(found) != 1:
            return None
        return found[0] if not region else self.get(found[0].instance_type,
                                                    found[0].provider, region)

    def match(self, gpu_name: str, gpu_count: int, vcpus: int, memory_gib: float,
              provider: str | None = None) -> InstanceType | None:
        """The one row that fits these facts, or None when nothing or several fit.

        ``provider``, when known, restricts the candidates to that provider's rows if it has
        any that fit (and otherwise is ignored).
        """
        best, _ = self.match_explained(gpu_name, gpu_count, vcpus, memory_gib, provider)
        return best

    def match_explained(self, gpu_name: str, gpu_count: int, vcpus: int, memory_gib: float,
               provider: str | None) -> tuple[InstanceType | None, list[InstanceType]]:
        """(winner, tied rows): the tied rows explain an ambiguous answer."""
        model = normalize_gpu_name(gpu_name)
        scored: list[tuple[float, InstanceType]] = []
        for r in self._homes():
            if r.gpu_count != gpu_count or normalize_gpu_name(r.gpu_model) != model:
                continue
            if r.vcpus != vcpus or r.memory_gib <= 0:
                continue
            distance = abs(memory_gib - r.memory_gib) / r.memory_gib
            if distance <= MEMORY_TOLERANCE + 1e-9:
                scored.append((distance, r))
        if provider is not None:
            # the caller knows the cloud (config, DMI): its rows win over closer foreign ones
            preferred = [(d, r) for d, r in scored
                         if r.provider.lower() == provider.strip().lower()]
            scored = preferred or scored
        if not scored:
            return None, []
        best = min(d for d, _ in scored)
        tied = [r for d, r in sorted(scored, key=lambda x: x[0]) if d <= best + TIE_MARGIN]
        return (tied[0] if len(tied) == 1 else None), tied

    def cheapest_fitting(
        self,
        gpu_memory_gib_per_gpu: float,
        gpu_count: int,
        vcpus: float,
        memory_gib: float,
        provider: str | None = None,
        market: str = MARKET_ON_DEMAND,
        currency: str | None = None,
    ) -> InstanceType | None:
        """The cheapest row that fits a workload, or None when nothing does.

        A row fits when it has at least ``gpu_count`` GPUs with at least
        ``gpu_memory_gib_per_gpu`` GiB each, at least ``vcpus`` vCPUs and at least
        ``memory_gib`` GiB of RAM. A workload that needs no GPU (no GPUs and no GPU memory)
        fits CPU-only rows too. ``provider`` and ``currency``, when given, restrict the rows
        (case-insensitive); rows without a price in ``market`` (spot) are skipped. Ties go
        to fewer GPUs, then fewer vCPUs, less RAM and the name, so the answer is stable.
        Pure: the caller adds whatever headroom it wants to the figures.
        """
        check_market(market)
        needs_gpu = gpu_count > 0 or gpu_memory_gib_per_gpu > 0
        want_provider = provider.strip().lower() if provider else None
        want_currency = currency.strip().upper() if currency else None
        best: tuple[tuple[float, int, int, float, str], InstanceType] | None = None
        for r in self._homes():
            rate = r.rate(market)
            if rate is None:
                continue
            if want_provider is not None and r.provider.lower() != want_provider:
                continue
            if want_currency is not None and r.currency.upper() != want_currency:
                continue
            if needs_gpu and (r.gpu_count < max(1, gpu_count) or r.gpu_memory_gib is None
                              or r.gpu_memory_gib < gpu_memory_gib_per_gpu):
                continue
            if r.vcpus < vcpus or r.memory_gib < memory_gib:
                continue
            rank = (rate, r.gpu_count, r.vcpus, r.memory_gib, r.name.lower())
            if best is None or rank < best[0]:
                best = (rank, r)
        return None if best is None else best[1]


@dataclass(frozen=True)
class _RawRow:
    file: str
    line: int
    values: dict[str, Any]  # column -> raw value, only the columns the file gives


def _parse_csv(text: str, file: str) -> list[_RawRow]:
    """Rows of a CSV with a header; ``#`` lines and blank lines are comments."""
    lines = text.splitlines()
    kept = [(n, ln) for n, ln in enumerate(lines, 1)
            if ln.strip() and not ln.lstrip().startswith("#")]
    if not kept:
        raise CatalogError(f"{file}: no header row")
    header_line, header_text = kept[0]
    header = [h.strip() for h in next(csv.reader([header_text]))]
    _check_columns(header, f"{file}:{header_line}")
    rows = []
    for n, ln in kept[1:]:
        cells = next(csv.reader(io.StringIO(ln)))
        if len(cells) != len(header):
            raise CatalogError(f"{file}:{n}: {len(cells)} fields, the header has {len(header)}")
        rows.append(_RawRow(file, n, {h: c.strip() for h, c in zip(header, cells)}))
    return rows


def _parse_json(text: str, file: str) -> list[_RawRow]:
    """A JSON list of objects; each row remembers the line its object starts on."""
    decoder = json.JSONDecoder()
    pos = _skip_ws(text, 0)
    if not text.startswith("[", pos):
        raise CatalogError(f"{file}:{_line(text, pos)}: expected a JSON list of objects")
    pos = _skip_ws(text, pos + 1)
    rows: list[_RawRow] = []
    if text.startswith("]", pos):
        return rows
    while True:
        line = _line(text, pos)
        try:
            obj, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            raise CatalogError(f"{file}:{e.lineno}: invalid JSON: {e.msg}") from e
        if not isinstance(obj, dict):
            raise CatalogError(f"{file}:{line}: expected an object, got {type(obj).__name__}")
        _check_columns(list(obj), f"{file}:{line}")
        rows.append(_RawRow(file, line, obj))
        pos = _skip_ws(text, pos)
        if text.startswith(",", pos):
            pos = _skip_ws(text, pos + 1)
        elif text.startswith("]", pos):
            break
        else:
            raise CatalogError(f"{file}:{_line(text, pos)}: expected ',' or ']'")
    if text[pos + 1:].strip():
        raise CatalogError(f"{file}:{_line(text, pos + 1)}: text after the JSON list")
    return rows


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _check_columns(columns: Sequence[str], where: str) -> None:
    unknown = [c for c in columns if c not in COLUMNS]
    if unknown:
        raise CatalogError(f"{where}: unknown column(s) {', '.join(map(repr, unknown))}; "
                           f"known: {', '.join(COLUMNS)}")
    for c in ("provider", "instance_type"):
        if c not in columns:
            raise CatalogError(f"{where}: missing column {c!r}")


def _build_row(values: dict[str, Any], where: str, base: InstanceType | None, *,
               shipped: bool, default_source: str) -> InstanceType:
    """Validate one raw row into an InstanceType, on top of ``base`` when it overrides."""
    if shipped:
        missing = [c for c in COLUMNS if c not in values and c not in OPTIONAL_COLUMNS]
        if missing:
            raise CatalogError(f"{where}: missing column(s) {', '.join(missing)}")
    elif base is None:
        missing = [c for c in REQUIRED_FOR_NEW if c not in values]
        if missing:
            raise CatalogError(f"{where}: new instance type lacks required column(s) "
                               f"{', '.join(missing)}")
    parsed: dict[str, Any] = {}
    for column, raw in values.items():
        parsed[_FIELD_OF.get(column, column)] = _parse_value(column, raw, where)
    if shipped and (not parsed["source_url"] or not parsed["retrieved"]):
        raise CatalogError(f"{where}: shipped rows need source_url and retrieved")
    if shipped and parsed.get("spot_per_hour") is not None and not parsed.get("notes"):
        raise CatalogError(f"{where}: a shipped spot price needs notes saying what kind of "
                           f"figure it is (list price, or an indicative market price)")
    if not shipped:
        parsed.setdefault("source_url", default_source)
        parsed.setdefault("retrieved", None)
        if "spot_per_hour" in parsed:  # a new spot figure is the user's, not the shipped one's
            parsed.setdefault("spot_source_url", "")
            parsed.setdefault("spot_retrieved", None)
    parsed["origin"] = where
    if base is not None:
        row = replace(base, **parsed)
    else:
        defaults: dict[str, Any] = {"gpu_model": "", "gpu_memory_gib": None, "region": "",
                                    "currency": "USD", "spot_per_hour": None,
                                    "catalog_gpu_share": None, "spot_source_url": "",
                                    "spot_retrieved": None, "notes": ""}
        names = {f.name for f in fields(InstanceType)}
        row = InstanceType(**{**defaults, **{k: v for k, v in parsed.items() if k in names}})
    _check_row(row, where)
    return row


def _parse_value(column: str, raw: Any, where: str) -> Any:
    if column in ("gpu_count", "vcpus"):
        return _number(raw, column, where, integer=True, optional=False)
    if column in ("on_demand_per_hour", "memory_gib"):
        return _number(raw, column, where, integer=False, optional=False)
    if column in ("gpu_memory_gib", "spot_per_hour", "gpu_share"):
        return _number(raw, column, where, integer=False, optional=True)
    text = _text(raw, column, where)
    if column == "currency":
        return text.upper() or "USD"
    if column in ("retrieved", "spot_retrieved"):
        if not text:
            return None
        try:
            return date.fromisoformat(text).isoformat()
        except ValueError:
            raise CatalogError(f"{where}: {column} must be an ISO date (YYYY-MM-DD), "
                               f"got {text!r}") from None
    return text


def _text(raw: Any, column: str, where: str) -> str:
    if raw is None:
        return ""
    if not isinstance(raw, str):
        raise CatalogError(f"{where}: {column} must be text, got {raw!r}")
    return raw.strip()


def _number(raw: Any, column: str, where: str, *, integer: bool, optional: bool) -> Any:
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        if optional:
            return None
        raise CatalogError(f"{where}: {column} is empty")
    if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
        raise CatalogError(f"{where}: {column} must be a number, got {raw!r}")
    try:
        value = float(raw)
    except ValueError:
        raise CatalogError(f"{where}: {column} must be a number, got {raw!r}") from None
    if not math.isfinite(value):
        raise CatalogError(f"{where}: {column} must be finite, got {raw!r}")
    if value < 0:
        raise CatalogError(f"{where}: {column} must not be negative, got {raw!r}")
    if integer:
        if value != int(value):
            raise CatalogError(f"{where}: {column} must be a whole number, got {raw!r}")
        return int(value)
    return value


def _check_row(row: InstanceType, where: str) -> None:
    """Cross-column rules: a row the spend model could not use is rejected at load time."""
    if row.is_gpu and not row.gpu_model:
        raise CatalogError(f"{where}: gpu_count is {row.gpu_count} but gpu_model is empty")
    if not row.is_gpu and row.gpu_model:
        raise CatalogError(f"{where}: gpu_model {row.gpu_model!r} given with gpu_count 0")
    if row.vcpus < 1:
        raise CatalogError(f"{where}: vcpus must be at least 1")
    if row.memory_gib <= 0:
        raise CatalogError(f"{where}: memory_gib must be positive")
    share = row.catalog_gpu_share
    if share is not None and share > 1:
        raise CatalogError(f"{where}: gpu_share must be between 0 and 1, got {share}")
    if share and not row.is_gpu:
        raise CatalogError(f"{where}: gpu_share must be empty or 0 for a CPU-only type")


def _split_name(name: str) -> tuple[str | None, str]:
    provider, sep, rest = name.strip().partition("/")
    return (provider.strip(), rest.strip()) if sep else (None, name.strip())


def check_market(market: str) -> None:
    if market not in MARKETS:
        raise ValueError(f"market must be one of {', '.join(MARKETS)}, got {market!r}")


def format_gib(x: float) -> str:
    """GiB as the details print them (one decimal below 100)."""
    return f"{x:.1f}" if x < 100 else f"{x:.0f}"
