"""The job service: submit, follow, cancel, read back. Handlers are thin over it.

Store writes, file reads and process launches run on one worker thread, never on the IO
loop. A follower task (`follower`) reads each active job's status (every `poll_interval`
while a job is active), updates the store, accounts spend (`accounting`), relaunches a runner
that vanished while attempts remain, and marks the job ``lost`` when none do; local jobs wait
for a free slot (`launcher`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from prometheus_client.core import GaugeMetricFamily, Metric

from jupyter_costguard.common.owner import Owner, owner_doc
from jupyter_costguard.common.stopping import on_worker
from jupyter_costguard.cost.allocation import job_cpus
from jupyter_costguard.metrics.pushgateway import delete_job_metrics
from jupyter_costguard.offload import jobdir
from jupyter_costguard.offload.accounting import Accounting
from jupyter_costguard.offload.backends.base import Backend
from jupyter_costguard.offload.documents import JobDocuments
from jupyter_costguard.offload.errors import JobError
from jupyter_costguard.offload.estimate import Estimate, EstimateContext, LocalPrice
from jupyter_costguard.offload.follower import Follower
from jupyter_costguard.offload.launcher import Launcher
from jupyter_costguard.offload.record import make_record
from jupyter_costguard.offload.requests import (
    asked_bring_back,
    check_request,
    choose_bring_back,
    estimate_request,
    job_spec,
    kernel_name,
    notebook_file,
    parse_options,
    slice_request,
)
from jupyter_costguard.offload.settings import JobSettings, ServerHooks
from jupyter_costguard.offload.slicing import Slice
from jupyter_costguard.offload.spec import STATES, Job, JobSpec, Resources
from jupyter_costguard.offload.store import PAGE_DEFAULT, JobStore
from jupyter_costguard.offload.variables import SendError, send_variables
from jupyter_costguard.sampling.records import KernelInfo

log = logging.getLogger("jupyter_costguard")
T = TypeVar("T")
#: how long the estimate a submit keeps may take (the dialog's ask is usually still kept)
SUBMIT_ESTIMATE_SECONDS = 5.0
#: what a job's record keeps of its estimate
KEPT_ESTIMATE = ("priced", "hourly_price", "max_cost", "currency", "source", "detail")

#: how long a backend's estimate may take (SkyPilot's optimizer: seconds; its API server may
#: be starting)
ESTIMATE_TIMEOUT_SECONDS = 60.0


def server_log(hooks: ServerHooks) -> Any:
    """Where job submits and ends are logged: the hooks' log, else the Jupyter server's own
    (its kernel manager logs there, as the server does), else the package logger. Under a
    server the package logger has no handler, so its INFO lines would reach no one."""
    if hooks.log is not None:
        return hooks.log
    server = getattr(hooks.kernel_manager, "log", None)
    return server if isinstance(server, (logging.Logger, logging.LoggerAdapter)) else log


def resources_text(spec: JobSpec) -> str:
    """"gpus 1, cpus 4, memory 16 GiB, no time limit": what a job asked for, for the log."""
    r = spec.resources
    parts = [f"{name} {value:g}{unit}" for name, value, unit in (
        ("gpus", r.gpus, ""), ("cpus", r.cpus, ""), ("memory", r.memory_gib, " GiB"))
        if value is not None]
    parts.append(f"time limit {r.time_limit_seconds:g} s" if r.time_limit_seconds is not None
                 else "no time limit")
    return ", ".join(parts)


class JobService:
    def __init__(self, store: JobStore, jobs_dir: Path, backends: Mapping[str, Backend],
                 root_dir: Path, settings: JobSettings | None = None,
                 hooks: ServerHooks | None = None, owner: Owner | None = None) -> None:
        self.store = store
        #: whose server this is (JupyterHub): every job record says so
        self.owner = owner
        self.jobs_dir = jobs_dir
        self.backends = dict(backends)
        self.root = root_dir.resolve()
        self.settings = settings or JobSettings()
        self.hooks = hooks = hooks or ServerHooks()
        self.clock = hooks.clock
        #: the server's log (`server_log`): each job's submit and end
        self.logger = server_log(hooks)
        #: called with each job that ends (worker thread); the first logs the end
        self.listeners: list[Callable[[Job], None]] = [self._log_end]
        self.accounting = Accounting(self.settings.cluster_rates, hooks.job_spend,
                                     hooks.gpu_usage, hooks.machine_price)
        self.launcher = Launcher(store, self.backends, self.job_dir,
                                 self.settings.pushgateway_url, hooks.gpu_picker,
                                 hooks.local_capacity, self.clock)
        self.follower = Follower(store, self.backends, self.job_dir, self.launcher,
                                 self.accounting, self.listeners, self.clock)
        self.documents = JobDocuments(self.backends, self.job_dir, self.accounting,
                                      hooks.currency, self.clock)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="costguard-jobs")
        #: submit preparation (slicing, the inputs manifest): bounded work, but long enough
        #: that store reads on the job worker must not wait behind it
        self._prepare = ThreadPoolExecutor(max_workers=2,
                                           thread_name_prefix="costguard-prepare")
        #: estimates: a backend may ask its service (SkyPilot's optimizer takes seconds),
        #: which neither the job worker nor a submit's preparation waits behind
        self._estimates = ThreadPoolExecutor(max_workers=2,
                                             thread_name_prefix="costguard-estimate")
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self._wake = asyncio.Event()
        self._metrics: list[Metric] = []
        self._metrics_dirty = True
        jobdir.private_dir(self.jobs_dir)

    async def _on_worker(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on the one job worker thread, where the store and backends are used."""
        return await on_worker(self._executor, fn, *args)

    async def _prep(self, fn: Callable[..., T], *args: Any) -> T:
        """Reads of the notebook and its inputs, no store: off the job worker."""
        return await on_worker(self._prepare, fn, *args)

    def job_dir(self, job_id: int) -> Path:
        return self.jobs_dir / str(job_id)

    def currency(self) -> str:
        return self.hooks.currency()

    def _wake_follower(self, job: Job) -> None:
        """A job was created or changed here: follow it, and count it in the metrics."""
        self.follower.active[job.id] = job
        self._metrics_dirty = True
        self._wake.set()

    # --- reading -------------------------------------------------------------------------

    async def list_jobs(self, notebook: str | None = None) -> list[Job]:
        def work() -> list[Job]:
            self.follow()  # what a client reads is as fresh as the runners' files
            return self.store.list_jobs(notebook)

        return await self._on_worker(work)

    async def list_page(self, notebook: str | None = None, limit: int = PAGE_DEFAULT,
                        before: int | None = None) -> tuple[list[Job], int | None]:
        """A page of the list, from the store's summaries; a job still active is shown
        from its full row (there are few), as backends describe it from that."""
        def work() -> tuple[list[Job], int | None]:
            self.follow()
            jobs, next_before = self.store.list_page(notebook, limit, before)
            full = [self.store.get(j.id) if not j.terminal else j for j in jobs]
            return [f if f is not None else j for f, j in zip(full, jobs)], next_before

        return await self._on_worker(work)

    async def get(self, job_id: int) -> Job:
        def work() -> Job | None:
            if job_id in self.follower.active:
                self.follow(only=job_id)
            return self.store.get(job_id)

        job = await self._on_worker(work)
        if job is None:
            raise JobError(f"no job {job_id}", 404)
        return job

    async def docs(self, jobs: list[Job], detail: bool = False) -> list[dict[str, Any]]:
        return await self._on_worker(lambda: [self.documents.doc(j, detail) for j in jobs])

    async def log(self, job_id: int, offset: int, limit: int) -> dict[str, Any]:
        job = await self.get(job_id)
        return await self._on_worker(self.documents.log, job, offset, limit)

    async def results(self, job_id: int, names: list[str] | None = None) -> dict[str, Any]:
        """`names`: what `load_code` loads (a subset of the results); None: all of them."""
        job = await self.get(job_id)
        return await self._on_worker(self.documents.results, job, names)

    async def delete_metrics(self, job_id: int) -> bool:
        """Delete the job's group from the Pushgateway."""
        await self.get(job_id)
        url = self.settings.pushgateway_url
        if not url:
            raise JobError("no Pushgateway is configured (c.Pushgateway.url)", 409)
        return await self._on_worker(lambda: delete_job_metrics(url, job_id))

    def running_kernels(self) -> list[KernelInfo]:
        """Each running job's kernel, as the sampler sees kernels: its spend goes to the
        ledger under ``job-<id>`` and the job's notebook."""
        now = self.clock()
        return [KernelInfo(kernel_id=f"job-{j.id}", name=j.spec.kernel_name,
                           pid=j.kernel_pid, execution_state="busy", last_activity=now,
                           connections=0, path=j.spec.notebook,
                           cpus_held=job_cpus(j.spec.resources.cpus))
                for j in list(self.follower.active.values())
                if j.kernel_pid is not None and self.launcher.local(j.spec.backend)]

    def running_count(self) -> int:
        """Jobs running or waiting to: work in progress, for auto-stop."""
        return sum(1 for j in list(self.follower.active.values()) if not j.terminal)

    # --- submitting ----------------------------------------------------------------------

    async def preview(self, body: Any) -> dict[str, Any]:
        """What a submit of `body` would run and bring back (as `submit` chooses it), so the
        confirm dialog names the names that really come back."""
        body = check_request(body)

        def work() -> dict[str, Any]:
            file = notebook_file(self.root, body.get("notebook"))
            asked = asked_bring_back(body)
            cells, sl = slice_request(body, file)
            chosen, why = choose_bring_back(asked, cells, body["selected"], sl)
            return {"slice": sl.to_json(), "bring_back": list(chosen), "bring_back_from": why}

        return await self._prep(work)

    async def estimate(self, body: Any, machine: LocalPrice | None = None,
                       timeout: float = ESTIMATE_TIMEOUT_SECONDS) -> dict[str, Any]:
        """What a job of `body` (`EstimateRequest`) would cost on its backend before it is
        submitted (`Backend.estimate`); `machine`: this machine's price, for the local
        backend. 504 when the backend does not answer within `timeout`."""
        name, resources = estimate_request(body, self.settings, self.backends)
        return (await self._estimate(name, resources, machine, timeout)).to_json()

    async def _estimate(self, name: str, resources: Resources, machine: LocalPrice | None,
                        timeout: float) -> Estimate:
        context = EstimateContext(self.settings.cluster_rates, self.currency(), machine)
        work = on_worker(self._estimates, self.backends[name].estimate, resources, context)
        try:
            return await asyncio.wait_for(work, timeout)
        except asyncio.TimeoutError:
            raise JobError(f"the {name} backend gave no estimate within {timeout:g} s", 504) \
                from None

    async def _kept_estimate(self, name: str, resources: Resources,
                             machine: LocalPrice | None) -> dict[str, Any]:
        """The estimate a job's record keeps beside its charge (what the dialog showed, or
        would have: the same computation); one that takes too long is kept as unpriced."""
        try:
            found = (await self._estimate(name, resources, machine,
                                          SUBMIT_ESTIMATE_SECONDS)).to_json()
        except JobError as e:
            return {"priced": False, "hourly_price": None, "max_cost": None,
                    "currency": self.currency(), "source": "none", "detail": str(e)}
        return {k: found[k] for k in KEPT_ESTIMATE}

    async def submit(self, body: Any, user: str | None = None,
                     machine: LocalPrice | None = None) -> tuple[Job, Slice]:
        body = check_request(body)
        options = parse_options(body, self.settings, self.backends)
        if options.resources.gpus is not None and self.launcher.local(options.backend):
            self.hooks.gpu_picker(options.resources.gpus)  # JobError when it has fewer
        file = await self._prep(notebook_file, self.root, body.get("notebook"))
        notebook = str(file.relative_to(self.root))
        refusal = self.hooks.budget_refuses(notebook)
        if refusal:
            raise JobError(refusal, 409)
        cells, sl = await self._prep(slice_request, body, file)
        # at submit, so the job pickles only these (results stay small); the preview asks the same
        chosen, why = await self._prep(choose_bring_back, options.bring_back, cells,
                                       body["selected"], sl)
        kernel = await self._prep(kernel_name, body, file, self.hooks.kernel_manager,
                                 self.hooks.kernel_spec_names)
        staging = self.jobs_dir / f"staging-{uuid.uuid4().hex}"
        await self._on_worker(jobdir.private_dir, staging)
        try:
            if options.send:
                assert options.kernel_id is not None
                try:
                    await send_variables(self.hooks.kernel_manager, options.kernel_id,
                                         list(options.send), str(staging / jobdir.INPUTS),
                                         self.settings.max_send_bytes)
                except SendError as e:
                    raise JobError(str(e), e.status) from None
            spec = job_spec(options, notebook, file.parent, kernel, sl, self.settings, chosen)
            # the inputs manifest hashes up to its limits: off the worker that reads jobs
            record = await self._prep(make_record, self.root, self.root / spec.notebook,
                                      Path(spec.cwd), spec.code, cells, spec.inputs, user)
            estimate = await self._kept_estimate(options.backend, options.resources, machine)
            record = {**record, "bring_back_from": why, "estimate": estimate}
            job = await self._on_worker(self._create, spec, sl, record, staging)
        except BaseException:
            await self._on_worker(shutil.rmtree, staging, True)
            raise
        self._wake_follower(job)
        self._log_submit(job, "submitted")
        return job, sl

    def _log_submit(self, job: Job, how: str) -> None:
        spec = job.spec
        self.logger.info(
            "costguard: job %d %s from %s: selected cell(s) %s (%d cell(s) with those they "
            "need), backend %s, %s, %d retr%s, brings back %s", job.id, how, spec.notebook,
            ", ".join(spec.selected), len(spec.cells), spec.backend, resources_text(spec),
            spec.retries, "y" if spec.retries == 1 else "ies",
            ", ".join(spec.bring_back) or "nothing")

    def _log_end(self, job: Job) -> None:
        """One line per job that ends: INFO, WARNING when it failed or was lost."""
        level = logging.WARNING if job.state in ("failed", "lost") else logging.INFO
        elapsed = job.elapsed(self.clock())  # the figure the job document shows
        self.logger.log(
            level, "costguard: job %d from %s %s after %.1f s, spend %.6f %s, %d of %d "
            "attempt(s)%s", job.id, job.spec.notebook, job.state, elapsed, job.spend,
            self.currency(), job.attempts, job.spec.retries + 1,
            f": {job.exit_reason}" if job.exit_reason else "")

    def _create(self, spec: JobSpec, sl: Slice, record: dict[str, Any],
                staging: Path) -> Job:
        inputs = staging / jobdir.INPUTS
        if spec.send and inputs.exists():  # the runner loads it only if it matches this
            os.chmod(inputs, jobdir.PRIVATE_FILE)
            record = {**record, "inputs_sha256": jobdir.sha256_file(inputs)}
        if self.owner is not None:  # whose job, under JupyterHub
            record = {**record, "owner": owner_doc(self.owner)}
        job = self.store.create(spec, self.clock(), sl.to_json(), record)
        d = self.job_dir(job.id)
        if d.exists():  # left by an earlier store that was deleted
            shutil.rmtree(d)
        os.replace(staging, d)
        return self.launcher.launch_or_wait(job, self.follower.active)

    # --- acting ----------------------------------------------------------------------------

    async def cancel(self, job_id: int) -> Job:
        job = await self.get(job_id)
        if job.terminal:
            raise JobError(f"job {job_id} has already ended ({job.state})", 409)
        if await self._on_worker(self.launcher.launched, job):
            await self._on_worker(self.backends[job.spec.backend].cancel, job, self.job_dir(job_id))
        self.follower.cancel_at.setdefault(job_id, self.clock())
        self.follower.active.setdefault(job_id, job)
        self._wake.set()
        log.info("costguard: job %d: cancel requested", job_id)
        return job

    async def rerun(self, job_id: int, user: str | None = None,
                    machine: LocalPrice | None = None) -> Job:
        old = await self.get(job_id)
        estimate = await self._kept_estimate(old.spec.backend, old.spec.resources, machine)

        def work() -> Job:
            staging = jobdir.private_dir(self.jobs_dir / f"staging-{uuid.uuid4().hex}")
            inputs = self.job_dir(job_id) / jobdir.INPUTS
            record = dict(old.record)
            record.pop("results_sha256", None)
            sent = record.pop("inputs_sha256", None)
            data = jobdir.read_regular(inputs, self.settings.max_send_bytes) \
                if old.spec.send else None
            if data is not None:  # only what the first job was sent; the runner checks the
                # copy against the first job's digest
                jobdir.write_bytes(staging / jobdir.INPUTS, data)
                record["inputs_sha256"] = sent
            record["rerun_of"] = old.id
            record["submitted_by"] = user
            record["estimate"] = estimate
            record.pop("owner", None)
            if self.owner is not None:
                record["owner"] = owner_doc(self.owner)
            job = self.store.create(old.spec, self.clock(), dict(old.slice_doc), record)
            os.replace(staging, self.job_dir(job.id))
            return self.launcher.launch_or_wait(job, self.follower.active)

        job = await self._on_worker(work)
        self._wake_follower(job)
        self._log_submit(job, f"submitted again (a rerun of job {job_id})")
        return job

    # --- following -------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._follow_forever())

    async def stop(self) -> None:
        """Stop following and shut the workers down; a second call does nothing (requests
        after the first answer 503: `on_worker`)."""
        if self._stopped:
            return
        self._stopped = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        for backend in self.backends.values():
            await self._on_worker(backend.close)
        self._executor.shutdown(wait=True)
        self._prepare.shutdown(wait=True)
        self._estimates.shutdown(wait=False, cancel_futures=True)

    async def _follow_forever(self) -> None:
        await self._on_worker(self._load_active)
        for name, backend in self.backends.items():
            try:
                await self._on_worker(backend.start)
            except Exception:
                log.exception("costguard: the %s backend could not start (e.g. a warm kernel "
                              "for jobs)", name)
        while True:
            try:
                await self._on_worker(self.follow)
            except Exception:
                log.exception("costguard: following jobs failed")
            wait = self.settings.poll_interval if self.follower.active else 5.0
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), wait)
            except asyncio.TimeoutError:
                pass

    def _load_active(self) -> None:
        active = self.follower.active
        for job in self.store.list_jobs(active_only=True):
            active[job.id] = job
        if active:
            log.info("costguard: following %d job(s) left active by an earlier run: %s",
                     len(active), ", ".join(map(str, sorted(active))))

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
        ids = [only] if only is not None else list(self.follower.active)
        if self.follower.follow(ids):
            self._metrics_dirty = True
        if only is None and self.launcher.start_waiting(self.follower.active,
                                                        self.follower.cancel_at):
            self._metrics_dirty = True
        if self._metrics_dirty or not self._metrics:
            self._metrics_dirty = False
            self._build_metrics()

    def close(self) -> None:
        self.store.close()
