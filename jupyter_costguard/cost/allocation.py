"""The allocation model: what holding part of this machine costs per hour.

A machine priced R per hour splits into a GPU part (R·gpu_share, even over the GPUs the price
covers) and a host part (the rest, over the CPUs it pays for). A consumer is charged for what
it holds: each GPU it holds memory on (shared with the other holders by memory) and the CPUs
it used; a batch job, which holds the CPUs it asked for (one when it asked for none, as on a
cluster), is charged at least those for every interval it runs.

One model, three users: the ledger splits each interval with it (`cost/spend.py`), a local
job is charged the ledger's figure (`offload/accounting.py`), and the offload estimate prices
a job's request with the same rates (`offload/estimate.py`). An estimate and its charge then
differ only by what the job held beyond its request (more CPUs busy, GPUs it did not ask for)
or below it (GPUs asked for and left without memory).
"""

from __future__ import annotations

from dataclasses import dataclass

#: the CPUs a job holds when it asks for none (a cluster allocation's minimum too)
DEFAULT_JOB_CPUS = 1.0


def cpu_capacity(container_cpus: float | None, instance_vcpus: int | None,
                 host_cpus: int) -> float:
    """The CPUs the host part of the price pays for: a container's CPU limit (its share of
    the instance), else the priced instance's vCPUs (a replayed or configured instance need
    not be this host: the demo prices a 96-vCPU p4d on a laptop), else this host's."""
    for value in (container_cpus, instance_vcpus):
        if value is not None and value > 0:
            return float(value)
    return float(max(1, host_cpus))


def job_cpus(asked: float | None) -> float:
    """The CPUs a job holds: what it asked for, else one."""
    return asked if asked is not None and asked > 0 else DEFAULT_JOB_CPUS


def charged_cpu_seconds(used: float, cpus_held: float, interval: float) -> float:
    """CPU time a consumer is charged for in an interval: what it used, and at least what it
    holds (a job's asked-for CPUs) for the whole interval."""
    return max(used, cpus_held * interval)


def gpu_count(priced: int | None, seen: int) -> int:
    """GPUs the GPU part is split over: those the price covers, or more if more are seen (a
    GPU never costs more than its share of the machine)."""
    return max(priced or 0, seen)


@dataclass(frozen=True)
class MachineRates:
    """This machine's price split into the rates of what can be held."""

    rate_per_hour: float
    gpu_share: float
    #: GPUs the GPU part is split over (the instance's, or those seen)
    gpu_count: int
    #: CPUs the host part is split over (`cpu_capacity`)
    cpu_capacity: float

    @property
    def gpu_part_per_hour(self) -> float:
        """The GPU part; with no GPU to hold it is nobody's (unattributed), not the host's."""
        return self.rate_per_hour * min(1.0, max(0.0, self.gpu_share))

    @property
    def host_part_per_hour(self) -> float:
        return self.rate_per_hour - self.gpu_part_per_hour

    @property
    def per_gpu_hour(self) -> float:
        return self.gpu_part_per_hour / self.gpu_count if self.gpu_count else 0.0

    @property
    def per_cpu_hour(self) -> float:
        return self.host_part_per_hour / self.cpu_capacity if self.cpu_capacity > 0 else 0.0

    def hourly(self, gpus: int, cpus: float) -> float:
        """What holding `gpus` GPUs and `cpus` CPUs of this machine costs an hour (never more
        than the machine)."""
        return (min(max(gpus, 0), self.gpu_count) * self.per_gpu_hour
                + min(max(cpus, 0.0), self.cpu_capacity) * self.per_cpu_hour)
