"""The job service: submit, follow, cancel, read back. Handlers are thin over it.

Store writes, file reads and process launches run on one worker thread, never on the IO
loop. A follower task reads each active job's ``status.json`` (every `poll_interval` while a
job is active), updates the store, accounts spend from the ledger, relaunches a runner that
vanished while attempts remain, and marks the job ``lost`` when none do.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from prometheus_client.core import GaugeMetricFamily, Metric

from jupyter_costguard.metrics.pushgateway import ENV_URL as PUSH_ENV
from jupyter_costguard.metrics.pushgateway import delete_job_metrics
from jupyter_costguard.offload.backends.local import CANCEL_GRACE_SECONDS, Backend, LocalBackend
from jupyter_costguard.offload.record import make_record
from jupyter_costguard.offload.runner import read_json, write_json
from jupyter_costguard.offload.slicer import Slice, SliceError, slice_cells
from jupyter_costguard.offload.spec import (
    STATES,
    Job,
    JobSpec,
    Resources,
    SpecCell,
    SpecError,
    label,
    parse_names,
    parse_retries,
)
from jupyter_costguard.offload.state import SendError, load_code, send_variables
from jupyter_costguard.offload.store import JobStore
from jupyter_costguard.sampling.records import KernelInfo, Sample

log = logging.getLogger("jupyter_costguard")
T = TypeVar("T")

REQUEST_FIELDS = frozenset({"notebook", "cells", "selected", "kernel_id", "kernel_name",
                            "resources", "retries", "send", "bring_back", "inputs", "backend"})
MAX_CELLS = 5000
#: a job whose runner is gone is given this long to have written its final status
LOST_GRACE_SECONDS = 2.0
#: ended jobs whose log tail is kept in memory (a job list holds at most 500)
MAX_CACHED_TAILS = 1000


class JobError(Exception):
    """A request the service refuses; `status` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclasses.dataclass
class Defaults:
    resources: Resources = dataclasses.field(default_factory=Resources)
    retries: int = 0
    retry_backoff_seconds: float = 2.0
    max_send_bytes: int = 100 << 20
    backend: str = "local"


class JobService:
    def __init__(
        self,
        store: JobStore,
        jobs_dir: Path,
        backends: Mapping[str, Backend],
        root_dir: Path,
        kernel_manager: Any = None,
        kernel_spec_names: Callable[[], set[str]] = lambda: {"python3"},
        job_spend: Callable[[str], float] = lambda kernel_id: 0.0,
        currency: Callable[[], str] = lambda: "USD",
        budget_refuses: Callable[[str], str | None] = lambda path: None,
        gpu_picker: Callable[[int], list[str] | None] = lambda n: None,
        defaults: Defaults | None = None,
        pushgateway_url: str | None = None,
        local_capacity: Callable[[], int] = lambda: 1,
        cluster_rates: Mapping[str, Mapping[str, float]] | None = None,
        gpu_usage: Callable[[str], tuple[float, float, float] | None] = lambda kid: None,
        poll_interval: float = 0.5,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.jobs_dir = jobs_dir
        self.backends = dict(backends)
        self.root = root_dir.resolve()
        self.kernel_manager = kernel_manager
        self.kernel_spec_names = kernel_spec_names
        self.job_spend = job_spend
        self.currency = currency
        self.budget_refuses = budget_refuses
        self.gpu_picker = gpu_picker
        self.defaults = defaults or Defaults()
        self.pushgateway_url = pushgateway_url or None
        #: how many local jobs may run at once (more wait, queued, first come first served)
        self.local_capacity = local_capacity
        #: backend -> {"gpu_per_hour", "cpu_per_hour", "memory_gib_per_hour"}: what a job's
        #: allocation costs where the server cannot sample it (a cluster)
        self.cluster_rates = {k: dict(v) for k, v in (cluster_rates or {}).items()}
        #: kernel id -> (sample time, interval, mean utilisation % of the GPUs it holds) in the
        #: latest sample, or None when it holds none
        self.gpu_usage = gpu_usage
        #: job -> [last sample time counted, utilisation x seconds, seconds]
        self._gpu_seen: dict[int, list[float]] = {}
        #: job -> its log's last lines, once it has ended (docs are built on the worker)
        self._final_tails: dict[int, str] = {}
        self.poll_interval = poll_interval
        self.clock = clock
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="costguard-jobs")
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        #: active jobs as last read (for the sampler's pseudo-kernels and auto-stop)
        self._active: dict[int, Job] = {}
        self._cancel_at: dict[int, float] = {}
        self._lost_at: dict[int, float] = {}
        self.listeners: list[Callable[[Job], None]] = []
        self._metrics: list[Metric] = []
        self._metrics_dirty = True
        self._seen_state: dict[int, str] = {}
        self.jobs_dir.mkdir(parents=True, exist_ok=True)

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def job_dir(self, job_id: int) -> Path:
        return self.jobs_dir / str(job_id)

    # --- reading -------------------------------------------------------------------------

    async def list_jobs(self, notebook: str | None = None) -> list[Job]:
        def work() -> list[Job]:
            self.follow()  # what a client reads is as fresh as the runners' files
            return self.store.list_jobs(notebook)

        return await self._run(work)

    async def get(self, job_id: int) -> Job:
        def work() -> Job | None:
            if job_id in self._active:
                self.follow(only=job_id)
            return self.store.get(job_id)

        job = await self._run(work)
        if job is None:
            raise JobError(f"no job {job_id}", 404)
        return job

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
            "label": label(job, now, self.currency()),
            "log_tail": self._log_tail(job),
            "timeline": [p.to_json(now) for p in job.timeline()],
            "backend_detail": self._backend_detail(job, detail),
            "gpu_utilization_percent": self._gpu_mean(job),
        }
        if detail:
            doc["slice"] = dict(job.slice_doc)
            doc["spec"] = spec.to_json()
            doc["record"] = dict(job.record)
        return doc

    def _gpu_mean(self, job: Job) -> float | None:
        """Time-weighted mean utilisation of the GPUs the job's kernel held (local jobs)."""
        seen = self._gpu_seen.get(job.id)
        if seen is not None and seen[2] > 0:
            return round(seen[1] / seen[2], 2)
        gpu = job.record.get("gpu")
        return gpu.get("mean_utilization_percent") if isinstance(gpu, dict) else None

    def _backend_detail(self, job: Job, detail: bool) -> dict[str, Any] | None:
        """What a cluster says about a job that has not ended (why it waits, where it runs):
        in the job's own document, and in lists while it waits."""
        describe = getattr(self.backends.get(job.spec.backend), "describe", None)
        if describe is None or job.terminal or not (detail or job.phase in ("queued",
                                                                            "starting")):
            return None
        try:
            found = describe(job, self.job_dir(job.id))
        except Exception as e:  # a cluster that does not answer must not break the API
            log.debug("costguard: job %d: describe failed: %s", job.id, e)
            return None
        return dict(found) if found else None

    async def delete_metrics(self, job_id: int) -> bool:
        """Delete the job's group from the Pushgateway."""
        await self.get(job_id)
        url = self.pushgateway_url
        if not url:
            raise JobError("no Pushgateway is configured (c.CostGuard.pushgateway_url)", 409)
        return await self._run(lambda: delete_job_metrics(url, job_id))

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
        path = self.job_dir(job_id) / "log.txt"
        try:
            with open(path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - max_bytes))
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    async def docs(self, jobs: list[Job], detail: bool = False) -> list[dict[str, Any]]:
        return await self._run(lambda: [self.doc(j, detail) for j in jobs])

    async def log(self, job_id: int, offset: int, limit: int) -> dict[str, Any]:
        job = await self.get(job_id)

        def read() -> dict[str, Any]:
            path = self.job_dir(job_id) / "log.txt"
            try:
                with open(path, "rb") as f:
                    size = os.fstat(f.fileno()).st_size
                    f.seek(min(offset, size))
                    data = f.read(limit)
            except FileNotFoundError:
                size, data = 0, b""
            # never split a UTF-8 character: hold back an incomplete tail
            text = data.decode("utf-8", "ignore") if len(data) < limit else \
                _complete_utf8(data)
            end = min(offset, size) + len(text.encode("utf-8"))
            return {"offset": min(offset, size), "next_offset": end, "size": size,
                    "text": text, "complete": job.terminal and end >= size}

        return await self._run(read)

    async def results(self, job_id: int) -> dict[str, Any]:
        job = await self.get(job_id)

        def read() -> dict[str, Any]:
            d = self.job_dir(job_id)
            outputs = read_json(d / "outputs.json") or []
            index = read_json(d / "results.json") or {}
            has = (d / "results.pkl").exists() and bool(index.get("results"))
            return {
                "job": job.id, "state": job.state, "label": label(job, self.clock(),
                                                                  self.currency()),
                "cells": outputs, "results": index.get("results", []),
                "skipped": index.get("skipped", {}),
                "results_path": str(d / "results.pkl") if has else None,
                "load_code": load_code(job.id, str(d / "results.pkl")) if has else None,
            }

        return await self._run(read)

    def running_kernels(self) -> list[KernelInfo]:
        """Each running job's kernel, as the sampler sees kernels: its spend goes to the
        ledger under ``job-<id>`` and the job's notebook."""
        now = self.clock()
        return [KernelInfo(kernel_id=f"job-{j.id}", name=j.spec.kernel_name,
                           pid=j.kernel_pid, execution_state="busy", last_activity=now,
                           connections=0, path=j.spec.notebook)
                for j in list(self._active.values())
                if j.kernel_pid is not None and self._local(j.spec.backend)]

    def running_count(self) -> int:
        """Jobs running or waiting to: work in progress, for auto-stop."""
        return sum(1 for j in list(self._active.values()) if not j.terminal)

    # --- submitting ----------------------------------------------------------------------

    def _notebook_file(self, path: Any) -> Path:
        if not isinstance(path, str) or not path.strip():
            raise JobError("notebook must be the notebook's path relative to the server root")
        full = (self.root / path.lstrip("/")).resolve()
        if not full.is_relative_to(self.root):
            raise JobError("notebook path is outside the server's root directory")
        if not full.is_file():
            raise JobError(f"notebook not found: {path}", 404)
        return full

    def _cells(self, body: Mapping[str, Any], file: Path) -> list[Any]:
        cells = body.get("cells")
        if cells is None:  # not sent: the saved notebook
            try:
                cells = json.loads(file.read_text()).get("cells", [])
            except (OSError, ValueError, AttributeError) as e:
                raise JobError(f"cannot read the notebook {body['notebook']}: {e}") from None
        if not isinstance(cells, list) or not all(isinstance(c, dict) for c in cells):
            raise JobError("cells must be a list of notebook cells")
        if len(cells) > MAX_CELLS:
            raise JobError(f"a notebook of more than {MAX_CELLS} cells")
        return cells

    def _slice(self, body: Mapping[str, Any], file: Path) -> tuple[list[Any], Slice]:
        cells = self._cells(body, file)
        selected = body.get("selected")
        if not isinstance(selected, list) or not all(isinstance(s, str) for s in selected):
            raise JobError("selected must be a list of cell ids")
        given = parse_names(body.get("send"), "send")
        try:
            return cells, slice_cells(cells, selected, given=given)
        except SliceError as e:
            raise JobError(str(e)) from None

    def _check_request(self, body: Any) -> None:
        if not isinstance(body, dict):
            raise JobError("the request body must be a JSON object")
        unknown = sorted(set(body) - REQUEST_FIELDS)
        if unknown:
            raise JobError(f"unknown field(s): {', '.join(unknown)}")

    async def preview(self, body: Any) -> dict[str, Any]:
        self._check_request(body)

        def work() -> dict[str, Any]:
            file = self._notebook_file(body.get("notebook"))
            _, sl = self._slice(body, file)
            return sl.to_json()

        return await self._run(work)

    def _kernel_name(self, body: Mapping[str, Any], cells_doc: Path) -> str:
        name = body.get("kernel_name")
        if name is None and isinstance(body.get("kernel_id"), str) and self.kernel_manager:
            try:
                name = self.kernel_manager.get_kernel(body["kernel_id"]).kernel_name
            except KeyError:
                name = None
        if name is None:
            try:
                meta = json.loads(cells_doc.read_text()).get("metadata", {})
                name = meta.get("kernelspec", {}).get("name")
            except (OSError, ValueError, AttributeError):
                name = None
        name = name or "python3"
        if not isinstance(name, str) or name not in self.kernel_spec_names():
            raise JobError(f"unknown kernel {name!r}; known: "
                           f"{', '.join(sorted(self.kernel_spec_names()))}")
        return name

    async def submit(self, body: Any, user: str | None = None) -> tuple[Job, Slice]:
        self._check_request(body)
        try:
            resources = Resources.parse(body.get("resources"))
            if body.get("resources") is None:
                resources = self.defaults.resources
            retries = parse_retries(body.get("retries", self.defaults.retries))
            send = parse_names(body.get("send"), "send")
            bring_back = parse_names(body.get("bring_back"), "bring_back", 200) \
                if body.get("bring_back") is not None else None
            inputs = body.get("inputs") or []
            if not isinstance(inputs, list) or not all(isinstance(i, str) for i in inputs) \
                    or len(inputs) > 100:
                raise SpecError("inputs must be a list of at most 100 file paths")
        except SpecError as e:
            raise JobError(str(e)) from None
        backend = body.get("backend") or self.defaults.backend
        if backend not in self.backends:
            raise JobError(f"unknown backend {backend!r}; configured: "
                           f"{', '.join(sorted(self.backends))}")
        kernel_id = body.get("kernel_id")
        if kernel_id is not None and not isinstance(kernel_id, str):
            raise JobError("kernel_id must be a string")
        if send and kernel_id is None:
            raise JobError("send needs kernel_id: the kernel the variables live in")

        if resources.gpus is not None and self._local(backend):
            self.gpu_picker(resources.gpus)  # JobError when the machine has fewer
        file = await self._run(self._notebook_file, body.get("notebook"))
        notebook = str(file.relative_to(self.root))
        refusal = self.budget_refuses(notebook)
        if refusal:
            raise JobError(refusal, 409)
        cells, sl = await self._run(self._slice, body, file)
        kernel_name = await self._run(self._kernel_name, body, file)
        staging = self.jobs_dir / f"staging-{uuid.uuid4().hex}"
        await self._run(lambda: staging.mkdir(parents=True))
        try:
            if send:
                assert kernel_id is not None
                try:
                    await send_variables(self.kernel_manager, kernel_id, list(send),
                                         str(staging / "inputs.pkl"),
                                         self.defaults.max_send_bytes)
                except SendError as e:
                    raise JobError(str(e), e.status) from None
            cwd = file.parent
            spec = JobSpec(
                notebook=notebook, cwd=str(cwd), kernel_name=kernel_name,
                cells=tuple(SpecCell(c.cell_id, c.index, c.selected, c.code, c.source,
                                     c.provides, c.reason) for c in sl.cells),
                resources=resources, retries=retries,
                retry_backoff_seconds=self.defaults.retry_backoff_seconds, backend=backend,
                send=send, bring_back=bring_back if bring_back is not None else sl.defines,
                inputs=tuple(inputs),
            )
            job = await self._run(self._create, spec, sl, cells, staging, user)
        except BaseException:
            await self._run(shutil.rmtree, staging, True)
            raise
        self._active[job.id] = job
        self._metrics_dirty = True
        self._wake.set()
        log.info("costguard: job %d submitted from %s: %d cell(s), %d selected", job.id,
                 notebook, len(spec.cells), len(spec.selected))
        return job, sl

    def _create(self, spec: JobSpec, sl: Slice, cells: list[Any], staging: Path,
                user: str | None) -> Job:
        record = make_record(self.root, self.root / spec.notebook, Path(spec.cwd), spec.code,
                             cells, spec.inputs, user)
        job = self.store.create(spec, self.clock(), sl.to_json(), record)
        d = self.job_dir(job.id)
        if d.exists():  # left by an earlier store that was deleted
            shutil.rmtree(d)
        os.replace(staging, d)
        return self._launch_or_wait(job)

    def _launched(self, job: Job) -> bool:
        """A job is handed to its backend once `_launch` wrote its runner's input."""
        return (self.job_dir(job.id) / "spec.json").exists()

    def _local_running(self) -> int:
        return sum(1 for j in list(self._active.values())
                   if self._local(j.spec.backend) and not j.terminal and self._launched(j))

    def _launch_or_wait(self, job: Job) -> Job:
        if not self._local(job.spec.backend):
            return self._launch(job)
        waiting = [j for j in self.store.list_jobs(active_only=True)
                   if j.id != job.id and self._local(j.spec.backend) and not self._launched(j)]
        if waiting or self._local_running() >= max(1, self.local_capacity()):
            log.info("costguard: job %d waits for a local slot (%d running, %d before it)",
                     job.id, self._local_running(), len(waiting))
            return job  # the follower starts it when a slot frees (`_start_waiting`)
        return self._launch(job)

    def _start_waiting(self) -> None:
        """Start queued local jobs, oldest first, while there is room."""
        waiting = sorted((j for j in self._active.values()
                          if self._local(j.spec.backend) and j.state == "queued"
                          and j.id not in self._cancel_at and not self._launched(j)),
                         key=lambda j: j.id)
        for job in waiting:
            if self._local_running() >= max(1, self.local_capacity()):
                return
            self._active[job.id] = self._launch(job)
            self._metrics_dirty = True

    def _launch(self, job: Job) -> Job:
        d = self.job_dir(job.id)
        environment: dict[str, str] = {}
        if self.pushgateway_url:
            environment[PUSH_ENV] = self.pushgateway_url
        gpus = job.spec.resources.gpus
        if gpus is not None and self._local(job.spec.backend):  # a cluster picks its own
            try:
                picked = self.gpu_picker(gpus)
            except JobError:
                picked = None  # fewer GPUs than at submit: let the job see what there is
            if picked is not None:
                environment["CUDA_VISIBLE_DEVICES"] = ",".join(picked)
        checkpoint_dir = job.spec.checkpoint_location or str(d / "checkpoints")
        write_json(d / "spec.json", {"id": job.id, "spec": job.spec.to_json(),
                                     "checkpoint_dir": checkpoint_dir,
                                     "environment": environment})
        try:
            ref = self.backends[job.spec.backend].launch(job, d, environment)
        except Exception as e:  # the job must not sit queued for ever
            log.exception("costguard: job %d: the %s backend could not start it", job.id,
                          job.spec.backend)
            job = self._ended(job, "failed", f"could not start on {job.spec.backend}: "
                              f"{type(e).__name__}: {e}", self.clock())
            job = dataclasses.replace(job, ended=self.clock())
        else:
            job = dataclasses.replace(job, backend_ref=ref)
        self.store.save(job)
        return job

    def allocation_spend(self, job: Job, phase_times: Mapping[str, float], now: float) -> float:
        """A cluster job's spend: the time its allocation was held (from its runner's start
        to its end) at the configured rates of what it asked for (`cluster_rates`)."""
        rates = self.cluster_rates.get(job.spec.backend)
        start = phase_times.get("starting")
        if not rates or start is None:
            return 0.0
        end = phase_times.get("done", now)
        r = job.spec.resources
        per_hour = (rates.get("gpu_per_hour", 0.0) * (r.gpus or 0)
                    + rates.get("cpu_per_hour", 0.0) * (r.cpus or 1.0)
                    + rates.get("memory_gib_per_hour", 0.0) * (r.memory_gib or 0.0))
        return max(0.0, end - start) * per_hour / 3600.0

    def _local(self, backend: str) -> bool:
        """Jobs of this backend run on this machine: the server picks their GPUs and
        samples their kernels."""
        return isinstance(self.backends.get(backend), LocalBackend)

    # --- acting ----------------------------------------------------------------------------

    async def cancel(self, job_id: int) -> Job:
        job = await self.get(job_id)
        if job.terminal:
            raise JobError(f"job {job_id} has already ended ({job.state})", 409)
        if await self._run(self._launched, job):
            await self._run(self.backends[job.spec.backend].cancel, job, self.job_dir(job_id))
        self._cancel_at.setdefault(job_id, self.clock())
        self._active.setdefault(job_id, job)
        self._wake.set()
        log.info("costguard: job %d: cancel requested", job_id)
        return job

    async def rerun(self, job_id: int, user: str | None = None) -> Job:
        old = await self.get(job_id)

        def work() -> Job:
            staging = self.jobs_dir / f"staging-{uuid.uuid4().hex}"
            staging.mkdir(parents=True)
            inputs = self.job_dir(job_id) / "inputs.pkl"
            if inputs.exists():
                shutil.copyfile(inputs, staging / "inputs.pkl")
            record = dict(old.record)
            record["rerun_of"] = old.id
            record["submitted_by"] = user
            job = self.store.create(old.spec, self.clock(), dict(old.slice_doc), record)
            os.replace(staging, self.job_dir(job.id))
            return self._launch_or_wait(job)

        job = await self._run(work)
        self._active[job.id] = job
        self._metrics_dirty = True
        self._wake.set()
        return job

    # --- following -------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._follow_forever())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        for backend in self.backends.values():
            stop_warm = getattr(backend, "stop_warm", None)
            if stop_warm is not None:
                await self._run(stop_warm)
        self._executor.shutdown(wait=True)

    async def _follow_forever(self) -> None:
        await self._run(self._load_active)
        for backend in self.backends.values():
            fill = getattr(backend, "fill_warm", None)
            if fill is not None:
                try:
                    await self._run(fill)
                except Exception:
                    log.exception("costguard: could not start a warm kernel for jobs")
        while True:
            try:
                await self._run(self.follow)
            except Exception:
                log.exception("costguard: following jobs failed")
            wait = self.poll_interval if self._active else 5.0
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), wait)
            except asyncio.TimeoutError:
                pass

    def _load_active(self) -> None:
        for job in self.store.list_jobs(active_only=True):
            self._active[job.id] = job
        if self._active:
            log.info("costguard: following %d job(s) left active by an earlier run: %s",
                     len(self._active), ", ".join(map(str, sorted(self._active))))

    def metrics(self) -> list[Metric]:
        """Built on the worker after each pass; a scrape only hands them over."""
        return self._metrics

    def _build_metrics(self) -> None:
        jobs = GaugeMetricFamily("costguard_jobs", "Batch jobs by state and backend.",
                                 labels=["state", "backend"])
        counts = self.store.counts()
        for backend in sorted({b for _, b in counts} | set(self.backends)):
            for state in STATES:
                jobs.add_metric([state, backend], counts.get((state, backend), 0))
        self._metrics = [jobs]

    def follow(self, only: int | None = None) -> None:
        """One pass over the active jobs (or just `only`); worker thread. Runs every
        `poll_interval` and before a request reads jobs, so the API is never staler than
        the runners' own files."""
        self._follow_active([only] if only is not None else list(self._active))
        if only is None:
            self._start_waiting()
        if self._metrics_dirty or not self._metrics:
            self._metrics_dirty = False
            self._build_metrics()

    def _follow_active(self, ids: list[int]) -> None:
        for job_id in ids:
            job = self.store.get(job_id)
            if job is None:
                del self._active[job_id]
                continue
            job = self._follow_one(job)
            if job.terminal or job.state != self._seen_state.get(job_id):
                self._metrics_dirty = True
                self._seen_state[job_id] = job.state
            if job.terminal:
                self._seen_state.pop(job_id, None)
                self._active.pop(job_id, None)
                self._cancel_at.pop(job_id, None)
                self._lost_at.pop(job_id, None)
                for listener in self.listeners:
                    listener(job)
            else:
                self._active[job_id] = job

    def _follow_one(self, job: Job) -> Job:
        d = self.job_dir(job.id)
        now = self.clock()
        if not job.terminal and not self._launched(job):  # waiting for a local slot
            if job.id not in self._cancel_at:
                return job
            new = self._ended(job, "cancelled", "cancelled by the user before it started", now)
            new = dataclasses.replace(new, ended=now)
            self.store.save(new)
            log.info("costguard: job %d cancelled while it waited", job.id)
            return new
        # a backend whose runner cannot write here (Kubernetes) brings its files up to date
        sync = getattr(self.backends.get(job.spec.backend), "sync", None)
        if sync is not None:
            sync(job, d)
        status = read_json(d / "status.json") or {}
        spend = self.job_spend(f"job-{job.id}") if self._local(job.spec.backend) \
            else self.allocation_spend(job, status.get("phase_times") or {}, now)
        new = job
        phase_times = dict(job.phase_times)
        phase_spend = dict(job.phase_spend)
        for phase, when in (status.get("phase_times") or {}).items():
            if phase not in phase_times:
                phase_times[phase] = when
                phase_spend[phase] = spend
        state = status.get("state", job.state)
        if state not in ("running", "succeeded", "failed", "cancelled"):
            state = job.state
        new = dataclasses.replace(
            job, state=state, phase=status.get("phase", job.phase),
            attempts=int(status.get("attempt", job.attempts)),
            exit_reason=status.get("exit_reason", job.exit_reason),
            kernel_pid=status.get("kernel_pid"), runner_pid=status.get("runner_pid"),
            spend=max(job.spend, spend),
            phase_times=phase_times, phase_spend=phase_spend)
        if not new.terminal:
            new = self._check_alive(new, d, now)
        if self._local(job.spec.backend) and new.kernel_pid is not None:
            self._count_gpu(job.id)
        if new.terminal and new.ended is None:
            env = read_json(d / "env.json")
            record = dict(new.record)
            if env is not None:
                record["environment"] = env
            record["attempts"] = status.get("attempts", [])
            seen = self._gpu_seen.pop(job.id, None)
            if seen is not None and seen[2] > 0:
                record["gpu"] = {"mean_utilization_percent": round(seen[1] / seen[2], 2),
                                 "sampled_seconds": round(seen[2], 3)}
            new = dataclasses.replace(new, ended=phase_times.get("done", now), record=record,
                                      kernel_pid=None)
            log.info("costguard: job %d %s%s", new.id, new.state,
                     f": {new.exit_reason}" if new.exit_reason else "")
        if new != job:
            self.store.save(new)
        return new

    def _count_gpu(self, job_id: int) -> None:
        """Fold the latest sample's GPU utilisation of the job's kernel into its mean."""
        usage = self.gpu_usage(f"job-{job_id}")
        if usage is None:
            return
        when, interval, percent = usage
        seen = self._gpu_seen.setdefault(job_id, [0.0, 0.0, 0.0])
        if when > seen[0]:
            seen[0] = when
            seen[1] += percent * interval
            seen[2] += interval

    def _check_alive(self, job: Job, d: Path, now: float) -> Job:
        backend = self.backends[job.spec.backend]
        cancel_at = self._cancel_at.get(job.id)
        if cancel_at is not None and now - cancel_at > CANCEL_GRACE_SECONDS:
            backend.cancel(job, d, force=True)
            return self._ended(job, "cancelled", "cancelled by the user (killed after "
                               f"{CANCEL_GRACE_SECONDS:g} s)", now)
        limit = job.spec.resources.time_limit_seconds
        started = job.phase_times.get("starting")
        if limit is not None and started is not None and now > started + limit + 30:
            backend.cancel(job, d, force=True)
            return self._ended(job, "failed", f"time limit of {limit:g} s exceeded "
                               "(the runner did not stop by itself)", now)
        if backend.alive(job, d):
            self._lost_at.pop(job.id, None)
            return job
        first = self._lost_at.setdefault(job.id, now)
        if now - first < LOST_GRACE_SECONDS:
            return job  # its last status write may be on its way
        del self._lost_at[job.id]
        if cancel_at is not None:
            return self._ended(job, "cancelled", "cancelled by the user", now)
        if job.attempts < job.spec.retries + 1 and job.attempts > 0:
            log.warning("costguard: job %d: its runner vanished during attempt %d; starting "
                        "another", job.id, job.attempts)
            return self._launch(job)
        return self._ended(job, "lost", "the job's runner vanished without a result", now)

    def _ended(self, job: Job, state: str, reason: str, now: float) -> Job:
        phase_times = dict(job.phase_times)
        phase_times.setdefault("done", now)
        return dataclasses.replace(job, state=state, phase="done", exit_reason=reason,
                                   phase_times=phase_times)

    def close(self) -> None:
        self.store.close()


def kernel_gpu_usage(sample: Sample | None, kernel_id: str) -> tuple[float, float, float] | None:
    """(sample time, interval, mean utilisation %) of the GPUs `kernel_id` holds in `sample`;
    None when it holds none whose utilisation is known."""
    if sample is None:
        return None
    kernel = next((k for k in sample.kernels if k.info.kernel_id == kernel_id), None)
    if kernel is None:
        return None
    utils = [g.utilization_percent for g in sample.gpu.gpus
             if g.uuid in kernel.gpu_memory_bytes and g.utilization_percent is not None]
    if not utils:
        return None
    return sample.time, sample.interval, sum(utils) / len(utils)


def pick_gpus(sample: Sample | None, n: int) -> list[str] | None:
    """The `n` least-used GPUs of the last sample, by UUID (CUDA_VISIBLE_DEVICES takes
    UUIDs, which do not depend on the server's own device numbering). None when the server
    sees no GPUs (nothing to select); JobError when it sees fewer than `n`."""
    if sample is None or not sample.gpu.gpus:
        if n == 0:
            return []
        return None
    gpus = [g for g in sample.gpu.gpus if g.faulty is None]
    if n > len(gpus):
        raise JobError(f"the job asks for {n} GPU(s); this machine has {len(gpus)} usable")
    gpus.sort(key=lambda g: (g.memory_used_bytes, g.utilization_percent or 0.0, g.index))
    return [g.uuid for g in gpus[:n]]


def _complete_utf8(data: bytes) -> str:
    """Decode, leaving out a multi-byte character cut at the end."""
    for cut in range(0, 4):
        try:
            return data[:len(data) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return data.decode("utf-8", "replace")
