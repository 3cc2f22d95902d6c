"""The service's own meter: what each server costs, from what the Hub knows and the site's
price table, never from what the server says.

A user controls their own server (its config, its process, its home), so every figure in
its report is their word. What they cannot touch is the Hub's record — which servers run,
since when (`started`), with which profile — and the site's `profile_prices`: profile slug
-> what the profile holds, priced here by the same code the servers price themselves with
(`cost.pricing.resolve_pricing` for the catalog row, region and market, and
`cloud.container.container_share` for a profile's part of the instance), so an honest
server's reported rate and its meter agree to the cent. A table entry is either

    {"instance_type": "aws/g5.2xlarge", "market": "spot", "region": "eu-west-1",
     "gpus": 1, "cpus": 4, "memory": "16G"}      # a share of the instance, as a pod holds
    {"hourly_rate": 2.5, "gpus": 1}                # a plain rate in the site's currency

The table is also the site's list of profiles (hub/siteprofiles.py): a profile is a GPU one
when it holds GPUs (`gpus`, else the instance's), and a spawn of a profile it does not list is
refused.

`gpus`, `cpus` and `memory` are the limits the profile gives the pod (`memory` as its
`mem_limit` is written: K, M, G, T are powers of 1024 as JupyterHub reads them, "16G" is 16
GiB; Kubernetes' "16Gi" means the same; or bytes); without them the profile holds the whole
instance.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jupyter_costguard.cloud.container import CgroupLimits, container_share
from jupyter_costguard.cost.catalog import Catalog, CatalogError
from jupyter_costguard.cost.pricing import resolve_pricing

#: the keys a profile_prices entry may have
KEYS = frozenset({"instance_type", "market", "region", "gpus", "cpus", "memory",
                  "hourly_rate", "gpu_share"})
#: memory units (bytes per unit): JupyterHub's ByteSpecification, which KubeSpawner's
#: mem_limit is, reads K/M/G/T as powers of 1024; Kubernetes writes those as Ki/Mi/Gi/Ti
UNITS = {"": 1, "K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30, "T": 2 ** 40,
         "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40}


class MeterConfigError(ValueError):
    """A profile_prices entry that cannot be priced: the service refuses to start with it."""


@dataclass(frozen=True)
class ProfilePrice:
    """What one profile costs per hour on this site, and where that came from."""

    profile: str
    rate_per_hour: float
    currency: str
    #: "catalog" (an instance type, or a share of one) or "hourly_rate"
    source: str
    #: a sentence for the admin page: the row, its date and source, the share
    detail: str
    #: the catalog's date of the price (None for a plain rate)
    retrieved: str | None = None
    market: str = "on-demand"
    #: the GPUs a server of this profile holds: whether it is a GPU profile
    #: (hub/siteprofiles.py); None: a plain rate that does not say
    gpus: int | None = None


def parse_bytes(value: Any) -> int:
    """A profile's memory limit ("16G" and "16Gi" are both 16 GiB; 17179869184) in bytes."""
    if isinstance(value, bool):
        raise ValueError(f"not a memory size: {value!r}")
    if isinstance(value, (int, float)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"not a memory size: {value!r}")
        return int(value)
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]i?)?\s*", str(value))
    if not m:
        raise ValueError(f"not a memory size: {value!r} (write it as the profile's "
                         "mem_limit: \"16G\", or \"16Gi\", or bytes)")
    size = int(float(m[1]) * UNITS[m[2] or ""])
    if size <= 0:
        raise ValueError(f"not a memory size: {value!r}")
    return size


def _positive(spec: Mapping[str, Any], key: str, where: str, *, integer: bool = False,
              ) -> Any:
    value = spec.get(key)
    if value is None:
        return None
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok or not math.isfinite(value) or value < 0:
        kind = "a whole number" if integer else "a number"
        raise MeterConfigError(f"{where}: {key} must be {kind} >= 0, not {value!r}")
    return value


def price_profile(profile: str, spec: Mapping[str, Any], catalog: Catalog,
                  currency: str) -> ProfilePrice:
    """One profile's price (MeterConfigError with the reason when it has none)."""
    where = f"c.CostGuardHub.profile_prices[{profile!r}]"
    if not isinstance(spec, Mapping):
        raise MeterConfigError(f"{where} must be a dict, not {type(spec).__name__}")
    unknown = sorted(set(spec) - KEYS)
    if unknown:
        raise MeterConfigError(f"{where}: unknown keys {unknown} (known: {sorted(KEYS)})")
    rate = _positive(spec, "hourly_rate", where)
    name = spec.get("instance_type")
    if (rate is None) == (name is None):
        raise MeterConfigError(f"{where} needs an instance_type or an hourly_rate (one)")
    if rate is not None:
        held = _positive(spec, "gpus", where, integer=True)
        return ProfilePrice(profile, float(rate), currency, "hourly_rate",
                            f"a plain rate of {rate:g} {currency}/h (profile_prices)",
                            gpus=held)
    if not isinstance(name, str) or not name.strip():
        raise MeterConfigError(f"{where}: instance_type must be a name, not {name!r}")
    market = spec.get("market")
    region = spec.get("region")
    for key, value in (("market", market), ("region", region)):
        if value is not None and not isinstance(value, str):
            raise MeterConfigError(f"{where}: {key} must be text, not {value!r}")
    gpu_share = _positive(spec, "gpu_share", where)
    try:
        pricing = resolve_pricing(
            catalog, instance_type=name, environ={}, gpu=None, host=None, hourly_rate=None,
            market=market, currency=currency, gpu_share=gpu_share, region=region)
    except (ValueError, CatalogError) as e:
        raise MeterConfigError(f"{where}: {e}") from None
    row = pricing.instance
    if row is None or pricing.rate_per_hour is None:
        raise MeterConfigError(f"{where}: {pricing.detail}")
    if pricing.currency.upper() != currency.upper():
        raise MeterConfigError(
            f"{where}: {row.name} is priced in {pricing.currency}, the site counts in "
            f"{currency}; add c.CostGuardHub.exchange_rates = {{{pricing.currency!r}: ...}}")
    rate = pricing.rate_per_hour
    detail = pricing.detail.replace(f"c.CostGuard.instance_type = {name.strip()!r}",
                                    f"profile_prices[{profile!r}]")
    gpus = _positive(spec, "gpus", where, integer=True)
    cpus = _positive(spec, "cpus", where)
    memory = spec.get("memory")
    if gpus is not None or cpus is not None or memory is not None:
        try:
            mem = None if memory is None else parse_bytes(memory)
        except ValueError as e:
            raise MeterConfigError(f"{where}: memory: {e}") from None
        if gpus is not None and gpus > row.gpu_count:
            raise MeterConfigError(f"{where}: {gpus} GPUs, but {row.name} has "
                                   f"{row.gpu_count}")
        limits = CgroupLimits(cpus=float(cpus) if cpus else None, memory_bytes=mem,
                              path=f"/profile/{profile}",
                              detail=f"the profile's limits: {cpus or 'all'} CPUs, "
                                     f"{memory or 'all'} memory")
        share, _ = container_share(
            mode="on", environ={}, limits=limits, host_cpus=row.vcpus,
            host_memory_bytes=int(row.memory_gib * 2 ** 30),
            gpus_held=row.gpu_count if gpus is None else gpus, gpus_instance=row.gpu_count)
        if share is not None:
            rate = share.rate(rate, pricing.gpu_share)
            detail = (f"{detail}; the profile's share {rate / pricing.rate_per_hour:.1%} "
                      f"({share.gpus_held} of {share.gpus_instance} GPUs, CPU share "
                      f"{share.cpu_share:.1%}, memory share {share.memory_share:.1%})")
    return ProfilePrice(profile, rate, pricing.currency, "catalog", detail, row.retrieved,
                        pricing.market, int(row.gpu_count if gpus is None else gpus))


def price_profiles(table: Mapping[str, Any], *, currency: str,
                   catalog_files: Sequence[str] = (),
                   exchange_rates: Mapping[str, float] | None = None,
                   rates_date: str | None = None) -> dict[str, ProfilePrice]:
    """Every profile of the site's table priced, from the shipped catalog and the site's own
    files (the servers' catalog, converted to the site's currency as theirs is)."""
    if not table:
        return {}
    try:
        catalog = Catalog.load(tuple(catalog_files), currency=currency,
                               exchange_rates=dict(exchange_rates or {}),
                               rates_date=rates_date)
    except CatalogError as e:
        raise MeterConfigError(f"c.CostGuardHub.catalog_files: {e}") from None
    return {str(p): price_profile(str(p), spec, catalog, currency) for p, spec in table.items()}
