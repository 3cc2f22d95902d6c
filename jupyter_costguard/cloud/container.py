"""What part of the instance this server's container holds: its share of the price.

A pod on a shared GPU node sees the node's CPUs and RAM through psutil but is limited by its
cgroup, and NVML shows only the GPUs handed to it. Pricing the pod as the whole instance
overstates its spend by the number of pods on the node. Following OpenCost (a pod is priced
by what it was given), the container's rate is::

    rate = gpu_part * gpus_held / gpus_of_instance + host_part * max(cpu_share, memory_share)

where ``gpu_part`` and ``host_part`` split the instance's rate (the catalog's GPU share), and
the shares are the cgroup v2 limits (``cpu.max``, ``memory.max``, the tightest on the path
from this process's cgroup to the root) over the host's CPUs and RAM. cgroup v1 is not read:
on a v1 host the host part is the whole host's, and the detail says so.

Whether this is a container at all is asked first (``/.dockerenv``, ``/run/.containerenv``,
``KUBERNETES_SERVICE_HOST``, a cgroup v2 path other than the root): on a VM the whole
instance is paid for, however few GPUs a process sees. ``COSTGUARD_CONTAINER_SHARE`` (or the
``container_share`` trait) forces ``on`` or ``off``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ENV_CONTAINER_SHARE = "COSTGUARD_CONTAINER_SHARE"
MODES = ("auto", "on", "off")


@dataclass(frozen=True)
class CgroupLimits:
    """The tightest cgroup v2 limits on this process's path (None: unlimited or unread)."""

    cpus: float | None
    memory_bytes: int | None
    path: str | None  # the cgroup v2 path of this process, None when there is none
    detail: str


@dataclass(frozen=True)
class ContainerShare:
    """The part of the instance the container holds; all fractions in 0..1."""

    gpus_held: int
    gpus_instance: int
    cpu_share: float
    memory_share: float
    detail: str

    @property
    def host_share(self) -> float:
        return max(self.cpu_share, self.memory_share)

    @property
    def gpu_fraction(self) -> float:
        return self.gpus_held / self.gpus_instance if self.gpus_instance else 0.0

    def rate(self, instance_rate: float, gpu_share: float) -> float:
        """The container's rate from the instance's and the instance's GPU share."""
        return instance_rate * (gpu_share * self.gpu_fraction
                                + (1.0 - gpu_share) * self.host_share)

    def container_gpu_share(self, gpu_share: float) -> float:
        """The GPU share of the container's own rate (what the spend model splits by)."""
        gpu = gpu_share * self.gpu_fraction
        total = gpu + (1.0 - gpu_share) * self.host_share
        return gpu / total if total > 0 else 0.0


def read_cgroup_limits(root: Path = Path("/sys/fs/cgroup"),
                       self_cgroup: Path = Path("/proc/self/cgroup")) -> CgroupLimits:
    """cgroup v2's ``cpu.max`` and ``memory.max``, tightest from this cgroup up to the root."""
    try:
        lines = self_cgroup.read_text().splitlines()
    except OSError as e:
        return CgroupLimits(None, None, None, f"no cgroup information ({e.strerror or e})")
    path = next((ln[3:] for ln in lines if ln.startswith("0::")), None)
    if path is None:
        return CgroupLimits(None, None, None, "no cgroup v2 (a v1 host: limits not read)")
    if not (root / "cgroup.controllers").exists():
        return CgroupLimits(None, None, path, f"cgroup v2 not mounted at {root}")
    cpus: float | None = None
    memory: int | None = None
    node = root / path.strip("/") if path.strip("/") else root
    while True:
        cpus = _tighter(cpus, _cpu_max(node / "cpu.max"))
        mem = _memory_max(node / "memory.max")
        memory = mem if memory is None else (memory if mem is None else min(memory, mem))
        if node == root or root not in node.parents:
            break
        node = node.parent
    said = (f"cpu.max {cpus:g} CPUs" if cpus is not None else "cpu.max unlimited") + ", " + (
        f"memory.max {memory / 1024**3:.1f} GiB" if memory is not None
        else "memory.max unlimited")
    return CgroupLimits(cpus, memory, path, f"cgroup v2 {path}: {said}")


def _tighter(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else min(a, b)


def _cpu_max(file: Path) -> float | None:
    try:
        quota, _, period = file.read_text().strip().partition(" ")
        if quota == "max":
            return None
        return int(quota) / int(period or "100000")
    except (OSError, ValueError, ZeroDivisionError):
        return None


def _memory_max(file: Path) -> int | None:
    try:
        text = file.read_text().strip()
        return None if text == "max" else int(text)
    except (OSError, ValueError):
        return None


def in_container(environ: Mapping[str, str], limits: CgroupLimits,
                 root_fs: Path = Path("/")) -> tuple[bool, str]:
    """(is this a container, why): the markers container runtimes and Kubernetes leave."""
    if environ.get("KUBERNETES_SERVICE_HOST"):
        return True, "a Kubernetes pod (KUBERNETES_SERVICE_HOST is set)"
    for marker in (".dockerenv", "run/.containerenv"):
        if (root_fs / marker).exists():
            return True, f"a container (/{marker} exists)"
    if limits.path not in (None, "/"):
        return True, f"a container (cgroup {limits.path})"
    return False, "not a container"


def container_share(*, mode: str, environ: Mapping[str, str], limits: CgroupLimits,
                    host_cpus: int, host_memory_bytes: int, gpus_held: int,
                    gpus_instance: int, root_fs: Path = Path("/")
                    ) -> tuple[ContainerShare | None, str]:
    """(share, sentence): the share when this container holds part of the instance, else
    None; the sentence says which, and why."""
    mode = (environ.get(ENV_CONTAINER_SHARE) or mode or "auto").strip().lower()
    if mode not in MODES:
        mode = "auto"
    if mode == "off":
        return None, "container share off (the whole instance is priced)"
    if mode == "auto":
        inside, why = in_container(environ, limits, root_fs)
        if not inside:
            return None, f"{why}: the whole instance is priced"
    else:
        why = f"{ENV_CONTAINER_SHARE}/container_share = on"
    cpu = min(1.0, limits.cpus / host_cpus) if limits.cpus and host_cpus > 0 else 1.0
    mem = (min(1.0, limits.memory_bytes / host_memory_bytes)
           if limits.memory_bytes and host_memory_bytes > 0 else 1.0)
    held = min(gpus_held, gpus_instance) if gpus_instance else 0
    if held >= gpus_instance and cpu >= 1.0 and mem >= 1.0:
        return None, f"{why}, holding the whole instance ({limits.detail})"
    detail = (f"{why}: {held} of {gpus_instance} GPUs, CPU share {cpu:.1%}, memory share "
              f"{mem:.1%} ({limits.detail}); host part priced at {max(cpu, mem):.1%}")
    return ContainerShare(held, gpus_instance, cpu, mem, detail), detail
