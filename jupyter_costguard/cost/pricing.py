"""What the instance costs per hour, and which part of that is the GPUs.

Which instance are we on? ``resolve_pricing`` answers, first match wins (the order of truth):

1. the configured ``instance_type`` (``c.CostGuard.instance_type``);
2. the ``COSTGUARD_INSTANCE_TYPE`` environment variable;
3. the cloud's metadata service (``cloud.metadata``: AWS, GCP, Azure), when it answered with
   a type the catalog has;
4. detection: the NVML GPU model and count plus the host's vCPUs and RAM matched against the
   catalog (GPU model and count exact, vCPUs exact since a VM sees exactly its vCPUs, memory
   within ±10% since the OS reports less than nominal; the closest memory wins, and a tie
   between rows is ambiguous and detects nothing). CPU-only hosts are never detected by
   shape: every laptop would match some cloud VM;
5. a configured ``hourly_rate`` with no instance;
6. otherwise unpriced, with a detail saying what was tried.

Region and market follow the same order: ``c.CostGuard.region`` / ``market``, then
``COSTGUARD_REGION`` / ``COSTGUARD_MARKET``, then the metadata; else the type's home region
in the catalog and on-demand. A region the catalog lacks for the type is priced at the home
region's row and says so (``region_note``). ``market`` is always the machine's market; a spot
machine whose type has no spot price in the catalog is priced at the on-demand rate
(``market_priced``) and says so, and how to fix it (``market_note``): the cost shown is then
too high, never silently. In a container that holds part of the instance
(``cloud.container``), a catalog price becomes the container's share of it.

An instance type may be written ``provider/instance_type`` where the bare name exists for
more than one provider. An unknown configured type is not an error: the server runs unpriced
and says why. Every answer keeps, in ``tried``, a sentence per step it took.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from jupyter_costguard.cloud.container import CgroupLimits, ContainerShare, container_share
from jupyter_costguard.cloud.metadata import CloudIdentity, MetadataResult
from jupyter_costguard.cost.allocation import MachineRates, cpu_capacity, gpu_count
from jupyter_costguard.cost.catalog import (
    GIB_BYTES,
    MARKET_ON_DEMAND,
    MARKET_SPOT,
    Catalog,
    InstanceType,
    check_market,
    format_gib,
    normalize_gpu_name,
)
from jupyter_costguard.sampling.records import GpuReading, HostSample

#: GPU share when only an hourly rate is configured and GPUs are present.
HOURLY_RATE_GPU_SHARE = 0.9

ENV_INSTANCE_TYPE = "COSTGUARD_INSTANCE_TYPE"

SOURCE_CONFIG = "config"
SOURCE_ENVIRONMENT = "environment"
SOURCE_DETECTED = "detected"
SOURCE_HOURLY_RATE = "hourly_rate"
SOURCE_UNPRICED = "unpriced"
SOURCE_METADATA = "metadata"
SOURCE_DEFAULT = "default"

ENV_REGION = "COSTGUARD_REGION"
ENV_MARKET = "COSTGUARD_MARKET"

def provider_from_dmi(sys_vendor: str, product_name: str = "") -> str | None:
    """The cloud named by the SMBIOS/DMI strings, to break ties in detection.

    The caller reads ``/sys/class/dmi/id/sys_vendor`` and ``product_name`` (Linux); this stays
    pure. GPU clouds that run plain KVM (Lambda, CoreWeave) do not identify themselves, and a
    local Hyper-V guest looks like Azure (harmless: the hint only narrows catalog matches).
    """
    vendor = sys_vendor.strip().lower()
    product = product_name.strip().lower()
    if vendor.startswith("amazon") or product.startswith("amazon ec2"):
        return "aws"
    if vendor == "google" or product.startswith("google compute engine"):
        return "gcp"
    if vendor.startswith("microsoft") and product == "virtual machine":
        return "azure"
    return None


@dataclass(frozen=True)
class PricingConfig:
    """What the configuration says about prices (c.CostGuard.instance_type, market, ...).

    ``market`` and ``region`` None: ask the machine (metadata), else on-demand and the
    type's home region."""

    instance_type: str | None = None
    hourly_rate: float | None = None
    market: str | None = None
    currency: str = "USD"
    gpu_share: float | None = None
    catalog_files: tuple[str, ...] = ()
    region: str | None = None
    container_share: str = "auto"
    exchange_rates: tuple[tuple[str, float], ...] = ()
    exchange_rates_date: str | None = None
    stale_after_days: int = 90


@dataclass(frozen=True)
class Pricing:
    """What this server costs per hour, where that came from, and how it splits."""

    instance: InstanceType | None
    rate_per_hour: float | None
    currency: str
    market: str  # "on-demand" | "spot": the machine's market, whatever was priced
    source: str  # "config" | "environment" | "metadata" | "detected" | "hourly_rate" | ...
    detail: str  # a sentence for humans: what matched, or why nothing did
    gpu_share: float
    #: where the machine is (config, environment, metadata), and whose price is used
    region: str | None = None
    region_note: str | None = None
    region_source: str = SOURCE_DEFAULT
    market_source: str = SOURCE_CONFIG
    #: the whole instance's rate, before a container's share
    instance_rate_per_hour: float | None = None
    share: ContainerShare | None = None
    #: GPUs the rate covers (the instance's, or the container's), for the spend model
    gpu_count: int | None = None
    #: CPUs the host part covers (a container's cgroup limit), else the host's
    cpu_capacity: float | None = None
    provider: str | None = None
    tried: tuple[str, ...] = ()
    #: the market whose rate is used (on-demand where spot has no price), and why they differ
    market_priced: str | None = None
    market_note: str | None = None

    def __post_init__(self) -> None:
        if self.market_priced is None:
            object.__setattr__(self, "market_priced", self.market)

    @property
    def priced(self) -> bool:
        return self.rate_per_hour is not None

    @property
    def gpu_rate_per_hour(self) -> float | None:
        """The GPU part of the rate (all GPUs together)."""
        return None if self.rate_per_hour is None else self.rate_per_hour * self.gpu_share

    @property
    def host_rate_per_hour(self) -> float | None:
        return None if self.rate_per_hour is None else self.rate_per_hour * (1 - self.gpu_share)

    def machine_rates(self, host_cpus: int, gpus_seen: int) -> MachineRates:
        """This price in the allocation model's rates (`cost/allocation.py`): the ledger's
        split and the offload estimate both take them from here."""
        vcpus = self.instance.vcpus if self.instance is not None else None
        priced = self.gpu_count if self.instance is not None else None
        return MachineRates(self.rate_per_hour or 0.0, self.gpu_share,
                            gpu_count(priced, gpus_seen),
                            cpu_capacity(self.cpu_capacity, vcpus, host_cpus))


@dataclass(frozen=True)
class ContainerFacts:
    """What the container share is decided from (read once by the caller)."""

    limits: CgroupLimits
    mode: str = "auto"
    root_fs: str = "/"


def _pick(configured: str | None, environ: Mapping[str, str], env: str,
          machine: str | None) -> tuple[str | None, str]:
    """(value, source) in the order config > environment > the machine."""
    if configured and configured.strip():
        return configured.strip(), SOURCE_CONFIG
    if environ.get(env, "").strip():
        return environ[env].strip(), SOURCE_ENVIRONMENT
    if machine:
        return machine, SOURCE_METADATA
    return None, SOURCE_DEFAULT


def resolve_pricing(
    catalog: Catalog,
    *,
    instance_type: str | None,
    environ: Mapping[str, str],
    gpu: GpuReading | None,
    host: HostSample | None,
    hourly_rate: float | None,
    market: str | None = None,
    currency: str = "USD",
    gpu_share: float | None = None,
    provider: str | None = None,
    region: str | None = None,
    metadata: MetadataResult | None = None,
    container: ContainerFacts | None = None,
) -> Pricing:
    """Decide the rate in the documented order (module docstring); never raises on lookups.

    ``currency`` is the currency of ``hourly_rate``; catalog rows carry their own.
    ``provider`` (e.g. from `provider_from_dmi`) picks among providers when a configured
    name or the detected shape fits several; the metadata's provider beats it.
    ``metadata`` is what the cloud's metadata service said (None: not asked, or not yet);
    ``container`` the cgroup facts the container share is decided from (None: no share).
    """
    if market is not None:
        check_market(market)  # a configured market must be a real one
    identity = metadata.identity if metadata is not None else None
    tried: list[str] = list(metadata.tried) if metadata is not None else [
        "cloud metadata: not asked (yet)"]
    market_value, market_source = _market(market, environ, identity, tried)
    where, region_source = _pick(region, environ, ENV_REGION,
                                 identity.region if identity else None)
    _check_numbers(gpu_share, hourly_rate)
    r = _Resolution(catalog, environ, gpu, host, container, currency, gpu_share, market_value,
                    market_source, where, region_source,
                    identity.provider if identity is not None else provider, tried)

    by_name = r.from_name(instance_type)
    if by_name is not None:
        return by_name
    if identity is not None:
        row = catalog.get(identity.instance_type, identity.provider)
        if row is not None:
            return r.priced(row, SOURCE_METADATA, f"{identity.detail}: {row.describe()}")
        tried.append(f"the metadata's {identity.provider}/{identity.instance_type} is not in "
                     f"the price catalog")

    found, said = _detect(catalog, gpu, host, r.provider)
    tried.append(f"shape: {said}")
    if found is not None:
        return r.priced(found, SOURCE_DETECTED, f"detected {said}")

    why_not = "" if identity is None else (
        f"metadata named {identity.provider}/{identity.instance_type}, not in the catalog, ")
    tried_text = f"no instance_type configured, {ENV_INSTANCE_TYPE} unset, {why_not}{said}"
    if hourly_rate is not None:
        return r.from_hourly_rate(hourly_rate, tried_text)
    return r.unpriced(f"{tried_text}; set c.CostGuard.instance_type or c.CostGuard.hourly_rate")


def _market(configured: str | None, environ: Mapping[str, str],
            identity: CloudIdentity | None, tried: list[str]) -> tuple[str, str]:
    """(market, source): on-demand or spot, in the order config > environment > metadata;
    anything else is noted in `tried` and priced on-demand."""
    value, source = _pick(configured, environ, ENV_MARKET,
                          identity.market if identity else None)
    value = (value or MARKET_ON_DEMAND).lower()
    if value not in (MARKET_ON_DEMAND, MARKET_SPOT):
        tried.append(f"market {value!r} ({source}) is not on-demand or spot; on-demand used")
        value, source = MARKET_ON_DEMAND, SOURCE_DEFAULT
    if source == SOURCE_DEFAULT:
        source = SOURCE_CONFIG  # the documented default, on-demand
    check_market(value)
    return value, source


def _check_numbers(gpu_share: float | None, hourly_rate: float | None) -> None:
    """A configured share or rate outside its range is the operator's error: raise."""
    if gpu_share is not None and not (0.0 <= gpu_share <= 1.0):
        raise ValueError(f"gpu_share must be between 0 and 1, got {gpu_share!r}")
    if hourly_rate is not None and not (math.isfinite(hourly_rate) and hourly_rate >= 0):
        raise ValueError(f"hourly_rate must be a non-negative number, got {hourly_rate!r}")


@dataclass
class _Resolution:
    """One `resolve_pricing` call: what it has settled (market, region, provider), what it
    has tried, and the ways it can end, each answer stamped with all of that."""

    catalog: Catalog
    environ: Mapping[str, str]
    gpu: GpuReading | None
    host: HostSample | None
    container: ContainerFacts | None
    currency: str  # of a configured hourly_rate
    gpu_share: float | None  # configured
    market: str
    market_source: str
    region: str | None
    region_source: str
    provider: str | None
    tried: list[str]

    def done(self, p: Pricing) -> Pricing:
        return replace(p, tried=tuple(self.tried), region=self.region,
                       region_source=self.region_source, market_source=self.market_source,
                       provider=self.provider)

    def unpriced(self, detail: str) -> Pricing:
        share = self.gpu_share if self.gpu_share is not None else 0.0
        return self.done(Pricing(None, None, self.currency, self.market, SOURCE_UNPRICED,
                                 detail, share))

    def priced(self, row: InstanceType, source: str, what: str) -> Pricing:
        """A catalog row's price in the region, then the container's share of it."""
        regional, note = self.catalog.in_region(row, self.region)
        if note:
            self.tried.append(note)
        p = _priced(regional, source, what, self.market, self.gpu_share)
        if p.market_note:
            self.tried.append(p.market_note)
        p = replace(p, region_note=note, instance_rate_per_hour=p.rate_per_hour,
                    gpu_count=regional.gpu_count)
        if note:
            p = replace(p, detail=f"{p.detail}; {note}")
        return self.done(_with_share(p, self.container, self.environ, self.gpu, self.host,
                                     self.tried))

    def from_name(self, instance_type: str | None) -> Pricing | None:
        """The configured type, else the environment's; None when neither names one."""
        configured = (instance_type or "").strip()
        if configured:
            return self.named(configured, SOURCE_CONFIG,
                              f"c.CostGuard.instance_type = {configured!r}",
                              "fix c.CostGuard.instance_type")
        from_env = self.environ.get(ENV_INSTANCE_TYPE, "").strip()
        if from_env:
            return self.named(from_env, SOURCE_ENVIRONMENT, f"{ENV_INSTANCE_TYPE}={from_env!r}",
                              f"fix {ENV_INSTANCE_TYPE}")
        return None

    def named(self, name: str, source: str, said: str, fix: str) -> Pricing:
        """A named type: priced from its row, or unpriced with what to fix."""
        self.tried.append(said)
        row, why = _from_name(self.catalog, name, self.provider)
        if row is not None:
            return self.priced(row, source, f"{said}: {row.describe()}")
        if why:  # ambiguous: the sentence says how to choose
            return self.unpriced(f"{said} {why}")
        return self.unpriced(f"{said} is not in the price catalog; {fix}, add the type with "
                             f"an extra catalog file, or set c.CostGuard.hourly_rate; running "
                             f"unpriced")

    def from_hourly_rate(self, hourly_rate: float, tried_text: str) -> Pricing:
        """No instance known: the configured rate, with a GPU share if GPUs are here."""
        if self.gpu_share is not None:
            share, share_why = self.gpu_share, "as configured"
        elif _physical_gpus(self.gpu):
            share, share_why = HOURLY_RATE_GPU_SHARE, "default with GPUs present"
        else:
            share, share_why = 0.0, "no GPUs seen"
        detail = (f"c.CostGuard.hourly_rate = {_rate_text(hourly_rate)} {self.currency}/h "
                  f"{self.market} (GPU share {share:.2f}, {share_why}); {tried_text}")
        return self.done(Pricing(None, hourly_rate, self.currency, self.market,
                                 SOURCE_HOURLY_RATE, detail, share,
                                 instance_rate_per_hour=hourly_rate))


def _with_share(p: Pricing, container: ContainerFacts | None, environ: Mapping[str, str],
                gpu: GpuReading | None, host: HostSample | None, tried: list[str]) -> Pricing:
    """The container's part of a catalog price (module docstring of cloud.container)."""
    if container is None or p.instance is None or p.rate_per_hour is None:
        return p
    if host is None or gpu is None:
        tried.append("container share: waiting for the first GPU and host reading")
        return p
    cpus, memory = host.cpu_count, host.memory_total_bytes
    held = len(_physical_gpus(gpu))
    share, said = container_share(
        mode=container.mode, environ=environ, limits=container.limits, host_cpus=cpus,
        host_memory_bytes=memory, gpus_held=held, gpus_instance=p.instance.gpu_count,
        root_fs=Path(container.root_fs))
    tried.append(f"container share: {said}")
    if share is None:
        return p
    rate = share.rate(p.rate_per_hour, p.gpu_share)
    return replace(
        p, rate_per_hour=rate, gpu_share=share.container_gpu_share(p.gpu_share),
        share=share, gpu_count=share.gpus_held,
        cpu_capacity=container.limits.cpus if share.cpu_share < 1.0 else None,
        detail=(f"{p.detail}; container share {rate / p.rate_per_hour:.1%} of the instance "
                f"({_rate_text(rate)} {p.currency}/h): {said}"))


def _from_name(catalog: Catalog, name: str, provider: str | None
               ) -> tuple[InstanceType | None, str]:
    """(row, why not): a configured type's home row; "why" is empty when it is unknown and
    says how to choose when several providers have it."""
    row = catalog.get(name)
    if row is None and provider is not None and "/" not in name:
        row = catalog.get(name, provider)
    if row is not None:
        return row, ""
    found = catalog.find(name)
    if len(found) > 1:
        options = ", ".join(repr(r.name) for r in found)
        return None, (f"exists for several providers ({options}); write it as "
                      f"provider/instance_type to say which; running unpriced")
    return None, ""


def _priced(row: InstanceType, source: str, what: str, market: str,
            gpu_share: float | None) -> Pricing:
    rate = row.rate(market)
    used_market = market
    note = None
    if rate is None:
        rate, used_market = row.on_demand_per_hour, MARKET_ON_DEMAND
        note = spot_fallback_note(row)
    dated_row = row.priced_as(used_market)
    share = gpu_share if gpu_share is not None else row.gpu_share
    share_why = ("as configured" if gpu_share is not None
                 else "from catalog" if row.catalog_gpu_share is not None else "default rule")
    kind = ("spot snapshot" if used_market == MARKET_SPOT else "list price")
    dated = (f"{kind} of {dated_row.retrieved}" if dated_row.retrieved
             else "user-supplied price")
    detail = (f"{what}; {_rate_text(rate)} {row.currency}/h {used_market} ({dated}, "
              f"{dated_row.source_url or row.origin}), GPU share {share:.2f} ({share_why})"
              + (f"; {note}" if note else ""))
    return Pricing(dated_row, rate, row.currency, market, source, detail, share,
                   market_priced=used_market, market_note=note)


def spot_fallback_note(row: InstanceType) -> str:
    """What a spot machine priced at on-demand is told: that, why, and how to fix it."""
    where = f" in {row.region}" if row.region else ""
    return (f"spot machine, but the catalog has no spot price for {row.name}{where}: priced "
            f"at the on-demand rate, so the cost shown is too high (spot is often 60-90% "
            f"cheaper); add spot_per_hour for it in an extra catalog file "
            f"(c.CostGuard.catalog_files), or install the prices extra (gpuhunt) and run "
            f"`jupyter costguard catalog update` (the server then refreshes it every "
            f"c.CostGuard.catalog_refresh_hours)")


def _physical_gpus(gpu: GpuReading | None) -> list[str]:
    """Names of the physical GPUs: non-MIG devices, plus the parents of MIG instances."""
    if gpu is None or gpu.status != "ok":
        return []
    names: dict[str, str] = {}
    for g in gpu.gpus:
        if g.mig_parent_uuid is None:
            names[g.uuid] = g.name
    for g in gpu.gpus:
        if g.mig_parent_uuid is not None and g.mig_parent_uuid not in names:
            names[g.mig_parent_uuid] = re.sub(r"\s+MIG\s+\S+$", "", g.name, flags=re.I)
    return list(names.values())


def _detect(catalog: Catalog, gpu: GpuReading | None, host: HostSample | None,
            provider: str | None) -> tuple[InstanceType | None, str]:
    """(row, sentence): the sentence says what matched, or why detection found nothing."""
    if gpu is None:
        return None, "no GPU reading yet to detect the instance from"
    if gpu.status != "ok":
        reason = f" ({gpu.detail})" if gpu.detail else ""
        if gpu.status == "no-gpu":
            return None, (f"no GPU visible{reason} and CPU-only hosts are not detected by "
                          f"shape")
        return None, f"GPU reading failed{reason}, so the instance cannot be detected"
    names = _physical_gpus(gpu)
    if not names:
        return None, ("no GPU visible and CPU-only hosts are not detected by shape")
    models = sorted({normalize_gpu_name(n) for n in names})
    if len(models) > 1:
        return None, f"mixed GPU models ({', '.join(sorted(set(names)))}) match no catalog row"
    if host is None:
        return None, f"{len(names)}x {names[0]} seen but host CPU/RAM unknown"
    mem = host.memory_total_bytes / GIB_BYTES
    facts = f"{len(names)}x {names[0]} with {host.cpu_count} vCPU/{format_gib(mem)} GiB"
    row, tied = catalog.match_explained(names[0], len(names), host.cpu_count, mem, provider)
    if row is not None:
        return row, f"{facts} as {row.describe()}"
    if tied:
        options = ", ".join(repr(r.name) for r in tied)
        return None, f"{facts} fits several catalog rows equally ({options})"
    return None, f"no catalog match for {facts}"


def _rate_text(x: float) -> str:
    """A rate for the pricing detail line: four significant figures, whole units from 1,000."""
    return f"{x:.4g}" if x < 1000 else f"{x:,.0f}"


@dataclass(frozen=True)
class MachinePrice:
    """What one hour of a machine a job ran on costs (a SkyPilot job's instance), and whence."""

    rate_per_hour: float
    currency: str
    market: str  # the market priced: on-demand where the catalog has no spot figure
    detail: str


def price_machine(catalog: Catalog, provider: str, instance_type: str, region: str | None,
                  market: str) -> MachinePrice | None:
    """The catalog's price of ``provider``'s ``instance_type`` in ``region`` (its home
    region's where the catalog has none there) on ``market``; None when it has no such type."""
    row = catalog.get(instance_type, provider)
    if row is None:
        return None
    row, region_note = catalog.in_region(row, region)
    p = _priced(row, SOURCE_METADATA, f"{provider} {row.instance_type}", market, None)
    if p.rate_per_hour is None:
        return None
    detail = p.detail + (f"; {region_note}" if region_note else "")
    return MachinePrice(p.rate_per_hour, p.currency, p.market_priced or market, detail)
