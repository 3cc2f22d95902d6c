"""The spend model: one sample interval of instance cost, split among its consumers.

For an interval of Δt seconds at R per hour the instance costs R·Δt/3600. A GPU share of
that is split evenly over the instance's GPUs (a MIG instance gets its parent's cost in
proportion to its memory); each GPU's cost goes to the kernels holding memory on it, in
proportion to that memory, and to nobody ("unattributed") when nobody holds it. The host
share is split by CPU time used in Δt (a batch job is charged at least the CPUs it asked for),
over the CPUs the price pays for. The rates are the allocation model's (`cost/allocation.py`),
which the offload estimate prices a job's request with. What nobody used stays unattributed, so
for every interval: sum(consumers) + unattributed == R·Δt/3600 (conservation).

A kernel's GPU cost counts as *waste* while that GPU and the kernel are idle by every measure
(`common/gpuactivity.idleness`, the one stop decision the idle rule, auto-stop and the hub's
culler ask too): the GPU below the threshold and the kernel not executing. A busy GPU is never
waste, whatever the kernel's execution state. A GPU of unknown activity (a MIG instance:
NVML reports no utilisation) is charged to its holders as spend but never as waste: what
cannot be seen is not called idle.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from jupyter_costguard.common.gpuactivity import GPU_BUSY_PERCENT, IDLE, executing, idleness
from jupyter_costguard.cost.activity import activity_of
from jupyter_costguard.cost.allocation import MachineRates, charged_cpu_seconds
from jupyter_costguard.cost.allocation import gpu_count as priced_gpu_count
from jupyter_costguard.sampling.records import GpuSample, KernelSample, Sample


@dataclass
class Share:
    """What one consumer cost in one interval."""

    gpu: float = 0.0
    host: float = 0.0
    waste: float = 0.0

    @property
    def spend(self) -> float:
        return self.gpu + self.host


@dataclass
class IntervalCost:
    total: float
    unattributed: float
    unattributed_gpu: float
    shares: dict[str, Share] = field(default_factory=dict)

    def attributed(self) -> float:
        return sum(s.spend for s in self.shares.values())


def physical_gpus(gpus: Sequence[GpuSample]) -> dict[str, list[GpuSample]]:
    """The visible devices by physical GPU (a MIG instance under its parent)."""
    physical: dict[str, list[GpuSample]] = {}
    for g in gpus:
        physical.setdefault(g.mig_parent_uuid or g.uuid, []).append(g)
    return physical


def machine_rates(sample: Sample, rate_per_hour: float | None, gpu_share: float,
                  gpu_count: int | None = None, cpu_capacity: float | None = None
                  ) -> MachineRates:
    """The allocation model's rates for `sample`'s machine: what the ledger charges with."""
    cpus = cpu_capacity if cpu_capacity and cpu_capacity > 0 else max(1, sample.host.cpu_count)
    return MachineRates(rate_per_hour or 0.0, min(1.0, max(0.0, gpu_share)),
                        priced_gpu_count(gpu_count, len(physical_gpus(sample.gpu.gpus))),
                        float(cpus))


def _gpu_unit_costs(gpus: Sequence[GpuSample], per_gpu: float) -> dict:
    """Cost of each visible device for the interval, MIG instances sharing their parent's."""
    physical = physical_gpus(gpus)
    costs: dict[str, float] = {}
    for members in physical.values():
        if len(members) == 1 and members[0].mig_parent_uuid is None:
            costs[members[0].uuid] = per_gpu
            continue
        total_mem = sum(m.memory_total_bytes for m in members) or len(members)
        for m in members:
            weight = (m.memory_total_bytes or 1) / total_mem
            costs[m.uuid] = per_gpu * weight
    return costs


def split_interval(
    sample: Sample,
    rate_per_hour: float | None,
    gpu_share: float,
    gpu_count: int | None = None,
    idle_threshold_percent: float = GPU_BUSY_PERCENT,
    cpu_capacity: float | None = None,
    rates: MachineRates | None = None,
) -> IntervalCost:
    """Split one interval's instance cost among the kernels of the sample.

    ``cpu_capacity``: the CPUs the host part pays for (`allocation.cpu_capacity`); default
    the host's own. ``rates``: the price's rates already decided (`Pricing.machine_rates`,
    as the service passes them); then they are used as they are, not decided again."""
    total = (rate_per_hour or 0.0) * sample.interval / 3600.0
    shares: dict[str, Share] = {k.info.kernel_id: Share() for k in sample.kernels}
    if total <= 0.0:
        return IntervalCost(total=0.0, unattributed=0.0, unattributed_gpu=0.0, shares=shares)
    if rates is None:
        rates = machine_rates(sample, rate_per_hour, gpu_share, gpu_count, cpu_capacity)
    # the interval's parts as MachineRates splits an hour (total × share: exactly total)
    gpu_pool = total * rates.gpu_share
    host_pool = total - gpu_pool

    gpu_attributed = 0.0
    unit_costs = _gpu_unit_costs(sample.gpu.gpus,
                                 gpu_pool / rates.gpu_count if rates.gpu_count else 0.0)
    for gpu in sample.gpu.gpus:
        cost = unit_costs.get(gpu.uuid, 0.0)
        holders = [(k, k.gpu_memory_bytes[gpu.uuid]) for k in sample.kernels
                   if gpu.uuid in k.gpu_memory_bytes]
        if not holders or cost == 0.0:
            continue
        mem_total = sum(m for _, m in holders)
        activity = activity_of(gpu, idle_threshold_percent)
        for k, mem in holders:
            part = cost * (mem / mem_total if mem_total > 0 else 1.0 / len(holders))
            share = shares[k.info.kernel_id]
            share.gpu += part
            if idleness(executing(k.info.execution_state), activity) == IDLE:
                share.waste += part
            gpu_attributed += part

    host_attributed = 0.0
    capacity = sample.interval * rates.cpu_capacity
    charged = {k.info.kernel_id: charged_cpu_seconds(k.cpu_seconds, k.info.cpus_held,
                                                     sample.interval) for k in sample.kernels}
    used = sum(charged.values())
    if used > 0:
        # never hand out more than the host: divide by whichever is larger
        denominator = max(used, capacity)
        for k in sample.kernels:
            part = host_pool * (charged[k.info.kernel_id] / denominator)
            shares[k.info.kernel_id].host += part
            host_attributed += part

    unattributed_gpu = gpu_pool - gpu_attributed
    unattributed = unattributed_gpu + (host_pool - host_attributed)
    return IntervalCost(
        total=total,
        unattributed=unattributed,
        unattributed_gpu=unattributed_gpu,
        shares=shares,
    )


def kernel_gpu_utilization(k: KernelSample, gpus: Sequence[GpuSample]) -> float | None:
    """Mean utilisation of the GPUs a kernel holds (None when it holds none or it's unknown)."""
    values = [g.utilization_percent for g in gpus
              if g.uuid in k.gpu_memory_bytes and g.utilization_percent is not None]
    return sum(values) / len(values) if values else None
