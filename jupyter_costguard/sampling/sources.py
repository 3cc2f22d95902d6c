"""Where GPU readings come from: NVML, or a recorded trace played back (always labelled
simulated), or NVML falling back to the trace when no driver answers (the demo)."""

from __future__ import annotations

from typing import Any

from traitlets import Bool, CaselessStrEnum, HasTraits, Unicode

from jupyter_costguard.sampling.records import GpuReading
from jupyter_costguard.sampling.replay import ReplaySource
from jupyter_costguard.sampling.telemetry import GpuSource


class NvmlSource:
    """`GpuSource` over the real NVML reader."""

    simulated = False
    instance_type = None

    def __init__(self) -> None:
        from jupyter_costguard.sampling.nvml import NvmlReader  # loads pynvml

        self.reader = NvmlReader()

    def read(self, kernel_pids: Any, notebooks: Any = None) -> GpuReading:
        return self.reader.read()

    def close(self) -> None:
        self.reader.close()


class FallbackSource:
    """NVML when a driver answers; otherwise the replayed trace (demo configuration)."""

    def __init__(self, nvml: NvmlSource, replay: ReplaySource) -> None:
        self.nvml = nvml
        self.replay = replay
        self.simulated = True
        self.instance_type: str | None = replay.instance_type

    def read(self, kernel_pids: Any, notebooks: Any = None) -> GpuReading:
        reading = self.nvml.read(kernel_pids)
        if reading.status == "ok" and reading.gpus:
            self.simulated = False
            self.instance_type = None
            return reading
        self.simulated = True
        self.instance_type = self.replay.instance_type
        return self.replay.read(kernel_pids, notebooks)

    def close(self) -> None:
        self.nvml.close()


class SamplingTraits(HasTraits):
    """The sampling options, mixed into the server extension (`c.CostGuard.<name>`)."""

    replay_trace = Unicode(
        None, allow_none=True, config=True,
        help="A recorded GPU trace to play (figures labelled simulated).",
    )
    replay_mode = CaselessStrEnum(
        ["fallback", "always"], default_value="fallback", config=True,
        help="'fallback': play replay_trace only when no NVIDIA driver answers; 'always': play it.",
    )
    enabled = Bool(True, config=True, help=(
        "Run the sampler: every sample_interval, read the GPUs and kernels, price them, write "
        "the ledger and run the guard's rules. False stops all of that and, under JupyterHub, "
        "the reports to the costguard hub service; the REST API, the panel and batch jobs "
        "stay on, without sampled figures (and no GPUs picked for local jobs). "
        "c.Guard.enabled and c.Offload.enabled turn off one part each."))

    def gpu_source(self) -> GpuSource:
        if self.replay_trace:
            replay = ReplaySource(self.replay_trace)
            if self.replay_mode == "always":
                return replay
            return FallbackSource(NvmlSource(), replay)
        return NvmlSource()
