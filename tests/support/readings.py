"""GPU and host readings as the sampler makes them, for pricing tests (no NVML, no psutil)."""

from __future__ import annotations

from jupyter_costguard.sampling.records import GpuReading, GpuSample, HostSample

GIB = 1024**3


def reading(name: str, count: int, memory_gib: int = 40) -> GpuReading:
    """`count` idle GPUs called `name`, as NVML would report them."""
    gpus = tuple(
        GpuSample(index=i, uuid=f"GPU-{i}", name=name, memory_total_bytes=memory_gib * GIB,
                  memory_used_bytes=0, utilization_percent=0.0, power_watts=None)
        for i in range(count)
    )
    return GpuReading(status="ok", driver_version="550.54", gpus=gpus)


def host(vcpus: int, memory_gib: float) -> HostSample:
    """The host's CPUs and RAM as psutil reports them (a pod sees its node's)."""
    return HostSample(cpu_count=vcpus, cpu_percent=0.0, memory_total_bytes=int(memory_gib * GIB),
                      memory_used_bytes=0)
