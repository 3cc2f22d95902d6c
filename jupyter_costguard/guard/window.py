"""Sliding-window totals that cost O(1) per sample, however long the window.

Rules judge stretches of time (30 min of GPU use, 10 min of a kernel's waiting). Re-reading
every kept sample on every tick costs O(window × kernels) per tick: at 1 Hz, 30 kernels and a
30 min window that was ~40 ms of server CPU per sample. Instead each rule reduces a sample to
its *contribution* once (a few named numbers) and `Rolling` keeps running sums and maxima as
contributions enter and leave the window.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field


@dataclass
class _Entry:
    time: float
    sums: Mapping[Hashable, float]
    maxima: Mapping[Hashable, float]


@dataclass
class _MaxQueue:
    """Candidates for the maximum, times ascending and values descending (a monotonic queue)."""

    items: deque[tuple[float, float]] = field(default_factory=deque)

    def push(self, time: float, value: float) -> None:
        while self.items and self.items[-1][1] <= value:
            self.items.pop()
        self.items.append((time, value))

    def expire(self, start: float) -> None:
        while self.items and self.items[0][0] < start:
            self.items.popleft()


class Rolling:
    """Sums and maxima of named values over the points of the last `span` seconds.

    A point at time t is in the window while ``t >= now - span``. A key leaves `sums` when no
    point in the window has it, so a stopped kernel's figures go away with its last point.
    Subtracting floats drifts: the sums are re-added exactly (`math.fsum`) once a window's worth
    of points has left, which keeps the amortised cost O(1).
    """

    def __init__(self, span: float) -> None:
        self.span = span
        self._entries: deque[_Entry] = deque()
        self._sums: dict[Hashable, float] = {}
        self._counts: dict[Hashable, int] = {}
        self._maxima: dict[Hashable, _MaxQueue] = {}
        self._evicted = 0

    def add(self, time: float, sums: Mapping[Hashable, float],
            maxima: Mapping[Hashable, float] | None = None) -> None:
        """Adds one point's contribution and drops the points that left the window."""
        entry = _Entry(time, dict(sums), dict(maxima or {}))
        self._entries.append(entry)
        for key, value in entry.sums.items():
            self._sums[key] = self._sums.get(key, 0.0) + value
            self._counts[key] = self._counts.get(key, 0) + 1
        for key, value in entry.maxima.items():
            self._maxima.setdefault(key, _MaxQueue()).push(time, value)
        self.expire(time)

    def expire(self, now: float) -> None:
        start = now - self.span
        entries = self._entries
        while entries and entries[0].time < start:
            old = entries.popleft()
            self._evicted += 1
            for key, value in old.sums.items():
                left = self._counts[key] - 1
                if left == 0:
                    del self._counts[key], self._sums[key]
                else:
                    self._counts[key] = left
                    self._sums[key] -= value
        for key, queue in list(self._maxima.items()):
            queue.expire(start)
            if not queue.items:
                del self._maxima[key]
        if self._evicted >= max(64, len(entries)):
            self._resum()

    def _resum(self) -> None:
        parts: dict[Hashable, list[float]] = {}
        for entry in self._entries:
            for key, value in entry.sums.items():
                parts.setdefault(key, []).append(value)
        self._sums = {key: math.fsum(values) for key, values in parts.items()}
        self._evicted = 0

    def sum(self, key: Hashable) -> float:
        return self._sums.get(key, 0.0)

    def max(self, key: Hashable, default: float = 0.0) -> float:
        queue = self._maxima.get(key)
        return queue.items[0][1] if queue is not None and queue.items else default

    def keys(self) -> Iterable[Hashable]:
        """Keys some point in the window has a sum for."""
        return self._sums.keys()

    def __len__(self) -> int:
        return len(self._entries)
