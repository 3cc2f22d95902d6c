"""What the API answers about a job: its document, a chunk of its log, its results, read from
the stored job and the files its runner wrote. Built on the service's worker thread."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from jupyter_costguard.common.owner import owner_doc, owner_from_doc
from jupyter_costguard.offload import jobdir
from jupyter_costguard.offload.accounting import Accounting
from jupyter_costguard.offload.backends.base import Backend
from jupyter_costguard.offload.errors import JobError
from jupyter_costguard.offload.spec import Job, label
from jupyter_costguard.offload.variables import load_code

log = logging.getLogger("jupyter_costguard")

#: ended jobs whose log tail is kept in memory (a job list holds at most 500)
MAX_CACHED_TAILS = 1000


@dataclass
class JobDocuments:
    backends: Mapping[str, Backend]
    job_dir: Callable[[int], Path]
    accounting: Accounting
    currency: Callable[[], str]
    clock: Callable[[], float]
    #: job -> its log's last lines, once it has ended
    _final_tails: dict[int, str] = field(default_factory=dict, init=False)

    def doc(self, job: Job, detail: bool = False) -> dict[str, Any]:
        now = self.clock()
        spec = job.spec
        doc: dict[str, Any] = {
            "id": job.id, "notebook": spec.notebook, "backend": spec.backend,
            "state": job.state, "phase": job.phase, "created": job.created,
            "started": job.started, "ended": job.ended,
            "elapsed_seconds": round(job.elapsed(now), 3), "attempts": job.attempts,
            "max_attempts": spec.retries + 1, "exit_reason": job.exit_reason,
            "spend": round(job.spend, 6), "currency": self.currency(),
            "resources": spec.resources.to_json(), "selected": list(spec.selected),
            # what the job pickles back when it ends, and how that was chosen
            "bring_back": list(spec.bring_back),
            "bring_back_from": _bring_back_from(job),
            "label": label(job, now, self.currency()),
            "log_tail": self._log_tail(job),
            "timeline": [p.to_json(now) for p in job.timeline()],
            "backend_detail": self._backend_detail(job, detail),
            "gpu_utilization_percent": self.accounting.gpu_mean(job),
            # what the job was estimated to cost before it ran, beside what it is charged
            "estimate": _kept_estimate(job),
            "charged_per_hour": charged_per_hour(job, now),
            # whose job it is (JupyterHub user and server), as its record says
            **owner_doc(owner_from_doc(job.record.get("owner"))),
        }
        if detail:
            doc["slice"] = dict(job.slice_doc)
            doc["spec"] = spec.to_json()
            doc["record"] = dict(job.record)
        return doc

    def _backend_detail(self, job: Job, detail: bool) -> dict[str, Any] | None:
        """What a cluster says about a job that has not ended (why it waits, where it runs):
        in the job's own document, and in lists while it waits."""
        backend = self.backends.get(job.spec.backend)
        if backend is None or job.terminal or not (detail or job.phase in ("queued",
                                                                           "starting")):
            return None
        try:
            found = backend.describe(job, self.job_dir(job.id))
        except Exception as e:  # a cluster that does not answer must not break the API
            log.debug("costguard: job %d: describe failed: %s", job.id, e)
            return None
        return dict(found) if found else None

    def _log_tail(self, job: Job) -> str:
        """The last lines of the log. An ended job's log no longer changes: it is read once,
        not on every poll of the job list."""
        tail = self._final_tails.get(job.id)
        if tail is None:
            tail = self._read_tail(job.id)
            if job.terminal:
                self._final_tails[job.id] = tail
                if len(self._final_tails) > MAX_CACHED_TAILS:  # the oldest read first
                    del self._final_tails[next(iter(self._final_tails))]
        return tail

    def _read_tail(self, job_id: int, lines: int = 20, max_bytes: int = 8192) -> str:
        path = self.job_dir(job_id) / jobdir.LOG
        try:
            with _open_log(path) as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - max_bytes))
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def log(self, job: Job, offset: int, limit: int) -> dict[str, Any]:
        """Up to `limit` bytes of the log from byte `offset` (poll on with ``next_offset``)."""
        path = self.job_dir(job.id) / jobdir.LOG
        try:
            with _open_log(path) as f:
                size = os.fstat(f.fileno()).st_size
                f.seek(min(offset, size))
                data = f.read(limit)
        except OSError:  # missing, or the job put something else there
            size, data = 0, b""
        # never split a UTF-8 character: hold back an incomplete tail
        text = data.decode("utf-8", "ignore") if len(data) < limit else _complete_utf8(data)
        end = min(offset, size) + len(text.encode("utf-8"))
        return {"offset": min(offset, size), "next_offset": end, "size": size,
                "text": text, "complete": job.terminal and end >= size}

    def results(self, job: Job, names: list[str] | None = None) -> dict[str, Any]:
        """The selected cells' outputs and the names the job brought back; `load_code` loads
        them all, or only `names` (each one of them, else a `JobError`)."""
        d = self.job_dir(job.id)
        outputs = jobdir.read_outputs(d)
        index = jobdir.read_results_index(d)
        pickled = d / jobdir.RESULTS
        # offered only when the server recorded, as the job ended, that it produced them
        digest = job.record.get("results_sha256")
        has = isinstance(digest, str) and bool(index["results"]) and pickled.exists()
        if names is not None:
            known = {r.get("name") for r in index["results"]} if has else set()
            unknown = [n for n in names if n not in known]
            if unknown:
                raise JobError(f"job {job.id} brought back no {', '.join(unknown[:10])}"
                               f"{' ...' if len(unknown) > 10 else ''}")
        return {
            "job": job.id, "state": job.state,
            "label": label(job, self.clock(), self.currency()),
            "cells": outputs, "results": index["results"] if has else [],
            "skipped": index["skipped"],
            "results_path": str(pickled) if has else None,
            "bring_back": list(job.spec.bring_back),
            "load_code": load_code(job.id, str(pickled), str(digest), names) if has else None,
        }


def _bring_back_from(job: Job) -> str:
    """How the job's `bring_back` was chosen (`requests.BRING_BACK_*`); jobs submitted before
    it was recorded took every name the selected cells define."""
    found = job.record.get("bring_back_from")
    return found if found in ("request", "later_cells", "selected_cells") else "selected_cells"


def _open_log(path: Path) -> BinaryIO:
    """The job's log for reading, if it is a regular file: a link (to a file elsewhere) or a
    FIFO (which would block the worker) put in its place by the job is no log (OSError)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path} is not a regular file")
    return os.fdopen(fd, "rb")


def _complete_utf8(data: bytes) -> str:
    """Decode, leaving out a multi-byte character cut at the end."""
    for cut in range(0, 4):
        try:
            return data[:len(data) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return data.decode("utf-8", "replace")


def _kept_estimate(job: Job) -> dict[str, Any] | None:
    kept = job.record.get("estimate")
    return dict(kept) if isinstance(kept, dict) else None


#: below this much running time a per-hour figure says more about rounding than the job
MIN_CHARGED_SECONDS = 1.0


def charged_per_hour(job: Job, now: float) -> float | None:
    """What the job has been charged per hour of running: its spend over the time from its
    runner's start to its end (or now), the figure its estimate's hourly price predicts;
    None before it has run a second."""
    start = job.phase_times.get("starting", job.phase_times.get("running"))
    if start is None:
        return None
    end = job.phase_times.get("done", job.ended if job.ended is not None else now)
    seconds = end - start
    if seconds < MIN_CHARGED_SECONDS:
        return None
    return round(job.spend * 3600.0 / seconds, 6)
