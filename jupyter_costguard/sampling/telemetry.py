"""Sampling of GPUs, host and kernels, run on a worker thread.

The IO loop only hands over a list of `KernelInfo` (attribute reads, no I/O, no kernel
messages, so kernels' idle timers are untouched); everything that touches /proc, psutil or
NVML happens here, off the loop.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

import psutil

from jupyter_costguard.sampling.records import (
    ATTRIBUTION_CUDA_MAPPED,
    ATTRIBUTION_NONE,
    ATTRIBUTION_PID,
    GpuReading,
    GpuSample,
    HostSample,
    KernelInfo,
    KernelSample,
    Sample,
)

log = logging.getLogger("jupyter_costguard")

#: How long a "does this process map libcuda?" answer is trusted.
CUDA_MAP_TTL_SECONDS = 30.0
#: A kernel whose processes used no CPU since the last sample cannot have forked, so its
#: process tree is re-walked only after it did, and at least this often.
TREE_REWALK_SECONDS = 10.0

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class GpuSource(Protocol):
    """Where GPU readings come from: NVML, or a replayed trace."""

    simulated: bool

    def read(self, kernel_pids: Sequence[int],
             notebooks: Mapping[int, str] | None = None) -> GpuReading:
        """`kernel_pids` oldest first; `notebooks` maps a kernel's PID to its notebook's
        path (a replayed trace may hand GPUs out by notebook)."""
        ...

    def close(self) -> None: ...


def _read_small(path: str) -> bytes:
    """A small /proc file's bytes, read without a Python file object (half the CPU of
    `open(...).read()`, which matters at one read per kernel process per sample)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = [os.read(fd, 4096)]
        while len(chunks[-1]) == 4096:
            chunks.append(os.read(fd, 4096))
    finally:
        os.close(fd)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


class _ProcTree:
    """Finds a process's descendants cheaply (Linux's per-task children files)."""

    def __init__(self, proc_root: str = "/proc") -> None:
        self.proc_root = proc_root
        self._has_children_files = Path(proc_root, "self", "task").is_dir() and any(
            Path(proc_root, "self", "task").glob("*/children")
        )

    def descendants(self, pid: int) -> list[int]:
        if not self._has_children_files:
            try:
                return [p.pid for p in psutil.Process(pid).children(recursive=True)]
            except psutil.Error:
                return []
        out: list[int] = []
        stack = [pid]
        while stack:
            current = stack.pop()
            for child in self._children(current):
                out.append(child)
                stack.append(child)
        return out

    def _children(self, pid: int) -> list[int]:
        kids: list[int] = []
        task_dir = f"{self.proc_root}/{pid}/task"
        try:
            tids = os.listdir(task_dir)
        except OSError:
            return kids
        for tid in tids:
            try:
                kids.extend(int(x) for x in _read_small(f"{task_dir}/{tid}/children").split())
            except OSError:
                continue
        return kids


class KernelProbe:
    """Per-process CPU and memory, keeping the CPU-time baseline between samples."""

    def __init__(self, proc_root: str = "/proc") -> None:
        self.tree = _ProcTree(proc_root)
        self.proc_root = proc_root
        self._procs: dict[int, psutil.Process] = {}
        self._cpu: dict[int, float] = {}
        self._cuda: dict[int, tuple[float, bool]] = {}
        self._visible: dict[int, str | None] = {}
        self._trees: dict[int, tuple[float, tuple[int, ...], bool]] = {}  # walked, kids, busy
        self._proc_stat = Path(proc_root, "self", "stat").exists()

    def measure(
        self, root_pid: int, now: float | None = None
    ) -> tuple[tuple[int, ...], float, int]:
        """(process tree, CPU seconds since the last call, RSS bytes).

        Walking the tree reads a file per thread of every process (ipykernel runs a dozen
        threads), so it is redone only when the tree used CPU in the previous interval or
        the walk is older than TREE_REWALK_SECONDS. A child forked meanwhile is found one
        sample later and none of its CPU is lost: a new PID counts its CPU since birth.
        """
        now = time.monotonic() if now is None else now
        cached = self._trees.get(root_pid)
        if cached is None or cached[2] or now - cached[0] >= TREE_REWALK_SECONDS:
            kids = tuple(self.tree.descendants(root_pid))
            walked = now
        else:
            walked, kids = cached[0], cached[1]
        cpu_delta = 0.0
        rss = 0
        alive: list[int] = []
        seen = self._cpu
        for pid in (root_pid, *kids) if kids else (root_pid,):
            reading = self._read(pid)
            if reading is None:
                self._forget(pid)
                continue
            total, resident = reading
            before = seen.get(pid, 0.0)
            if total > before:  # CPU time never runs back; a reused PID starts over
                cpu_delta += total - before
            seen[pid] = total
            rss += resident
            alive.append(pid)
        # the root comes first when alive, and no descendant has its PID
        self._trees[root_pid] = (walked, tuple(alive[1:] if alive and alive[0] == root_pid
                                               else alive), cpu_delta > 0.0)
        return tuple(alive), cpu_delta, rss

    def _read(self, pid: int) -> tuple[float, int] | None:
        """(user+system CPU seconds, RSS bytes) of one process; None once it is gone."""
        if self._proc_stat:
            try:
                raw = _read_small(f"{self.proc_root}/{pid}/stat")
                # fields after the command name, which may itself hold spaces and ')'
                fields = raw[raw.rindex(b")") + 2:].split()
                return ((int(fields[11]) + int(fields[12])) / _CLOCK_TICKS,
                        int(fields[21]) * _PAGE_SIZE)
            except (OSError, ValueError, IndexError):
                return None
        proc = self._procs.get(pid)
        try:
            if proc is None:
                proc = self._procs[pid] = psutil.Process(pid)
            with proc.oneshot():
                t = proc.cpu_times()
                mem = proc.memory_info()
        except psutil.Error:
            return None
        return t.user + t.system, mem.rss

    def maps_cuda(self, pid: int, now: float) -> bool:
        """Whether the process has the CUDA driver library mapped (cached for a while)."""
        cached = self._cuda.get(pid)
        if cached is not None and now - cached[0] < CUDA_MAP_TTL_SECONDS:
            return cached[1]
        found = False
        try:
            with open(f"{self.proc_root}/{pid}/maps", "rb") as f:
                for line in f:
                    if b"libcuda.so" in line:
                        found = True
                        break
        except OSError:
            found = False
        self._cuda[pid] = (now, found)
        return found

    def visible_devices(self, pid: int) -> str | None:
        """The CUDA_VISIBLE_DEVICES a process was started with, if readable."""
        if pid in self._visible:
            return self._visible[pid]
        value: str | None = None
        try:
            with open(f"{self.proc_root}/{pid}/environ", "rb") as f:
                for item in f.read().split(b"\0"):
                    if item.startswith(b"CUDA_VISIBLE_DEVICES="):
                        value = item.split(b"=", 1)[1].decode(errors="replace")
                        break
        except OSError:
            value = None
        self._visible[pid] = value
        return value

    def prune(self, live: Iterable[int]) -> None:
        keep = set(live)
        for pid in list(self._cpu):
            if pid not in keep:
                self._forget(pid)

    def _forget(self, pid: int) -> None:
        self._procs.pop(pid, None)
        self._trees.pop(pid, None)
        self._cpu.pop(pid, None)
        self._cuda.pop(pid, None)
        self._visible.pop(pid, None)


def host_memory() -> tuple[int, int]:
    """(total, available) bytes of host memory, as `psutil.virtual_memory()` says them.

    On Linux the two lines are read from /proc/meminfo directly, which costs a fraction of
    psutil's parse of every line; psutil answers whenever the kernel's MemAvailable is
    missing or out of range (its own fallbacks then apply)."""
    if psutil.LINUX:
        total = available = -1
        try:
            for line in _read_small(f"{psutil.PROCFS_PATH}/meminfo").split(b"\n"):
                if line.startswith(b"MemTotal:"):
                    total = int(line.split()[1]) * 1024
                elif line.startswith(b"MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                    break
        except (OSError, ValueError, IndexError):
            total = -1
        if 0 < available <= total:
            return total, available
    vm = psutil.virtual_memory()
    return vm.total, vm.available


def _sees(gpu: GpuSample, visible: str | None) -> bool:
    """Whether a process with this CUDA_VISIBLE_DEVICES can see the GPU."""
    if visible is None:
        return True
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    physical = gpu.index if gpu.nvml_index is None else gpu.nvml_index
    for entry in entries:
        if entry.isdigit() and int(entry) == physical:
            return True
        if gpu.uuid.startswith(entry) or (gpu.mig_parent_uuid or "").startswith(entry):
            return True
    return False


def attribute_gpus(
    gpus: Sequence[GpuSample],
    kernels: Sequence[KernelInfo],
    trees: dict[str, tuple[int, ...]],
    probe: KernelProbe | None,
    now: float,
) -> dict[str, tuple[dict[str, int], str]]:
    """Which kernel holds how much memory on which GPU, and by which method.

    PIDs first; where a GPU carries processes (or memory) that match no kernel, kernels that
    map libcuda and can see that GPU share the unmatched memory equally (containers: NVML
    reports host PIDs that the server's PID namespace does not know).
    """
    owner: dict[int, str] = {}
    for kid, pids in trees.items():
        for pid in pids:
            owner[pid] = kid
    held: dict[str, dict[str, int]] = {k.kernel_id: {} for k in kernels}
    method: dict[str, str] = {k.kernel_id: ATTRIBUTION_NONE for k in kernels}
    unmatched: dict[str, int] = {}
    for gpu in gpus:
        matched_mem = 0
        unmatched_procs = False
        for proc in gpu.processes:
            holder = owner.get(proc.pid)
            if holder is None:
                unmatched_procs = True
                continue
            mem = proc.used_memory_bytes or 0
            held[holder][gpu.uuid] = held[holder].get(gpu.uuid, 0) + mem
            method[holder] = ATTRIBUTION_PID
            matched_mem += mem
        if unmatched_procs or (not gpu.processes and gpu.memory_used_bytes > 0):
            unmatched[gpu.uuid] = max(0, gpu.memory_used_bytes - matched_mem)
    if unmatched and probe is not None:
        by_uuid = {g.uuid: g for g in gpus}
        for uuid, mem in unmatched.items():
            gpu = by_uuid[uuid]
            takers = []
            for k in kernels:
                if uuid in held[k.kernel_id] or k.pid is None:
                    continue
                pids = trees.get(k.kernel_id, ())
                if any(probe.maps_cuda(pid, now) for pid in pids) and _sees(
                    gpu, probe.visible_devices(k.pid)
                ):
                    takers.append(k.kernel_id)
            for kid in takers:
                held[kid][uuid] = mem // len(takers)
                if method[kid] == ATTRIBUTION_NONE:
                    method[kid] = ATTRIBUTION_CUDA_MAPPED
    return {kid: (held[kid], method[kid]) for kid in held}


class Telemetry:
    """Takes one `Sample`: host, GPUs and every kernel's share of them."""

    def __init__(
        self,
        gpu_source: GpuSource,
        clock: Callable[[], float] = time.time,
        proc_root: str = "/proc",
    ) -> None:
        self.gpu_source = gpu_source
        self.clock = clock
        self.probe = KernelProbe(proc_root)
        self._last_time: float | None = None
        psutil.cpu_percent(interval=None)  # prime the host CPU counter

    @property
    def simulated(self) -> bool:
        return self.gpu_source.simulated

    def sample(self, kernels: Sequence[KernelInfo]) -> Sample:
        started = time.perf_counter()
        now = self.clock()
        interval = 0.0 if self._last_time is None else max(0.0, now - self._last_time)
        self._last_time = now

        trees: dict[str, tuple[int, ...]] = {}
        cpu: dict[str, float] = {}
        rss: dict[str, int] = {}
        for k in kernels:
            if k.pid is None:
                trees[k.kernel_id], cpu[k.kernel_id], rss[k.kernel_id] = (), 0.0, 0
                continue
            trees[k.kernel_id], cpu[k.kernel_id], rss[k.kernel_id] = self.probe.measure(
                k.pid, time.monotonic())
        self.probe.prune(pid for pids in trees.values() for pid in pids)

        kernel_pids = [k.pid for k in kernels if k.pid is not None]
        notebooks = {k.pid: k.path for k in kernels if k.pid is not None and k.path}
        gpu = self.gpu_source.read(kernel_pids, notebooks=notebooks)
        held = attribute_gpus(gpu.gpus, kernels, trees, self.probe, now)

        memory_total, memory_available = host_memory()
        host = HostSample(
            cpu_count=psutil.cpu_count() or 1,
            cpu_percent=psutil.cpu_percent(interval=None),
            memory_total_bytes=memory_total,
            memory_used_bytes=memory_total - memory_available,
        )
        samples = tuple(
            KernelSample(
                info=k,
                pids=trees[k.kernel_id],
                cpu_seconds=cpu[k.kernel_id],
                rss_bytes=rss[k.kernel_id],
                gpu_memory_bytes=held[k.kernel_id][0],
                attribution=held[k.kernel_id][1],
            )
            for k in kernels
        )
        return Sample(
            time=now,
            interval=interval,
            gpu=gpu,
            host=host,
            kernels=samples,
            simulated=self.gpu_source.simulated,
            duration_seconds=time.perf_counter() - started,
        )

    def close(self) -> None:
        self.gpu_source.close()
