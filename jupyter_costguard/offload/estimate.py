"""What a job would cost before it starts: each backend's hourly price for what the job asks
for, and the most it can cost within its time limit (`Backend.estimate`).

Every figure says where it came from and in which currency, so the offload dialog can show it
as it is: for the local backend, the share of this machine's price the job will hold (the
allocation model the ledger charges it with, `cost/allocation.py`); the site's `cluster_rates`
for a cluster; SkyPilot's optimizer for SkyPilot. A backend whose figure is unknown says why instead
of showing 0 (its jobs' spend would not be priced either).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from jupyter_costguard.cost.allocation import MachineRates, job_cpus
from jupyter_costguard.offload.spec import Resources

#: where an estimate's hourly price came from (`Estimate.source`)
SOURCE_CATALOG = "catalog"
SOURCE_HOURLY_RATE = "hourly_rate"
SOURCE_CLUSTER_RATES = "cluster_rates"
SOURCE_OPTIMIZER = "skypilot_optimizer"
SOURCE_NONE = "none"

#: the rates `cluster_rates` may name per backend, with the resource each multiplies
RATE_KEYS = (("gpu_per_hour", "GPU"), ("cpu_per_hour", "CPU"), ("memory_gib_per_hour", "GiB"))


@dataclass(frozen=True)
class LocalPrice:
    """This machine's price as the cost service decided it (its price document's facts)."""

    rate_per_hour: float | None
    currency: str
    #: the pricing's source (``config``, ``metadata``, ``hourly_rate``, ...)
    source: str
    #: a sentence: what matched, or why nothing did
    detail: str
    provider: str | None = None
    instance_type: str | None = None
    market: str | None = None
    region: str | None = None
    retrieved: str | None = None
    age_days: int | None = None
    stale: bool = False
    #: the price in the allocation model's rates (None: not priced, or no sample yet)
    rates: MachineRates | None = None


@dataclass(frozen=True)
class EstimateContext:
    """What a backend's estimate may read besides the job's resources."""

    cluster_rates: Mapping[str, Mapping[str, float]]
    #: the currency of `cluster_rates` (the server's)
    currency: str
    machine: LocalPrice | None = None


@dataclass(frozen=True)
class Choice:
    """Where SkyPilot's optimizer would run the job."""

    cloud: str | None
    region: str | None
    instance_type: str | None
    accelerators: str | None
    use_spot: bool

    def to_json(self) -> dict[str, Any]:
        return {"cloud": self.cloud, "region": self.region, "instance_type": self.instance_type,
                "accelerators": self.accelerators, "use_spot": self.use_spot}


@dataclass(frozen=True)
class Estimate:
    """What a job asking `resources` of `backend` would cost (`hourly_price` None: unknown,
    and `detail` says why)."""

    backend: str
    hourly_price: float | None
    currency: str
    time_limit_seconds: float | None
    source: str
    #: where the figure came from (or why there is none), in words
    detail: str
    retrieved: str | None = None
    age_days: int | None = None
    stale: bool = False
    choice: Choice | None = None
    price_cap: float | None = None
    #: why the job would be refused under the price cap, or None
    refusal: str | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def max_cost(self) -> float | None:
        """The most the job can cost: hourly price × time limit; None without either."""
        if self.hourly_price is None or self.time_limit_seconds is None:
            return None
        return self.hourly_price * self.time_limit_seconds / 3600.0

    def to_json(self) -> dict[str, Any]:
        cost = self.max_cost
        return {
            "backend": self.backend, "priced": self.hourly_price is not None,
            "hourly_price": None if self.hourly_price is None else round(self.hourly_price, 6),
            "currency": self.currency, "time_limit_seconds": self.time_limit_seconds,
            "max_cost": None if cost is None else round(cost, 6),
            "source": self.source, "detail": self.detail, "retrieved": self.retrieved,
            "age_days": self.age_days, "stale": self.stale,
            "choice": self.choice.to_json() if self.choice is not None else None,
            "price_cap": self.price_cap, "above_cap": self.refusal is not None,
            "refusal": self.refusal, "notes": list(self.notes),
        }


def allocation_rate(rates: Mapping[str, float], resources: Resources) -> float:
    """What an hour of an allocation of `resources` costs at `rates` (a CPU when none is
    asked for: a job holds at least one). `Accounting.allocation_spend` charges this."""
    return (rates.get("gpu_per_hour", 0.0) * (resources.gpus or 0)
            + rates.get("cpu_per_hour", 0.0) * (resources.cpus or 1.0)
            + rates.get("memory_gib_per_hour", 0.0) * (resources.memory_gib or 0.0))


def _rates_words(rates: Mapping[str, float], resources: Resources) -> str:
    """"1 GPU × 2.5 + 1 CPU × 0.04": the terms of `allocation_rate`, for the detail."""
    amounts = {"gpu_per_hour": float(resources.gpus or 0),
               "cpu_per_hour": resources.cpus or 1.0,
               "memory_gib_per_hour": resources.memory_gib or 0.0}
    terms = [f"{amounts[key]:g} {unit} × {rates[key]:g}" for key, unit in RATE_KEYS
             if rates.get(key)]
    return " + ".join(terms) or "no rate for what the job asks for"


def rates_estimate(backend: str, resources: Resources, context: EstimateContext,
                   rates_of: str | None = None) -> Estimate:
    """The site's `cluster_rates` for `backend` (or `rates_of`) times what the job asks for;
    without an entry, no price and a sentence that says the spend will not be priced."""
    key = rates_of or backend
    rates = context.cluster_rates.get(key)
    limit = resources.time_limit_seconds
    if not rates:
        return Estimate(backend, None, context.currency, limit, SOURCE_NONE,
                        f"not priced: c.Offload.cluster_rates has no entry for {key!r}, so "
                        f"the job's spend will not be priced either")
    hourly = allocation_rate(rates, resources)
    return Estimate(backend, hourly, context.currency, limit, SOURCE_CLUSTER_RATES,
                    f"site rate for {key} (c.Offload.cluster_rates): "
                    f"{_rates_words(rates, resources)} per hour")


def machine_words(m: LocalPrice) -> str:
    """"catalog: aws p4d.24xlarge on-demand, as of 2025-06-05": where the machine's price
    came from."""
    if m.instance_type:
        where = " ".join(p for p in (m.provider, m.instance_type, m.market) if p)
        dated = f", as of {m.retrieved}" if m.retrieved else ""
        return f"catalog: {where}{dated}"
    if m.source == SOURCE_HOURLY_RATE:
        return "this machine's configured rate (c.CostGuard.hourly_rate)"
    return f"this machine's price ({m.source})"


def _share_words(rates: MachineRates, gpus: int, cpus: float) -> str:
    """"1 CPU of 96 × 0.1 + 1 GPU of 8 × 1.545 per hour": the terms of `MachineRates.hourly`."""
    terms = [f"{cpus:g} CPU of {rates.cpu_capacity:g} × {rates.per_cpu_hour:.4g}"]
    if gpus:
        terms.append(f"{gpus} GPU of {rates.gpu_count} × {rates.per_gpu_hour:.4g}")
    return " + ".join(terms) + " per hour"


def local_estimate(backend: str, resources: Resources, context: EstimateContext) -> Estimate:
    """A job on this machine: the share of the machine's price it holds (the GPUs and CPUs
    it asks for, one CPU when it asks for none), at the rates the ledger will charge it with,
    and the most that can cost within its time limit."""
    m = context.machine
    limit = resources.time_limit_seconds
    if m is None or m.rate_per_hour is None:
        why = m.detail if m is not None else "the cost service has not priced it yet"
        return Estimate(backend, None, m.currency if m else context.currency, limit,
                        SOURCE_NONE, f"this machine is not priced: {why}")
    source = SOURCE_CATALOG if m.instance_type else (
        SOURCE_HOURLY_RATE if m.source == SOURCE_HOURLY_RATE else m.source)
    notes: list[str] = []
    if m.stale:
        notes.append(f"The catalog price is {m.age_days} days old: `jupyter costguard catalog "
                     f"update` refreshes it.")
    if m.rates is None:
        # no sample yet: the machine's whole rate is the most a job can be charged
        return Estimate(backend, m.rate_per_hour, m.currency, limit, source,
                        f"{machine_words(m)}: the whole machine (its share is known after "
                        f"the first sample)", retrieved=m.retrieved, age_days=m.age_days,
                        stale=m.stale, notes=tuple(notes))
    rates = m.rates
    gpus = min(resources.gpus or 0, rates.gpu_count)
    cpus = min(job_cpus(resources.cpus), rates.cpu_capacity)
    hourly = rates.hourly(gpus, cpus)
    if resources.gpus is None and rates.gpu_count:
        notes.append(f"The job selects no GPUs: each GPU it puts memory on is charged "
                     f"{rates.per_gpu_hour:.4g} {m.currency}/h while it holds it.")
    notes.append("It is charged at least these CPUs while it runs, and the CPU time it uses "
                 "beyond them.")
    if resources.memory_gib:
        notes.append("Memory is not priced apart on this machine: the host's part of the "
                     "price is split by CPU.")
    detail = (f"{machine_words(m)} at {m.rate_per_hour:.4g} {m.currency}/h, the job's share: "
              f"{_share_words(rates, gpus, cpus)}")
    return Estimate(backend, hourly, m.currency, limit, source, detail,
                    retrieved=m.retrieved, age_days=m.age_days, stale=m.stale,
                    notes=tuple(notes))
