"""REST handlers for jobs under {base_url}costguard/api/jobs: thin over `JobService`.

Permissions (the authorizer's, besides authentication): reading jobs, logs and results needs
`read` on `costguard`; a slice preview or an estimate (runs nothing) `write` on `costguard`.
A job runs code, so submit and rerun need `write` on `costguard` and `execute` on `kernels`;
`send` (the named kernel pickles variables into the job) asks for `execute` on `kernels` again,
for that kernel; cancel stops running code and needs the same as submit."""

from __future__ import annotations

import time
from typing import Any

from jupyter_server.auth.decorator import authorized
from tornado import web

from jupyter_costguard.cost.pricedoc import price_doc
from jupyter_costguard.cost.service import CostService
from jupyter_costguard.cost.spend import physical_gpus
from jupyter_costguard.offload.errors import JobError
from jupyter_costguard.offload.estimate import LocalPrice
from jupyter_costguard.offload.service import JobService
from jupyter_costguard.offload.store import PAGE_DEFAULT, PAGE_MAX
from jupyter_costguard.web.base import CostguardHandler

#: what running or stopping code in a job needs, beyond costguard's own permission
EXECUTE = ("execute", "kernels")

#: a submit carries the notebook's cells (sources; the UI leaves outputs out)
MAX_SUBMIT_BYTES = 16 << 20
MAX_LOG_CHUNK = 1 << 20


class JobsHandler(CostguardHandler):
    @property
    def jobs(self) -> JobService:
        svc: JobService | None = self.settings.get("costguard_jobs")
        if svc is None:
            raise web.HTTPError(503, "batch jobs are turned off (c.Offload.enabled)")
        return svc

    def _job_id(self, raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise web.HTTPError(400, "job id must be an integer, not %r", raw) from None
        if not 0 < value < 2**62:
            raise web.HTTPError(404, "no job %s", raw)
        return value

    async def _call(self, work: Any) -> Any:
        try:
            return await work
        except JobError as e:
            raise web.HTTPError(e.status, "%s", str(e)) from None

    def _body(self) -> Any:
        return self.read_json_body(limit=MAX_SUBMIT_BYTES, too_large=413)

    def _user(self) -> str | None:
        user = self.current_user
        return getattr(user, "username", None) or (str(user) if user else None)


class JobListHandler(JobsHandler):
    """GET: jobs, newest first (``?notebook=``); POST: submit the selected cells."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        self._check_params("notebook", "limit", "before")
        notebook = self.get_query_argument("notebook", None)
        limit = self._int_param("limit", PAGE_DEFAULT, 1, PAGE_MAX,
                                f"limit must be an integer from 1 to {PAGE_MAX}")
        before = self._int_param("before", None, 1, 2**62,
                                 "before must be a job id (a positive integer)")
        jobs, next_before = await self.jobs.list_page(
            notebook.strip("/") if notebook else None, limit or PAGE_DEFAULT, before)
        self.write_json({"jobs": await self.jobs.docs(jobs), "next_before": next_before,
                         "currency": self.jobs.currency(), "time": time.time()})

    def _int_param(self, name: str, default: int | None, low: int, high: int,
                   message: str) -> int | None:
        text = self.get_query_argument(name, None)
        if text is None:
            return default
        try:
            value = int(text)
        except ValueError:
            raise web.HTTPError(400, "%s, not %r", message, text[:40]) from None
        if not low <= value <= high:
            raise web.HTTPError(400, "%s, not %d", message, value)
        return value

    @web.authenticated
    @authorized
    async def post(self) -> None:
        self._check_params()
        await self.require(*EXECUTE)
        body = self._body()
        if isinstance(body, dict) and body.get("send"):
            # the named kernel runs the pickling: the caller must be allowed to execute in it
            # (jupyter_server's authorizer knows no per-kernel resource: `kernels` it is)
            await self.require(*EXECUTE)
        service: CostService | None = self.settings.get("costguard_service")
        job, sl = await self._call(self.jobs.submit(body, user=self._user(),
                                                    machine=local_price(service, time.time())))
        doc = (await self.jobs.docs([job]))[0]
        doc["slice"] = sl.to_json()
        self.set_header("Location", f"{self.request.path.rstrip('/')}/{job.id}")
        self.write_json(doc, 201)


class SlicePreviewHandler(JobsHandler):
    """POST jobs/slice: what a submit would run and bring back, and why, without running it."""

    @web.authenticated
    @authorized
    async def post(self) -> None:
        self._check_params()
        doc = await self._call(self.jobs.preview(self._body()))
        self.write_json({**doc, "max_send_bytes": self.jobs.settings.max_send_bytes})


def local_price(service: CostService | None, now: float) -> LocalPrice | None:
    """This machine's price as the status document says it (its source, date and age)."""
    if service is None:
        return None
    published = service.published
    pricing, sample = published.pricing, published.sample
    doc = price_doc(pricing, now, service.pricing_config.stale_after_days)
    rates = None if sample is None or pricing.rate_per_hour is None else \
        pricing.machine_rates(sample.host.cpu_count, len(physical_gpus(sample.gpu.gpus)))
    return LocalPrice(
        rate_per_hour=pricing.rate_per_hour, currency=pricing.currency, source=pricing.source,
        detail=pricing.detail, provider=doc["provider"], instance_type=doc["instance_type"],
        market=doc["market_priced"], region=doc["region_priced"] or doc["region"],
        retrieved=doc["retrieved"], age_days=doc["age_days"], stale=bool(doc["stale"]),
        rates=rates)


class EstimateHandler(JobsHandler):
    """POST jobs/estimate: what a job would cost on its backend before it is submitted. A
    backend may ask its service (SkyPilot's optimizer): answered off the IO loop."""

    @web.authenticated
    @authorized
    async def post(self) -> None:
        self._check_params()
        service: CostService | None = self.settings.get("costguard_service")
        machine = local_price(service, time.time())
        self.write_json(await self._call(self.jobs.estimate(self.read_json_body(), machine)))


class JobHandler(JobsHandler):
    @web.authenticated
    @authorized
    async def get(self, raw: str) -> None:
        self._check_params()
        job = await self._call(self.jobs.get(self._job_id(raw)))
        self.write_json((await self.jobs.docs([job], detail=True))[0])


class JobLogHandler(JobsHandler):
    """GET jobs/{id}/log?offset=N&limit=M: the log from byte N; poll with next_offset."""

    @web.authenticated
    @authorized
    async def get(self, raw: str) -> None:
        self._check_params("offset", "limit")
        job_id = self._job_id(raw)
        values = {}
        for name, default in (("offset", 0), ("limit", 65536)):
            text = self.get_query_argument(name, str(default))
            try:
                values[name] = int(text)
            except ValueError:
                raise web.HTTPError(400, "%s must be an integer, not %r", name, text) from None
        if values["offset"] < 0:
            raise web.HTTPError(400, "offset must not be negative")
        if not 1 <= values["limit"] <= MAX_LOG_CHUNK:
            raise web.HTTPError(400, "limit must be between 1 and %d", MAX_LOG_CHUNK)
        self.write_json(await self._call(self.jobs.log(job_id, values["offset"],
                                                       values["limit"])))


class JobResultsHandler(JobsHandler):
    """GET jobs/{id}/results[?names=a,b]: `names` limits what `load_code` loads."""

    @web.authenticated
    @authorized
    async def get(self, raw: str) -> None:
        self._check_params("names")
        job_id = self._job_id(raw)
        text = self.get_query_argument("names", None)
        names = None if text is None else [n for n in text.split(",") if n.strip()]
        if names is not None:
            names = [n.strip() for n in names]
            bad = [n for n in names if not n.isidentifier()]
            if bad or len(names) > 200:
                raise web.HTTPError(400, "names must be at most 200 comma-separated Python "
                                    "names%s", f"; not one: {bad[0][:50]!r}" if bad else "")
        self.write_json(await self._call(self.jobs.results(job_id, names)))


class JobActionHandler(JobsHandler):
    """POST jobs/{id}/cancel and jobs/{id}/rerun."""

    def initialize(self, action: str) -> None:
        self.action = action

    @web.authenticated
    @authorized
    async def post(self, raw: str) -> None:
        self._check_params()
        await self.require(*EXECUTE)  # both run (rerun) or stop (cancel) code
        body = self.read_json_body()
        if body:
            raise web.HTTPError(400, "%s takes no request body", self.action)
        job_id = self._job_id(raw)
        if self.action == "cancel":
            job = await self._call(self.jobs.cancel(job_id))
            self.write_json((await self.jobs.docs([job]))[0], 202)
        else:
            service: CostService | None = self.settings.get("costguard_service")
            job = await self._call(self.jobs.rerun(
                job_id, user=self._user(), machine=local_price(service, time.time())))
            self.set_header("Location", self.request.path.rsplit("/", 2)[0] + f"/{job.id}")
            self.write_json((await self.jobs.docs([job]))[0], 201)


class JobMetricsHandler(JobsHandler):
    """DELETE jobs/{id}/metrics: remove the job's group from the Pushgateway."""

    @web.authenticated
    @authorized
    async def delete(self, raw: str) -> None:
        self._check_params()
        deleted = await self._call(self.jobs.delete_metrics(self._job_id(raw)))
        if not deleted:
            raise web.HTTPError(502, "the Pushgateway did not accept the delete; see the "
                                "server log")
        self.set_status(204)
        self.finish()


def routes(url: Any) -> list[tuple[str, type[web.RequestHandler], dict[str, Any]]]:
    return [
        (url("/jobs"), JobListHandler, {}),
        (url("/jobs/slice"), SlicePreviewHandler, {}),
        (url("/jobs/estimate"), EstimateHandler, {}),
        (url(r"/jobs/([^/]+)"), JobHandler, {}),
        (url(r"/jobs/([^/]+)/log"), JobLogHandler, {}),
        (url(r"/jobs/([^/]+)/results"), JobResultsHandler, {}),
        (url(r"/jobs/([^/]+)/cancel"), JobActionHandler, {"action": "cancel"}),
        (url(r"/jobs/([^/]+)/rerun"), JobActionHandler, {"action": "rerun"}),
        (url(r"/jobs/([^/]+)/metrics"), JobMetricsHandler, {}),
    ]
