"""What a batch job is: the records shared by the store, the backends and the runner.

A `JobSpec` is everything needed to run the job again (it is stored as JSON and handed to the
backend unchanged); a `Job` is one run of a spec with its state and timeline.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from jupyter_costguard.common.moneytext import format_money
from jupyter_costguard.offload.errors import JobError
from jupyter_costguard.offload.jobdir import PHASES as PHASES
from jupyter_costguard.offload.jobdir import STATES as STATES
from jupyter_costguard.offload.jobdir import TERMINAL as TERMINAL

MAX_RETRIES = 10
MAX_TIME_LIMIT_SECONDS = 30 * 86400.0


class SpecError(JobError, ValueError):
    """A request that cannot become a job; the message says what to change. A `JobError`
    (400) wherever a request raises it, and a `ValueError` for a stored spec that reads
    back wrong."""


@dataclass(frozen=True)
class Resources:
    """What the job asks for. None: the backend's default (local: the whole machine,
    GPUs as the server sees them)."""

    gpus: int | None = None
    cpus: float | None = None
    memory_gib: float | None = None
    time_limit_seconds: float | None = None

    @classmethod
    def parse(cls, doc: Any) -> Resources:
        if doc is None:
            return cls()
        if not isinstance(doc, Mapping):
            raise SpecError("resources must be an object")
        unknown = sorted(set(doc) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise SpecError(f"unknown resource(s): {', '.join(unknown)}")
        gpus = doc.get("gpus")
        if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int)
                                 or not 0 <= gpus <= 64):
            raise SpecError("resources.gpus must be an integer from 0 to 64, or null")

        def number(name: str, upper: float) -> float | None:
            value = doc.get(name)
            if value is None:
                return None
            # compared before any conversion: an integer of hundreds of digits (valid
            # JSON) has no float, and math.isfinite would raise OverflowError on it
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not 0 < value <= upper or not math.isfinite(value):
                raise SpecError(f"resources.{name} must be a number above 0 and at most "
                                f"{upper:g}, or null")
            return float(value)

        return cls(gpus=gpus, cpus=number("cpus", 1024), memory_gib=number("memory_gib", 1 << 16),
                   time_limit_seconds=number("time_limit_seconds", MAX_TIME_LIMIT_SECONDS))

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class SpecCell:
    """One cell the job runs, as the slicer chose it."""

    cell_id: str
    index: int
    selected: bool
    code: str  # what runs (IPython syntax already transformed)
    source: str  # what the user wrote
    provides: tuple[str, ...] = ()
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        doc = dataclasses.asdict(self)
        doc["provides"] = list(self.provides)
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> SpecCell:
        return cls(cell_id=doc["cell_id"], index=int(doc["index"]),
                   selected=bool(doc["selected"]), code=doc["code"], source=doc["source"],
                   provides=tuple(doc.get("provides", ())), reason=doc.get("reason", ""))


@dataclass(frozen=True)
class JobSpec:
    notebook: str  # server-relative path of the notebook the cells came from
    cwd: str  # absolute: the notebook's directory
    kernel_name: str
    cells: tuple[SpecCell, ...]
    resources: Resources = field(default_factory=Resources)
    retries: int = 0
    retry_backoff_seconds: float = 2.0
    backend: str = "local"
    send: tuple[str, ...] = ()  # variables sent in by value (pickled at submit)
    bring_back: tuple[str, ...] = ()  # names pickled back when the job ends
    inputs: tuple[str, ...] = ()  # data files the user declares (manifest in the record)
    checkpoint_location: str | None = None  # None: the job's own directory

    @property
    def code(self) -> str:
        return "\n\n".join(f"# cell {c.index} ({c.cell_id})\n{c.code}" for c in self.cells)

    @property
    def selected(self) -> tuple[str, ...]:
        return tuple(c.cell_id for c in self.cells if c.selected)

    def to_json(self) -> dict[str, Any]:
        return {
            "notebook": self.notebook, "cwd": self.cwd, "kernel_name": self.kernel_name,
            "cells": [c.to_json() for c in self.cells], "resources": self.resources.to_json(),
            "retries": self.retries, "retry_backoff_seconds": self.retry_backoff_seconds,
            "backend": self.backend, "send": list(self.send), "bring_back": list(self.bring_back),
            "inputs": list(self.inputs), "checkpoint_location": self.checkpoint_location,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> JobSpec:
        return cls(
            notebook=doc["notebook"], cwd=doc["cwd"], kernel_name=doc["kernel_name"],
            cells=tuple(SpecCell.from_json(c) for c in doc["cells"]),
            resources=Resources.parse(doc.get("resources")),
            retries=int(doc.get("retries", 0)),
            retry_backoff_seconds=float(doc.get("retry_backoff_seconds", 2.0)),
            backend=doc.get("backend", "local"), send=tuple(doc.get("send", ())),
            bring_back=tuple(doc.get("bring_back", ())), inputs=tuple(doc.get("inputs", ())),
            checkpoint_location=doc.get("checkpoint_location"),
        )


def parse_names(doc: Any, what: str, limit: int = 100) -> tuple[str, ...]:
    """A list of Python identifiers from a request."""
    if doc is None:
        return ()
    if not isinstance(doc, list) or len(doc) > limit:
        raise SpecError(f"{what} must be a list of at most {limit} names")
    for name in doc:
        if not isinstance(name, str) or not name.isidentifier():
            raise SpecError(f"{what}: {name!r} is not a Python name")
    return tuple(dict.fromkeys(doc))


def parse_retries(doc: Any) -> int:
    if doc is None:
        return 0
    if isinstance(doc, bool) or not isinstance(doc, int) or not 0 <= doc <= MAX_RETRIES:
        raise SpecError(f"retries must be an integer from 0 to {MAX_RETRIES}")
    return doc


@dataclass(frozen=True)
class Phase:
    phase: str
    start: float
    end: float | None
    spend: float

    def to_json(self, now: float) -> dict[str, Any]:
        end = self.end if self.end is not None else now
        return {"phase": self.phase, "start": self.start, "end": self.end,
                "seconds": round(max(0.0, end - self.start), 3), "spend": round(self.spend, 6)}


@dataclass(frozen=True)
class Job:
    id: int
    spec: JobSpec
    state: str
    phase: str
    created: float
    #: phase -> the time it began (queued == created)
    phase_times: Mapping[str, float] = field(default_factory=dict)
    #: phase -> the job's ledger spend when it began (spend per phase is the difference)
    phase_spend: Mapping[str, float] = field(default_factory=dict)
    ended: float | None = None
    attempts: int = 0
    exit_reason: str | None = None
    spend: float = 0.0
    runner_pid: int | None = None
    #: what the backend knows the job by (local: the runner's pid; Slurm: the job id)
    backend_ref: str | None = None
    kernel_pid: int | None = None
    record: Mapping[str, Any] = field(default_factory=dict)
    slice_doc: Mapping[str, Any] = field(default_factory=dict)

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL

    @property
    def started(self) -> float | None:
        return self.phase_times.get("starting")

    def elapsed(self, now: float) -> float:
        return max(0.0, (self.ended if self.ended is not None else now) - self.created)

    def ended_as(self, state: str, reason: str, now: float) -> Job:
        """The job ended `state` for `reason` as the server says it (its runner could not):
        phase done, since `now` unless the runner already said when."""
        phase_times = dict(self.phase_times)
        phase_times.setdefault("done", now)
        return dataclasses.replace(self, state=state, phase="done", exit_reason=reason,
                                   phase_times=phase_times)

    def timeline(self) -> list[Phase]:
        """The phases the job went through, each with its duration and spend."""
        seen = [(p, self.phase_times[p]) for p in PHASES if p in self.phase_times]
        phases = []
        for i, (name, start) in enumerate(seen):
            if name == "done":
                break
            end = seen[i + 1][1] if i + 1 < len(seen) else self.ended
            spend_start = self.phase_spend.get(name, 0.0)
            spend_end = (self.phase_spend.get(seen[i + 1][0], self.spend)
                         if i + 1 < len(seen) else self.spend)
            phases.append(Phase(name, start, end, max(0.0, spend_end - spend_start)))
        return phases


def duration_text(seconds: float) -> str:
    """3m12s, 45s, 1h02m: short enough for a line under a cell."""
    s = round(max(0.0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def label(job: Job, now: float, currency: str) -> str:
    """The line put under the cells: "ran as job 12 on local · 3m12s · USD 0.41"."""
    took = duration_text(job.elapsed(now))
    money = format_money(job.spend, currency)
    if job.state == "succeeded":
        head = f"ran as job {job.id} on {job.spec.backend}"
    elif job.terminal:
        head = f"job {job.id} {job.state} on {job.spec.backend}"
    else:
        head = f"job {job.id} {job.phase} on {job.spec.backend}"
    return f"{head} · {took} · {money}"
