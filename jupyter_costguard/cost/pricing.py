"""What the instance costs per hour, and which part of that is the GPUs.

Which instance are we on? ``resolve_pricing`` answers, first match wins:

1. the configured ``instance_type`` (``c.CostGuard.instance_type``);
2. the ``COSTGUARD_INSTANCE_TYPE`` environment variable;
3. detection: the NVML GPU model and count plus the host's vCPUs and RAM matched against the
   catalog (GPU model and count exact, vCPUs exact since a VM sees exactly its vCPUs, memory
   within ±10% since the OS reports less than nominal; the closest memory wins, and a tie
   between rows is ambiguous and detects nothing). CPU-only hosts are never detected by
   shape: every laptop would match some cloud VM;
4. a configured ``hourly_rate`` with no instance;
5. otherwise unpriced, with a detail saying what was tried.

An instance type may be written ``provider/instance_type`` where the bare name exists for
more than one provider. An unknown configured type is not an error: the server runs unpriced
and says why.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from jupyter_costguard.cost.catalog import (
    GIB_BYTES,
    MARKET_ON_DEMAND,
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
    """What the configuration says about prices (c.CostGuard.instance_type, market, ...)."""

    instance_type: str | None = None
    hourly_rate: float | None = None
    market: str = "on-demand"
    currency: str = "USD"
    gpu_share: float | None = None
    catalog_files: tuple[str, ...] = ()



@dataclass(frozen=True)
class Pricing:
    """What this server costs per hour, where that came from, and how it splits."""

    instance: InstanceType | None
    rate_per_hour: float | None
    currency: str
    market: str  # "on-demand" | "spot"
    source: str  # "config" | "environment" | "detected" | "hourly_rate" | "unpriced"
    detail: str  # a sentence for humans: what matched, or why nothing did
    gpu_share: float

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


def resolve_pricing(
    catalog: Catalog,
    *,
    instance_type: str | None,
    environ: Mapping[str, str],
    gpu: GpuReading | None,
    host: HostSample | None,
    hourly_rate: float | None,
    market: str = MARKET_ON_DEMAND,
    currency: str = "USD",
    gpu_share: float | None = None,
    provider: str | None = None,
) -> Pricing:
    """Decide the rate in the documented order (module docstring); never raises on lookups.

    ``currency`` is the currency of ``hourly_rate``; catalog rows carry their own.
    ``provider`` (e.g. from `provider_from_dmi`) picks among providers when a configured
    name or the detected shape fits several.
    """
    check_market(market)
    if gpu_share is not None and not (0.0 <= gpu_share <= 1.0):
        raise ValueError(f"gpu_share must be between 0 and 1, got {gpu_share!r}")
    if hourly_rate is not None and not (math.isfinite(hourly_rate) and hourly_rate >= 0):
        raise ValueError(f"hourly_rate must be a non-negative number, got {hourly_rate!r}")

    def unpriced(detail: str) -> Pricing:
        return Pricing(None, None, currency, market, SOURCE_UNPRICED, detail,
                       gpu_share if gpu_share is not None else 0.0)

    configured = (instance_type or "").strip()
    if configured:
        return _from_name(catalog, configured, SOURCE_CONFIG,
                          f"c.CostGuard.instance_type = {configured!r}", market, gpu_share,
                          unpriced, "fix c.CostGuard.instance_type", provider)
    from_env = environ.get(ENV_INSTANCE_TYPE, "").strip()
    if from_env:
        return _from_name(catalog, from_env, SOURCE_ENVIRONMENT,
                          f"{ENV_INSTANCE_TYPE}={from_env!r}", market, gpu_share, unpriced,
                          f"fix {ENV_INSTANCE_TYPE}", provider)

    found, said = _detect(catalog, gpu, host, provider)
    if found is not None:
        return _priced(found, SOURCE_DETECTED, f"detected {said}", market, gpu_share)

    tried = f"no instance_type configured, {ENV_INSTANCE_TYPE} unset, {said}"
    if hourly_rate is not None:
        has_gpus = bool(_physical_gpus(gpu))
        if gpu_share is not None:
            share, share_why = gpu_share, "as configured"
        elif has_gpus:
            share, share_why = HOURLY_RATE_GPU_SHARE, "default with GPUs present"
        else:
            share, share_why = 0.0, "no GPUs seen"
        detail = (f"c.CostGuard.hourly_rate = {_money(hourly_rate)} {currency}/h {market} "
                  f"(GPU share {share:.2f}, {share_why}); {tried}")
        return Pricing(None, hourly_rate, currency, market, SOURCE_HOURLY_RATE, detail, share)
    return unpriced(f"{tried}; set c.CostGuard.instance_type or c.CostGuard.hourly_rate")


def _from_name(catalog: Catalog, name: str, source: str, said: str, market: str,
               gpu_share: float | None, unpriced: Callable[[str], Pricing],
               fix: str, provider: str | None) -> Pricing:
    row = catalog.get(name)
    if row is None and provider is not None and "/" not in name:
        row = catalog.get(name, provider)
    if row is not None:
        return _priced(row, source, f"{said}: {row.describe()}", market, gpu_share)
    found = catalog.find(name)
    if len(found) > 1:
        options = ", ".join(repr(r.name) for r in found)
        return unpriced(f"{said} exists for several providers ({options}); write it as "
                        f"provider/instance_type to say which; running unpriced")
    return unpriced(f"{said} is not in the price catalog; {fix}, add the type with an extra "
                    f"catalog file, or set c.CostGuard.hourly_rate; running unpriced")


def _priced(row: InstanceType, source: str, what: str, market: str,
            gpu_share: float | None) -> Pricing:
    rate = row.rate(market)
    used_market = market
    note = ""
    if rate is None:
        rate, used_market = row.on_demand_per_hour, MARKET_ON_DEMAND
        note = ("; spot requested but the catalog has no spot price for this type, so the "
                "on-demand rate is used")
    share = gpu_share if gpu_share is not None else row.gpu_share
    share_why = ("as configured" if gpu_share is not None
                 else "from catalog" if row.catalog_gpu_share is not None else "default rule")
    dated = f"list price of {row.retrieved}" if row.retrieved else "user-supplied price"
    detail = (f"{what}; {_money(rate)} {row.currency}/h {used_market} ({dated}, "
              f"{row.source_url or row.origin}), GPU share {share:.2f} ({share_why}){note}")
    return Pricing(row, rate, row.currency, used_market, source, detail, share)


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


def _money(x: float) -> str:
    return f"{x:.4g}" if x < 1000 else f"{x:,.0f}"
