"""Attribution of GPUs to kernels when PIDs don't match (containers)."""

from __future__ import annotations

from jupyter_costguard.records import GpuProcess, GpuSample, KernelInfo
from jupyter_costguard.telemetry import attribute_gpus

GiB = 1 << 30


class FakeProbe:
    """Stands in for /proc: which PIDs map libcuda and what CUDA_VISIBLE_DEVICES they have."""

    def __init__(self, cuda: set[int], visible: dict[int, str | None]) -> None:
        self.cuda, self.visible = cuda, visible

    def maps_cuda(self, pid: int, now: float) -> bool:
        return pid in self.cuda

    def visible_devices(self, pid: int) -> str | None:
        return self.visible.get(pid)


def _gpu(position: int, physical: int) -> GpuSample:
    return GpuSample(position, f"GPU-{physical}", "NVIDIA A100-SXM4-40GB", 40 * GiB, 8 * GiB,
                     0.0, 60.0, (GpuProcess(999_999, 8 * GiB),), nvml_index=physical)


def test_kernel_visible_devices_use_physical_indices():
    # The server runs with CUDA_VISIBLE_DEVICES=2,3: it sees physical GPUs 2 and 3 at
    # positions 0 and 1. A kernel started with CUDA_VISIBLE_DEVICES=3 holds only GPU-3.
    gpus = [_gpu(0, 2), _gpu(1, 3)]
    k = KernelInfo("k", "python3", 10, "idle", 0.0, 0, "a.ipynb")
    held = attribute_gpus(gpus, [k], {"k": (10,)}, FakeProbe({10}, {10: "3"}), 0.0)  # type: ignore[arg-type]
    memory, method = held["k"]
    assert method == "cuda-mapped"
    assert memory == {"GPU-3": 8 * GiB}


def test_kernel_without_libcuda_holds_nothing():
    gpus = [_gpu(0, 0)]
    k = KernelInfo("k", "python3", 10, "idle", 0.0, 0, "a.ipynb")
    held = attribute_gpus(gpus, [k], {"k": (10,)}, FakeProbe(set(), {}), 0.0)  # type: ignore[arg-type]
    assert held["k"] == ({}, "none")


def test_unmatched_memory_split_between_cuda_kernels():
    gpus = [_gpu(0, 0)]
    ks = [KernelInfo(n, "python3", pid, "idle", 0.0, 0, f"{n}.ipynb")
          for n, pid in (("a", 10), ("b", 20))]
    held = attribute_gpus(gpus, ks, {"a": (10,), "b": (20,)},
                          FakeProbe({10, 20}, {}), 0.0)  # type: ignore[arg-type]
    assert held["a"][0] == {"GPU-0": 4 * GiB} and held["b"][0] == {"GPU-0": 4 * GiB}
