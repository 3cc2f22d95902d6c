"""The GPU-activity rule and the one stop decision (`common/gpuactivity.py`) applied to
samples: a GPU's activity, a kernel's, whether a GPU may be working and whether a kernel is
idle by every measure (`kernel_idleness`), so spend, views, the service and the guard ask one
place."""

from __future__ import annotations

from collections.abc import Sequence

from jupyter_costguard.common.gpuactivity import (
    BUSY,
    GPU_BUSY_PERCENT,
    IDLE,
    UNKNOWN,
    Activity,
    combined_activity,
    executing,
    gpu_activity,
    idleness,
)
from jupyter_costguard.sampling.records import GpuSample, KernelInfo, KernelSample, Sample


def activity_of(g: GpuSample, threshold_percent: float = GPU_BUSY_PERCENT) -> Activity:
    """busy, idle or unknown (a MIG instance reports no utilisation)."""
    return gpu_activity(g.utilization_percent, threshold_percent)


def may_be_working(g: GpuSample, threshold_percent: float = GPU_BUSY_PERCENT) -> bool:
    """Busy, or of unknown activity while something holds it: not idle, so no idle clock
    runs for it (nothing on a GPU cannot be working, whatever it reports)."""
    a = activity_of(g, threshold_percent)
    return a == BUSY or (a == UNKNOWN and bool(g.processes))


def kernel_gpu_activity(k: KernelSample, gpus: Sequence[GpuSample],
                        threshold_percent: float = GPU_BUSY_PERCENT) -> Activity | None:
    """The activity of the GPUs a kernel holds, together (`combined_activity`); None when it
    holds none of `gpus`."""
    return combined_activity(activity_of(g, threshold_percent) for g in gpus
                             if g.uuid in k.gpu_memory_bytes)


def kernel_idleness(k: KernelSample, gpus: Sequence[GpuSample],
                    threshold_percent: float = GPU_BUSY_PERCENT) -> Activity:
    """Whether a kernel is idle by every measure (`idleness`): "busy" while it executes or
    any GPU it holds is busy (a training thread or child process works while the kernel sits
    at its prompt), "unknown" while a GPU it holds reports no utilisation, else "idle"."""
    return idleness(executing(k.info.execution_state),
                    kernel_gpu_activity(k, gpus, threshold_percent))


def server_idleness(sample: Sample, threshold_percent: float = GPU_BUSY_PERCENT) -> Activity:
    """Whether the whole server is idle by every measure (`idleness`): busy while a kernel
    executes or any GPU is busy, whoever runs on it; unknown while a GPU of unknown activity
    is held (nothing on a GPU cannot be working); else idle. The status document's idle clock
    (`gpu_activity.idle_since`, what a hub's culler reads) runs only while it is idle."""
    running = any(executing(k.info.execution_state) for k in sample.kernels)
    gpus = combined_activity(BUSY if a == BUSY else UNKNOWN if may_be_working(g, threshold_percent)
                             else IDLE
                             for g in sample.gpu.gpus
                             for a in (activity_of(g, threshold_percent),))
    return idleness(running, gpus)


class WorkClock:
    """When each kernel was last seen at work by the one stop decision (`kernel_idleness`
    "busy": executing, or a GPU it holds busy). A kernel's idle time runs from the later of
    that and its `last_activity` (`idle_from`): a kernel whose training thread kept its GPU
    busy until a minute ago has been idle a minute, not since its last cell. The service
    keeps one for the API and the metric (`cost.views.idle_seconds`), the idle rule one for
    its clock; both observe every sample with the same rule."""

    def __init__(self, threshold_percent: float = GPU_BUSY_PERCENT) -> None:
        self.threshold_percent = threshold_percent
        #: kernel id -> the time of the last sample that saw it at work
        self.worked: dict[str, float] = {}

    def observe(self, sample: Sample) -> None:
        """Note the kernels at work in `sample`; forget the ones gone."""
        present = set()
        for k in sample.kernels:
            present.add(k.info.kernel_id)
            if kernel_idleness(k, sample.gpu.gpus, self.threshold_percent) == BUSY:
                self.worked[k.info.kernel_id] = sample.time
        for kid in set(self.worked) - present:
            del self.worked[kid]

    def idle_from(self, info: KernelInfo) -> float:
        """When this kernel's idleness by every measure began (if it is idle now)."""
        return max(info.last_activity, self.worked.get(info.kernel_id, info.last_activity))
