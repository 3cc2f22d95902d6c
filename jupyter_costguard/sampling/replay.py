"""Plays a recorded GPU trace, for demos and tests on machines without a GPU.

Trace processes name kernels by the notebook they serve ("notebook": "train.ipynb", the
server-relative path; the oldest kernel of that notebook) or by their start order
("kernel": 0 is the oldest running kernel), so a replay attributes recorded GPU use to the
real kernels of this server. Binding by notebook makes a demo tell the same story whatever
the user opens first. Every
reading from here is marked simulated, and the API and UI say so.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_costguard.sampling.records import GpuProcess, GpuReading, GpuSample

TRACE_FORMAT = "costguard-trace/1"


class TraceError(ValueError):
    """A trace file that cannot be played; the message names the file and the problem."""


@dataclass(frozen=True)
class _Frame:
    t: float
    gpus: tuple[dict[str, Any], ...]


class ReplaySource:
    """A `GpuSource` that loops over the frames of a trace file."""

    simulated = True

    def __init__(self, path: str | Path, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self.clock = clock
        try:
            doc = json.loads(self.path.read_text())
        except (OSError, ValueError) as e:
            raise TraceError(f"cannot read trace {self.path}: {e}") from e
        if not isinstance(doc, dict) or doc.get("format") != TRACE_FORMAT:
            raise TraceError(f"{self.path}: not a {TRACE_FORMAT} trace")
        try:
            self.gpus = tuple(
                (str(g["uuid"]), str(g["name"]), int(g["memory_total_bytes"]))
                for g in doc["gpus"]
            )
            frames = sorted(
                (_Frame(float(f["t"]), tuple(f["gpus"])) for f in doc["frames"]),
                key=lambda f: f.t,
            )
        except (KeyError, TypeError, ValueError) as e:
            raise TraceError(f"{self.path}: malformed trace ({e!r})") from e
        if not frames:
            raise TraceError(f"{self.path}: trace has no frames")
        for f in frames:
            if len(f.gpus) != len(self.gpus):
                raise TraceError(f"{self.path}: frame at t={f.t} has {len(f.gpus)} GPUs")
        self.frames = frames
        #: what each GPU draws when nothing holds it: the trace's lowest reading for it
        #: (unheld frames first), for a recorded process whose kernel is not running here
        self.idle_power: list[float | None] = [self._idle_power(i) for i in range(len(self.gpus))]
        self.duration = float(doc.get("duration", frames[-1].t + float(doc.get("interval", 2))))
        self.instance_type: str | None = doc.get("instance_type")
        self.driver_version = str(doc.get("driver_version", "replay"))
        self.description = str(doc.get("description", ""))
        self.started = clock()

    def frame_at(self, now: float) -> _Frame:
        offset = (now - self.started) % self.duration if self.duration > 0 else 0.0
        current = self.frames[0]
        for f in self.frames:
            if f.t <= offset:
                current = f
            else:
                break
        return current

    def _idle_power(self, index: int) -> float | None:
        """Its lowest unheld reading; else the lowest unheld reading of a GPU of the same
        model; else its own lowest reading."""
        def unheld(i: int) -> list[float]:
            return [float(f.gpus[i]["power_watts"]) for f in self.frames
                    if "power_watts" in f.gpus[i] and not f.gpus[i].get("processes")]
        same_model = [i for i, g in enumerate(self.gpus) if g[1] == self.gpus[index][1]]
        pool = unheld(index) or [w for i in same_model for w in unheld(i)] or [
            float(f.gpus[index]["power_watts"]) for f in self.frames
            if "power_watts" in f.gpus[index]]
        return min(pool) if pool else None

    def read(self, kernel_pids: Sequence[int],
             notebooks: Mapping[int, str] | None = None) -> GpuReading:
        frame = self.frame_at(self.clock())
        by_notebook: dict[str, int] = {}
        for pid in kernel_pids:  # oldest first: a notebook's oldest kernel holds its GPUs
            path = (notebooks or {}).get(pid)
            if path:
                by_notebook.setdefault(path.strip("/"), pid)
        gpus = []
        for index, ((uuid, name, total), g) in enumerate(zip(self.gpus, frame.gpus)):
            procs = []
            for p in g.get("processes", ()):
                if "notebook" in p:
                    holder = by_notebook.get(str(p["notebook"]).strip("/"))
                    if holder is not None:
                        procs.append(GpuProcess(holder, int(p["used_memory_bytes"])))
                    continue
                slot = int(p["kernel"])
                if slot < len(kernel_pids):
                    procs.append(GpuProcess(kernel_pids[slot], int(p["used_memory_bytes"])))
            gpus.append(
                GpuSample(
                    index=index,
                    uuid=uuid,
                    name=name,
                    memory_total_bytes=total,
                    memory_used_bytes=sum(p.used_memory_bytes or 0 for p in procs)
                    + int(g.get("other_memory_bytes", 0)),
                    # null: the device reported none (a MIG instance), unknown activity
                    utilization_percent=(None if g.get("utilization_percent") is None
                                         else float(g["utilization_percent"]))
                    if procs else 0.0,
                    # a GPU whose recorded user is not running here sits idle: it draws idle
                    # power, not the busy figure recorded for it
                    power_watts=(float(g["power_watts"]) if procs or not g.get("processes")
                                 else self.idle_power[index])
                    if "power_watts" in g else None,
                    processes=tuple(procs),
                )
            )
        return GpuReading(status="ok", driver_version=self.driver_version, gpus=tuple(gpus))

    def close(self) -> None:
        pass
