"""Plain records passed from telemetry to the ledger and on to the API and metrics.

They are frozen so that a sample, once taken, can be read from any thread without locks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: How a kernel was found to hold a GPU.
ATTRIBUTION_PID = "pid"  # NVML listed one of the kernel's process-tree PIDs on the GPU
ATTRIBUTION_CUDA_MAPPED = "cuda-mapped"  # PIDs did not match; the kernel maps libcuda
ATTRIBUTION_NONE = "none"


@dataclass(frozen=True)
class GpuProcess:
    """A process NVML reports on a GPU (host PID namespace)."""

    pid: int
    used_memory_bytes: int | None  # None where NVML cannot tell (e.g. Windows WDDM, some MIG)
    kind: str = "compute"  # "compute" or "graphics"


@dataclass(frozen=True)
class GpuSample:
    """One visible GPU (or MIG instance) at one instant."""

    index: int  # position among the devices visible to this server
    uuid: str
    name: str
    memory_total_bytes: int
    memory_used_bytes: int
    utilization_percent: float | None  # None where not supported (MIG)
    power_watts: float | None
    processes: tuple[GpuProcess, ...] = ()
    mig_parent_uuid: str | None = None  # set for a MIG instance
    faulty: str | None = None  # reason, when the device stopped answering
    nvml_index: int | None = None  # NVML's (physical) index, which a kernel's own
    #                                CUDA_VISIBLE_DEVICES refers to; None when unknown


@dataclass(frozen=True)
class GpuReading:
    """Everything read from the GPU layer in one go."""

    status: str  # "ok", "no-gpu", "error"
    detail: str = ""  # why, for "no-gpu" and "error" (shown in the API)
    driver_version: str | None = None
    gpus: tuple[GpuSample, ...] = ()


@dataclass(frozen=True)
class HostSample:
    cpu_count: int
    cpu_percent: float
    memory_total_bytes: int
    memory_used_bytes: int


@dataclass(frozen=True)
class KernelInfo:
    """What the IO loop hands to the sampler thread about one kernel (cheap to gather)."""

    kernel_id: str
    name: str  # kernelspec name
    pid: int | None
    execution_state: str
    last_activity: float  # epoch seconds
    connections: int
    path: str | None  # notebook path from the session manager, if any
    #: CPUs it holds whether it uses them or not (a batch job's request; a kernel holds none)
    cpus_held: float = 0.0


@dataclass
class KernelSample:
    """One kernel in one sample. Never changed once made, but not declared frozen: one is
    made for every kernel on every sample, and a frozen dataclass's `__init__` costs three
    times a plain one's."""

    info: KernelInfo
    pids: tuple[int, ...]  # the kernel's process tree
    cpu_seconds: float  # CPU time the tree used since the previous sample
    rss_bytes: int
    gpu_memory_bytes: dict[str, int] = field(default_factory=dict)  # GPU uuid -> bytes held
    attribution: str = ATTRIBUTION_NONE


@dataclass(frozen=True)
class Sample:
    """One tick of telemetry: the ledger turns it into money."""

    time: float  # epoch seconds at the end of the interval
    interval: float  # seconds since the previous sample
    gpu: GpuReading
    host: HostSample
    kernels: tuple[KernelSample, ...]
    simulated: bool = False
    duration_seconds: float = 0.0  # how long taking the sample took
