"""A sliding window of compact per-sample facts, for rules that judge a stretch of time."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from ..records import Sample


@dataclass(frozen=True)
class KernelPoint:
    kernel_id: str
    notebook: str | None
    busy: bool
    gpu_memory_bytes: dict[str, int]  # GPU uuid -> bytes held
    cpu_seconds: float
    rss_bytes: int
    last_activity: float


@dataclass(frozen=True)
class GpuPoint:
    uuid: str
    utilization_percent: float | None
    memory_used_bytes: int
    memory_total_bytes: int


@dataclass(frozen=True)
class Point:
    time: float
    interval: float
    gpus: tuple[GpuPoint, ...]
    kernels: tuple[KernelPoint, ...]
    host_cpu_percent: float
    host_cpu_count: int
    host_memory_used_bytes: int


class SampleWindow:
    """Keeps `span` seconds of points (the longest window any rule needs)."""

    def __init__(self, span: float) -> None:
        self.span = span
        self._points: deque[Point] = deque()

    def add(self, sample: Sample) -> Point:
        point = Point(
            time=sample.time,
            interval=sample.interval,
            gpus=tuple(GpuPoint(g.uuid, g.utilization_percent, g.memory_used_bytes,
                                g.memory_total_bytes) for g in sample.gpu.gpus),
            kernels=tuple(KernelPoint(k.info.kernel_id, k.info.path,
                                      k.info.execution_state == "busy",
                                      dict(k.gpu_memory_bytes), k.cpu_seconds, k.rss_bytes,
                                      k.info.last_activity) for k in sample.kernels),
            host_cpu_percent=sample.host.cpu_percent,
            host_cpu_count=sample.host.cpu_count,
            host_memory_used_bytes=sample.host.memory_used_bytes,
        )
        self._points.append(point)
        while self._points and point.time - self._points[0].time > self.span:
            self._points.popleft()
        return point

    def since(self, start: float) -> Iterator[Point]:
        return (p for p in self._points if p.time >= start)

    def covered(self, start: float) -> float:
        """Seconds of sampled time since `start`."""
        return sum(p.interval for p in self.since(start))

    def __len__(self) -> int:
        return len(self._points)
