"""Attribution of GPUs to kernels when PIDs don't match (containers)."""

from __future__ import annotations

from jupyter_costguard.sampling.records import GpuProcess, GpuSample, KernelInfo
from jupyter_costguard.sampling.telemetry import attribute_gpus
from tests.support.units import GiB


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


def test_probe_finds_a_forked_child_and_counts_all_its_cpu(tmp_path):
    """Tree walks are skipped while a kernel is quiet; a fork still shows up, CPU intact."""
    import subprocess
    import sys
    import time

    from jupyter_costguard.sampling.telemetry import KernelProbe

    flag = tmp_path / "go"
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass\n" \
           "time.sleep(120)"
    parent_src = (
        "import os, subprocess, sys, time\n"
        "while not os.path.exists(sys.argv[1]): time.sleep(0.2)\n"
        f"subprocess.Popen([sys.executable, '-c', {burn!r}])\n"
        "time.sleep(300)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_src, str(flag)])
    try:
        probe = KernelProbe()
        clock = 0.0
        probe.measure(parent.pid, clock)
        time.sleep(1.0)  # let the interpreter's start-up CPU land in one interval
        probe.measure(parent.pid, clock := clock + 1)
        flag.touch()
        found, cpu = (), 0.0
        deadline = time.monotonic() + 90  # a loaded 2-core machine may starve the child
        while time.monotonic() < deadline:
            time.sleep(0.25)
            pids, delta, _rss = probe.measure(parent.pid, clock := clock + 1)
            cpu += delta
            # /proc accounts CPU in sampled clock ticks: allow for under-counting
            if len(pids) == 2 and cpu >= 0.35:
                found = pids
                break
        import psutil
        kids = [c.pid for c in psutil.Process(parent.pid).children(recursive=True)]
        assert len(found) == 2, f"child not in the tree: last {pids}, cpu {cpu}, real {kids}"
        assert cpu >= 0.35, "the child's CPU since its birth is counted"
    finally:
        for child in __import__("psutil").Process(parent.pid).children(recursive=True):
            child.kill()
        parent.kill()
        parent.wait()


def test_quiet_tree_is_not_rewalked_until_stale(monkeypatch):
    import os

    from jupyter_costguard.sampling import telemetry

    probe = telemetry.KernelProbe()
    walks = []
    real = probe.tree.descendants
    monkeypatch.setattr(probe.tree, "descendants", lambda pid: walks.append(pid) or real(pid))
    monkeypatch.setattr(probe, "_read", lambda pid: (1.0, 1))  # CPU never moves: quiet
    pid = os.getpid()
    for t in (0.0, 1.0, 2.0, 5.0):
        probe.measure(pid, t)
    # first call walks, and the first reading counts the CPU since birth (busy): walk again
    assert len(walks) == 2
    probe.measure(pid, 2.0 + telemetry.TREE_REWALK_SECONDS)
    assert len(walks) == 3
