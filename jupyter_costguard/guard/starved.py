"""Guard rule `starved-gpu`: a busy kernel whose GPUs sit mostly idle is waiting on data.

Over the last `starved_window_seconds`, for each kernel that is still running:

- its *busy GPU time* is the sampled time in which it was busy (execution state ``busy``)
  while holding memory on at least one GPU whose utilisation is known (a kernel holding no
  GPU is CPU work and never counts);
- its *waiting time* is the part of that in which the GPUs it held averaged below
  `starved_max_utilization_percent`.

It is starved when the busy GPU time is at least `starved_min_busy_seconds` and the waiting
time at least `starved_min_busy_share` of it. The alert (key: the kernel id) names the
notebook and kernel, the share of busy time the GPU waited, and what that waiting cost:
the kernel's part of the GPU rate during the waiting samples, as the spend model splits it
(each GPU costs R × gpu_share ÷ the instance's GPUs; a GPU's cost goes to the kernels on it
in proportion to their memory), at the rate in force at each sample. MIG instances are priced as
whole GPUs here (the window does not keep their parents), so on MIG this is an upper bound.
The cost is *active* spend in the ledger (the kernel is busy), not waste: the rule points
at money spent waiting, which the usual fixes recover.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from jupyter_costguard.guard.base import Finding, GuardContext, RuleResult
from jupyter_costguard.guard.config import GuardConfig
from jupyter_costguard.guard.window import Rolling
from jupyter_costguard.guard.wording import duration, money
from jupyter_costguard.sampling.records import Sample

TITLE = "GPU starved of data"
ACTIONS: tuple[Mapping[str, Any], ...] = (
    {"id": "open-panel", "label": "Open cost panel"},
    {"id": "snooze", "label": "Snooze"},
)
FIXES = ("Usual fixes: cache the data on local disk (not a network share or bucket), use "
         "more DataLoader workers (num_workers) with pin_memory=True, prefetch batches "
         "(prefetch_factor, tf.data .prefetch()), and avoid remote reads in every step.")


@dataclass
class KernelStarvation:
    """One kernel's busy and waiting time over the window."""

    kernel_id: str
    notebook: str | None = None
    busy_seconds: float = 0.0  # busy while holding a GPU
    waiting_seconds: float = 0.0  # ... with its GPUs below the threshold
    utilization_time: float = 0.0  # Σ utilisation × dt over the waiting samples
    waiting_cost: float = 0.0
    gpus: set[str] = field(default_factory=set)

    @property
    def waiting_share(self) -> float:
        return self.waiting_seconds / self.busy_seconds if self.busy_seconds > 0 else 0.0

    @property
    def waiting_utilization(self) -> float:
        return self.utilization_time / self.waiting_seconds if self.waiting_seconds > 0 else 0.0


class StarvedGpuRule:
    kind = "starved-gpu"

    def __init__(self, config: GuardConfig) -> None:
        self.config = config
        self.window = Rolling(config.starved_window_seconds)
        #: a kernel must be seen busy this long before it can be flagged
        self.settle_seconds = config.starved_min_busy_seconds

    def _contribution(self, ctx: GuardContext, sample: Sample) -> dict[Hashable, float]:
        """This sample's busy/waiting seconds, utilisation and waiting cost, per kernel."""
        cfg = self.config
        pricing = ctx.published.pricing
        gpu_rate = pricing.gpu_rate_per_hour
        instance_gpus = pricing.instance.gpu_count if pricing.instance else 0
        dt = max(0.0, sample.interval)
        sums: dict[Hashable, float] = {}
        if dt <= 0:
            return sums
        utils = {g.uuid: g.utilization_percent for g in sample.gpu.gpus}
        gpus = max(instance_gpus, len(utils))
        per_gpu = gpu_rate / gpus if gpu_rate is not None and gpus else 0.0  # per hour
        memory: dict[str, list[int]] = {}  # uuid -> bytes of each holder
        for k in sample.kernels:
            for u, b in k.gpu_memory_bytes.items():
                memory.setdefault(u, []).append(b)
        for k in sample.kernels:
            held = [u for u in k.gpu_memory_bytes if utils.get(u) is not None]
            if k.info.execution_state != "busy" or not held:
                continue
            kid = k.info.kernel_id
            sums[("busy", kid)] = dt
            mean = sum(utils[u] or 0.0 for u in held) / len(held)
            if mean >= cfg.starved_max_utilization_percent:
                continue
            sums[("waiting", kid)] = dt
            sums[("utilization", kid)] = mean * dt
            cost = 0.0
            for u in held:
                total = sum(memory[u])
                part = k.gpu_memory_bytes[u] / total if total > 0 else 1.0 / len(memory[u])
                cost += per_gpu * part * dt / 3600.0
                sums[("gpu", kid, u)] = 1.0  # held while waiting: a count, for the GPU list
            sums[("cost", kid)] = cost
        return sums

    def measure(self) -> dict[str, KernelStarvation]:
        """The busy and waiting time in the window of every kernel that was busy on a GPU."""
        stats: dict[str, KernelStarvation] = {}
        for key in self.window.keys():
            assert isinstance(key, tuple)
            st = stats.setdefault(key[1], KernelStarvation(key[1]))
            value = self.window.sum(key)
            if key[0] == "busy":
                st.busy_seconds = value
            elif key[0] == "waiting":
                st.waiting_seconds = value
            elif key[0] == "utilization":
                st.utilization_time = value
            elif key[0] == "cost":
                st.waiting_cost = value
            else:
                st.gpus.add(key[2])
        return stats

    def evaluate(self, ctx: GuardContext) -> RuleResult:
        cfg = self.config
        sample = ctx.published.sample
        if sample is None:
            return RuleResult()
        self.window.add(sample.time, self._contribution(ctx, sample))
        running = {k.info.kernel_id: k.info.path for k in sample.kernels}
        priced = ctx.published.pricing.gpu_rate_per_hour is not None
        findings = []
        for kid, st in sorted(self.measure().items()):
            if kid not in running or st.busy_seconds < cfg.starved_min_busy_seconds:
                continue
            st.notebook = running[kid]
            if st.waiting_share < cfg.starved_min_busy_share:
                continue
            findings.append(self._finding(ctx, st, priced))
        return RuleResult(findings=findings)

    def _finding(self, ctx: GuardContext, st: KernelStarvation, priced: bool) -> Finding:
        cfg = self.config
        cur = ctx.published.pricing.currency
        share = round(st.waiting_share, 2)
        who = st.notebook or f"Kernel {st.kernel_id[:8]}"
        whose = f"{st.notebook}'s kernel" if st.notebook else who
        n = len(st.gpus)
        gpu_word = f"GPU{'s' if n != 1 else ''}"
        cost = round(st.waiting_cost, 2) if priced else None
        per_hour = (round(st.waiting_cost / st.waiting_seconds * 3600.0, 2)
                    if priced and st.waiting_seconds > 0 else None)
        message = (
            f"{whose} was busy {duration(st.busy_seconds)} of the last "
            f"{duration(cfg.starved_window_seconds)}, but its {gpu_word} sat below "
            f"{cfg.starved_max_utilization_percent:.0f}% for {share * 100:.0f}% of that "
            f"(averaging {st.waiting_utilization:.0f}%): it is probably waiting on data."
        )
        if cost is not None and per_hour is not None:
            message += (f" That waiting cost ~{money(cost, cur)} of GPU time "
                        f"({money(per_hour, cur)}/h).")
        message += f" {FIXES}"
        details: dict[str, Any] = {
            "kernel_id": st.kernel_id,
            "notebook": st.notebook,
            "window_seconds": cfg.starved_window_seconds,
            "busy_seconds": round(st.busy_seconds),
            "waiting_seconds": round(st.waiting_seconds),
            "waiting_share": share,
            "gpu_utilization_percent": round(st.waiting_utilization, 1),
            "gpus": sorted(st.gpus),
            "waiting_cost": cost,
            "waiting_cost_per_hour": per_hour,
            "currency": cur,
        }
        return Finding(kind=self.kind, key=st.kernel_id, severity="info", title=TITLE,
                       message=message, notebook=st.notebook, kernel_id=st.kernel_id,
                       actions=ACTIONS, details=details)
