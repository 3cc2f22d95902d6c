"""Guard rule `training-sized-interactive`: a training-sized instance used for exploration.

An instance is *training-sized* when it has at least `training_min_gpus` GPUs, or a GPU with
at least `training_min_gpu_memory_gib` GiB, or costs at least `training_min_rate_per_hour`
(the priced catalog row and the GPUs actually seen both count; the larger wins).

It is *used interactively* when, over the last `interactive_window_seconds`:

- the window is at least `interactive_min_coverage` sampled (before that the rule is silent),
- notebook kernels held GPUs for at least half of the sampled time, and
- the GPUs they held averaged below `interactive_max_utilization_percent` (time-weighted
  over the samples in which they were held). Only held GPUs count here, so one kernel
  training on one GPU of eight is busy, not interactive.

The alert (key ``"instance"``) gives:

- ``idle_share``: the share of the instance's GPU capacity that went unused over the window,
  ``1 - mean utilisation`` of *all* its GPUs (a GPU nobody holds counts as fully idle; GPUs
  the catalog row has but the host does not show count too, as in the spend model);
- ``waste_per_hour``: the GPU part of the rate × ``idle_share``. This is deliberately not the
  ledger's *waste*: the ledger counts an idle GPU as waste only while a kernel holds it and
  is not busy, and books GPUs nobody holds as *unattributed*. On an instance rented for its
  GPUs both are money paid for nothing, and partial use matters too (8 GPUs with one at 2%
  use 0.25% of what is paid for), so the rule prices the unused capacity directly, with the
  spend model's own GPU split (R × gpu_share);
- the cheapest catalog instance that fits the peak use seen in the window (peak GPU memory
  on any GPU, the number of GPUs in use, peak host CPU cores and RAM, with `HEADROOM` on the
  memory figures; same provider when `suggest_same_provider`; GPU rows only when some GPU
  memory was used) and what it would save per hour; null when nothing cheaper fits.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from jupyter_costguard.cost.catalog import Catalog, InstanceType
from jupyter_costguard.cost.pricing import Pricing
from jupyter_costguard.guard.base import Finding, GuardContext, RuleResult
from jupyter_costguard.guard.config import GuardConfig
from jupyter_costguard.guard.window import Rolling
from jupyter_costguard.guard.wording import GiB, duration, gib, money
from jupyter_costguard.sampling.records import Sample

#: Memory figures (GPU and host) are scaled by this before looking for an instance that fits:
#: catalog sizes are nominal, and a workload at exactly its peak has no room to grow.
HEADROOM = 1.1
#: A GPU with at least this much memory used counts as in use even when no kernel holds it
#: (another process, a batch job): a suggested instance must have room for it too.
IN_USE_BYTES = 256 << 20
#: Kernels must hold GPUs for at least this share of the sampled window.
MIN_HELD_SHARE = 0.5

TITLE = "Training-sized instance used interactively"
ACTIONS: tuple[Mapping[str, Any], ...] = (
    {"id": "offload", "label": "Offload heavy cells"},
    {"id": "open-panel", "label": "Cost panel"},
    {"id": "snooze", "label": "Snooze"},
)


@dataclass(frozen=True)
class Usage:
    """What the window says about how the instance was used."""

    covered: float  # sampled seconds in the window
    held_seconds: float  # sampled seconds in which some kernel held a GPU
    held_utilization: float | None  # time-weighted mean utilisation of the held GPUs
    idle_share: float  # unused share of all the instance's GPU capacity
    peak_gpu_memory_bytes: int  # max over samples and GPUs of memory used
    gpus_held: int  # max over samples of GPUs held by kernels (or otherwise in use)
    peak_cpu_cores: float  # max over samples of host cpu_percent × cpu_count / 100
    peak_memory_bytes: int  # max over samples of host RAM used
    notebook: str | None  # the notebook whose kernels held the most GPU memory


def physical_gpus(sample: Sample | None) -> tuple[int, float | None]:
    """(number of physical GPUs, largest GPU memory in GiB) seen in a sample."""
    if sample is None:
        return 0, None
    memory: dict[str, int] = {}
    for g in sample.gpu.gpus:
        parent = g.mig_parent_uuid or g.uuid
        memory[parent] = memory.get(parent, 0) + g.memory_total_bytes
    if not memory:
        return 0, None
    return len(memory), max(memory.values()) / GiB


def gpu_count_of(pricing: Pricing, sample: Sample | None) -> int:
    """GPUs the instance is paying for: the catalog row's or the ones seen, whichever is more
    (the spend model divides the GPU part the same way)."""
    seen, _ = physical_gpus(sample)
    return max(pricing.instance.gpu_count if pricing.instance else 0, seen)


def training_sized(config: GuardConfig, pricing: Pricing, sample: Sample | None) -> bool:
    seen, seen_gib = physical_gpus(sample)
    instance = pricing.instance
    gpus = max(instance.gpu_count if instance else 0, seen)
    if gpus == 0:
        return False  # no GPUs: nothing to use interactively
    gib = max((instance.gpu_memory_gib or 0.0) if instance else 0.0, seen_gib or 0.0)
    if gpus >= config.training_min_gpus or gib >= config.training_min_gpu_memory_gib:
        return True
    rate = pricing.rate_per_hour
    floor = config.training_min_rate_per_hour
    return floor is not None and rate is not None and rate >= floor


def contribution(sample: Sample, gpu_count: int) -> tuple[dict[Hashable, float],
                                                          dict[Hashable, float]]:
    """One sample's share of the window's figures: (sums, maxima) for `Rolling`."""
    dt = max(0.0, sample.interval)
    utils = {g.uuid: g.utilization_percent for g in sample.gpu.gpus}
    sums: dict[Hashable, float] = {"covered": dt}
    held: set[str] = set()
    for k in sample.kernels:
        mine = [u for u in k.gpu_memory_bytes if u in utils]
        held.update(mine)
        if mine and k.info.path:
            nb = k.info.path
            byte_seconds = sum(k.gpu_memory_bytes[u] for u in mine) * dt
            sums[("nb-bytes", nb)] = sums.get(("nb-bytes", nb), 0.0) + byte_seconds
            sums[("nb-held", nb)] = dt  # once per sample, however many of its kernels hold
    in_use = held | {g.uuid for g in sample.gpu.gpus if g.memory_used_bytes >= IN_USE_BYTES}
    if held:
        sums["held"] = dt
        for u in held:
            value = utils[u]
            if value is not None:
                sums["util-weighted"] = sums.get("util-weighted", 0.0) + value * dt
                sums["util-time"] = sums.get("util-time", 0.0) + dt
    known = [u for u in utils.values() if u is not None]
    unknown = len(utils) - len(known)
    sums["capacity"] = max(0, max(gpu_count, len(utils)) - unknown) * dt
    sums["used"] = sum(min(100.0, max(0.0, u)) for u in known) / 100.0 * dt
    host = sample.host
    maxima: dict[Hashable, float] = {
        "gpus-in-use": float(len(in_use)),
        "cpu-cores": host.cpu_percent * host.cpu_count / 100.0,
        "memory": float(host.memory_used_bytes),
    }
    if sample.gpu.gpus:
        maxima["gpu-memory"] = float(max(g.memory_used_bytes for g in sample.gpu.gpus))
    return sums, maxima


def usage_of(window: Rolling) -> Usage:
    """The window's figures (see the module docstring)."""
    util_time = window.sum("util-time")
    capacity = window.sum("capacity")
    by_notebook = {key[1]: (window.sum(key), window.sum(("nb-held", key[1])))
                   for key in window.keys() if isinstance(key, tuple) and key[0] == "nb-bytes"}
    notebook = max(by_notebook, key=lambda n: (by_notebook[n], n)) if by_notebook else None
    return Usage(
        covered=window.sum("covered"),
        held_seconds=window.sum("held"),
        held_utilization=window.sum("util-weighted") / util_time if util_time > 0 else None,
        idle_share=1.0 - window.sum("used") / capacity if capacity > 0 else 1.0,
        peak_gpu_memory_bytes=int(window.max("gpu-memory")),
        gpus_held=int(window.max("gpus-in-use")),
        peak_cpu_cores=round(window.max("cpu-cores"), 2),
        peak_memory_bytes=int(window.max("memory")),
        notebook=notebook,
    )


def suggest(catalog: Catalog, pricing: Pricing, usage: Usage, same_provider: bool
            ) -> tuple[InstanceType, float] | None:
    """The cheapest catalog instance that fits `usage` and is cheaper than this one, with its
    rate in this instance's market; None when there is none."""
    needs_gpu = usage.peak_gpu_memory_bytes > 0
    instance = pricing.instance
    candidate = catalog.cheapest_fitting(
        gpu_memory_gib_per_gpu=usage.peak_gpu_memory_bytes / GiB * HEADROOM if needs_gpu else 0,
        gpu_count=max(1, usage.gpus_held) if needs_gpu else 0,
        vcpus=max(1, math.ceil(usage.peak_cpu_cores - 1e-9)),
        memory_gib=usage.peak_memory_bytes / GiB * HEADROOM,
        provider=instance.provider if same_provider and instance is not None else None,
        market=pricing.market,
        currency=pricing.currency,
    )
    if candidate is None or (instance is not None and candidate.key == instance.key):
        return None
    rate = candidate.rate(pricing.market)
    if rate is None or (pricing.rate_per_hour is not None and rate >= pricing.rate_per_hour):
        return None
    return candidate, rate


class TrainingSizedRule:
    kind = "training-sized-interactive"

    def __init__(self, config: GuardConfig) -> None:
        self.config = config
        self.window = Rolling(config.interactive_window_seconds)
        #: silent until the window is this full (see the engine's leftovers)
        self.settle_seconds = config.interactive_window_seconds * config.interactive_min_coverage

    def evaluate(self, ctx: GuardContext) -> RuleResult:
        cfg = self.config
        pricing = ctx.published.pricing
        sample = ctx.published.sample
        if sample is None:
            return RuleResult()
        gpu_count = gpu_count_of(pricing, sample)
        self.window.add(sample.time, *contribution(sample, gpu_count))
        if not training_sized(cfg, pricing, sample):
            return RuleResult()
        window = cfg.interactive_window_seconds
        usage = usage_of(self.window)
        if usage.covered < cfg.interactive_min_coverage * window:
            return RuleResult()  # too early to judge
        if usage.held_seconds < MIN_HELD_SHARE * usage.covered or usage.held_seconds <= 0:
            return RuleResult()  # nobody is using the GPUs: the idle-kernel/auto-stop rules
        if usage.held_utilization is None \
                or usage.held_utilization >= cfg.interactive_max_utilization_percent:
            return RuleResult()  # genuinely busy (or unknown, e.g. MIG)
        return RuleResult(findings=[self._finding(ctx, pricing, usage, gpu_count)])

    def _finding(self, ctx: GuardContext, pricing: Pricing, usage: Usage,
                 gpu_count: int) -> Finding:
        cfg = self.config
        cur = pricing.currency
        rate = pricing.rate_per_hour
        gpu_rate = pricing.gpu_rate_per_hour
        # whole percent, rounded down: never overstate the waste (and few rewrites)
        idle_share = math.floor(usage.idle_share * 100 + 1e-9) / 100
        waste = round(gpu_rate * idle_share, 2) if gpu_rate is not None else None
        instance = pricing.instance
        found = suggest(ctx.catalog, pricing, usage, cfg.suggest_same_provider)
        suggestion: dict[str, Any] | None = None
        saving: float | None = None
        if found is not None:
            row, row_rate = found
            saving = round(rate - row_rate, 2) if rate is not None else None
            suggestion = {
                "provider": row.provider, "instance_type": row.instance_type,
                "rate_per_hour": row_rate, "gpu_model": row.gpu_model or None,
                "gpu_count": row.gpu_count, "saving_per_hour": saving,
            }

        # the first sentence is what a pop-up shows (JupyterLab cuts at 140 characters)
        idle_pct = f"{idle_share * 100:.0f}%"
        if waste is not None:
            lead = f"GPUs {idle_pct} idle, wasting ~{money(waste, cur)}/h"
        else:
            lead = f"GPUs {idle_pct} idle (this server is unpriced)"
        if found is not None:
            row, row_rate = found
            fits = f"{row.instance_type} fits your use for {money(row_rate, cur)}/h"
            if saving is not None:
                fits += f" (saves {money(saving, cur)}/h)"
            first = f"{lead}; {fits}."
        else:
            where = f"{instance.provider} " if instance and cfg.suggest_same_provider else ""
            first = f"{lead}. No cheaper {where}instance in the catalog fits your peak use."
        if instance is not None:
            what = (f"{instance.instance_type} ({instance.gpu_count}x {instance.gpu_model}"
                    if instance.is_gpu else f"{instance.instance_type} (")
        else:
            what = f"This server ({gpu_count} GPU{'s' if gpu_count != 1 else ''}"
        what += f", {money(rate, cur)}/h)" if rate is not None else ", unpriced)"
        util = usage.held_utilization or 0.0
        held = max(1, usage.gpus_held)
        message = (
            f"{first} {what} is sized for training, but over the last "
            f"{duration(min(usage.covered, cfg.interactive_window_seconds))} the GPUs its "
            f"notebooks held averaged {util:.0f}% utilisation. Peak use: "
            f"{gib(usage.peak_gpu_memory_bytes)} GPU memory on {held} "
            f"GPU{'s' if held != 1 else ''}, {usage.peak_cpu_cores:.1f} CPU cores, "
            f"{gib(usage.peak_memory_bytes)} RAM. Explore on a smaller instance and offload "
            f"the heavy cells to a batch job."
        )
        details: dict[str, Any] = {
            "instance_type": instance.instance_type if instance else None,
            "provider": instance.provider if instance else None,
            "rate_per_hour": rate,
            "idle_share": idle_share,
            "gpu_utilization_percent": round(util, 1),
            "waste_per_hour": waste,
            "window_seconds": cfg.interactive_window_seconds,
            "peak_gpu_memory_bytes": usage.peak_gpu_memory_bytes,
            "gpus_held": usage.gpus_held,
            "peak_cpu_cores": usage.peak_cpu_cores,
            "peak_memory_bytes": usage.peak_memory_bytes,
            "suggestion": suggestion,
            "currency": cur,
        }
        return Finding(kind=self.kind, key="instance", severity="warning", title=TITLE,
                       message=message, notebook=usage.notebook, actions=ACTIONS,
                       details=details)
