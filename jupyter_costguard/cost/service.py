"""The sampling service: telemetry → pricing → ledger → views and metrics, once per tick.

The IO loop gathers `KernelInfo`s (attribute reads only) and hands them to a single worker
thread, which does every slow thing. What readers see is swapped in as one object, so a
request never waits behind a sample and never sees half of one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from jupyter_costguard.alerts.store import AlertStore
from jupyter_costguard.cloud.metadata import MetadataResult
from jupyter_costguard.cloud.watcher import MetadataWatcher
from jupyter_costguard.common.gpuactivity import GPU_BUSY_PERCENT, IDLE
from jupyter_costguard.common.owner import owner_from_environ
from jupyter_costguard.common.stopping import ShuttingDown, on_worker
from jupyter_costguard.common.tasks import cancel_and_wait
from jupyter_costguard.cost import timeline
from jupyter_costguard.cost.activity import WorkClock, server_idleness
from jupyter_costguard.cost.catalog import Catalog
from jupyter_costguard.cost.hubbudget import budgets_doc, budgets_from_environ
from jupyter_costguard.cost.ledger import HISTORY_BUCKET_SECONDS, Ledger
from jupyter_costguard.cost.pricing import (
    ContainerFacts,
    Pricing,
    PricingConfig,
    provider_from_dmi,
    resolve_pricing,
)
from jupyter_costguard.cost.published import Published
from jupyter_costguard.cost.sparklines import history_doc
from jupyter_costguard.cost.spend import physical_gpus, split_interval
from jupyter_costguard.cost.views import build_views
from jupyter_costguard.sampling.records import KernelInfo, Sample
from jupyter_costguard.sampling.telemetry import Telemetry

T = TypeVar("T")

log = logging.getLogger("jupyter_costguard")


def dmi_provider() -> str | None:
    """The cloud the machine's firmware names (Linux DMI), to break catalog ties."""
    def read(name: str) -> str:
        try:
            return Path("/sys/class/dmi/id", name).read_text()
        except OSError:
            return ""

    return provider_from_dmi(read("sys_vendor"), read("product_name"))


def decide_pricing(config: PricingConfig, catalog: Catalog, sample: Sample | None, *,
                   environ: Mapping[str, str], simulated_type: str | None = None,
                   provider: str | None = None, metadata: MetadataResult | None = None,
                   container: ContainerFacts | None = None) -> Pricing:
    """The price as the server decides it (`jupyter costguard detect` calls this too).

    A replayed trace names the instance it was recorded on; that stands in for a
    configured type unless one is configured or in the environment."""
    instance_type = config.instance_type
    from_trace = bool(instance_type is None and simulated_type
                      and not environ.get("COSTGUARD_INSTANCE_TYPE"))
    if from_trace:
        instance_type = simulated_type
    pricing = resolve_pricing(
        catalog, instance_type=instance_type, environ=environ,
        gpu=sample.gpu if sample else None, host=sample.host if sample else None,
        hourly_rate=config.hourly_rate, market=config.market, currency=config.currency,
        gpu_share=config.gpu_share, provider=provider, region=config.region,
        metadata=metadata, container=container)
    if from_trace and pricing.source == "config":
        pricing = dataclasses.replace(
            pricing, source="trace",
            detail=pricing.detail.replace(
                f"c.CostGuard.instance_type = {instance_type!r}",
                f"the replayed trace (simulated) was recorded on {instance_type!r}"),
            tried=tuple(t.replace(f"c.CostGuard.instance_type = {instance_type!r}",
                                  f"the replayed trace was recorded on {instance_type!r}")
                        for t in pricing.tried))
    return pricing


def load_catalog(config: PricingConfig) -> Catalog:
    """The catalog as the configuration asks: files on top, converted to its currency."""
    return Catalog.load(config.catalog_files, currency=config.currency,
                        exchange_rates=dict(config.exchange_rates),
                        rates_date=config.exchange_rates_date)

#: How long an API request that changed an alert waits for it to be written before answering
#: (the change is in memory already; it is written as soon as the worker is free).
ALERT_WRITE_WAIT_SECONDS = 10.0

#: Called on the worker thread with each new snapshot before it is published (the guard).
AfterSample = Callable[[Published], object]


class CostService:
    """Samples, prices, records and publishes, once per tick, on one worker thread.

    What runs after each sample (the guard's rules) is handed in at construction, as are the
    alert store and the catalog when the caller shares them with those consumers; the service
    knows them only as callables and data.
    """

    def __init__(
        self,
        telemetry: Telemetry,
        ledger: Ledger,
        pricing_config: PricingConfig,
        sample_interval: float = 2.0,
        idle_threshold_percent: float = GPU_BUSY_PERCENT,
        environ: dict[str, str] | None = None,
        metrics_builder: Callable[[Published], list[Any]] | None = None,
        alerts: AlertStore | None = None,
        logger: logging.Logger | None = None,
        *,
        catalog: Catalog | None = None,
        worker: ThreadPoolExecutor | None = None,
        after_sample: Sequence[AfterSample] = (),
        metadata: MetadataWatcher | None = None,
        container: ContainerFacts | None = None,
    ) -> None:
        self.telemetry = telemetry
        self.ledger = ledger
        self.pricing_config = pricing_config
        self.sample_interval = sample_interval
        self.idle_threshold_percent = idle_threshold_percent
        self.environ = dict(os.environ if environ is None else environ)
        self.metrics_builder = metrics_builder
        self.catalog = catalog if catalog is not None else load_catalog(pricing_config)
        #: what the cloud's metadata service said (its thread keeps it fresh), and the cgroup
        #: facts a container's share is priced from; None: neither is used
        self.metadata = metadata
        self.container = container
        #: whose server this is (JupyterHub), on every document and series
        self.owner = owner_from_environ(self.environ)
        self._pricing_key: tuple[Any, ...] | None = None
        self._pricing: Pricing | None = None
        self._executor = worker if worker is not None else new_worker()
        self._task: asyncio.Task[None] | None = None
        self.after_sample = list(after_sample)
        self._stopping = False
        #: `stop` began: the worker takes no more reads (the ledger is closed next)
        self._closed = False
        self.samples_total = 0
        #: the budgets a JupyterHub gave this server at spawn, and the spend they started from
        self.hub_budgets = budgets_from_environ(self.environ)
        self._spend_at_start = ledger.server.spend
        #: this run of the server: when it started and the ledger's totals then (a hub's
        #: service is told what this run spent, checked against the Hub's start time)
        self.run_since = time.time()
        self._waste_at_start = ledger.server.waste
        self._unattributed_at_start = ledger.server.unattributed
        #: when the server was last not idle by every measure (`server_idleness`: a kernel
        #: executing, a GPU busy or held with unknown activity: MIG); the first sample counts
        #: as at work: idle time starts there
        self._gpu_busy_time: float | None = None
        #: when each kernel was last at work (the one stop decision): its idle time starts there
        self._work = WorkClock(self.idle_threshold_percent)
        # Alerts share the ledger's file; their writes run on the worker, like the ledger's.
        self.alerts = alerts if alerts is not None else AlertStore(
            ledger.db_path, schedule=self._executor.submit, logger=logger or log)
        pricing = self._resolve(None)
        now = self.alerts.clock()
        self.published: Published = Published(
            sample=None, cost=None, pricing=pricing,
            views=build_views(None, None, pricing, ledger, sample_interval,
                              idle_threshold_percent, simulated=telemetry.simulated,
                              alerts=self.alerts.summary(now),
                              stale_after_days=pricing_config.stale_after_days,
                              owner=self.owner),
            alert_counts=self.alerts.counts(now), alerts_raised=self.alerts.raised(),
        )

    # --- the worker side -------------------------------------------------------------

    def _resolve(self, sample: Sample | None) -> Pricing:
        """Pricing depends on what the hardware looks like; re-resolve only when that changes."""
        gpu_key = None if sample is None else (
            sample.gpu.status, tuple(g.name for g in sample.gpu.gpus if g.mig_parent_uuid is None),
            sample.host.cpu_count, sample.host.memory_total_bytes,
        )
        answer = self.metadata.result if self.metadata is not None else None
        key = (gpu_key, answer)
        if key == self._pricing_key and self._pricing is not None:
            return self._pricing
        self._pricing_key = key
        pricing = decide_pricing(
            self.pricing_config, self.catalog, sample, environ=self.environ,
            simulated_type=getattr(self.telemetry.gpu_source, "instance_type", None),
            provider=self._provider_hint(), metadata=answer, container=self.container)
        self._pricing = pricing
        return pricing

    def _provider_hint(self) -> str | None:
        if not hasattr(self, "_provider"):
            self._provider = dmi_provider()
        return self._provider

    def tick(self, kernels: Sequence[KernelInfo]) -> Published:
        """One full sample. Runs on the worker thread (tests may call it directly)."""
        sample = self.telemetry.sample(kernels)
        pricing = self._resolve(sample)
        rates = pricing.machine_rates(sample.host.cpu_count,
                                      len(physical_gpus(sample.gpu.gpus)))
        cost = split_interval(sample, pricing.rate_per_hour, pricing.gpu_share,
                              idle_threshold_percent=self.idle_threshold_percent, rates=rates)
        self.ledger.record_by_minute(
            sample.time, sample.interval, cost,
            paths={k.info.kernel_id: k.info.path for k in sample.kernels},
            names={k.info.kernel_id: k.info.name for k in sample.kernels},
        )
        if self._gpu_busy_time is None or server_idleness(
                sample, self.idle_threshold_percent) != IDLE:
            self._gpu_busy_time = sample.time
        self._work.observe(sample)
        now = self.alerts.clock()
        summary = self.alerts.summary(now)
        views = build_views(sample, cost, pricing, self.ledger, self.sample_interval,
                            self.idle_threshold_percent, alerts=summary,
                            stale_after_days=self.pricing_config.stale_after_days,
                            owner=self.owner, gpu_busy_time=self._gpu_busy_time,
                            worked=dict(self._work.worked),
                            hub_budgets=budgets_doc(
                                self.hub_budgets, self.ledger.server.spend
                                - self._spend_at_start, sample.time))
        self.samples_total += 1
        published = Published(sample=sample, cost=cost, pricing=pricing, views=views,
                              samples_total=self.samples_total,
                              alert_counts=self.alerts.counts(now),
                              alerts_raised=self.alerts.raised(),
                              metrics_builder=self.metrics_builder)
        if self.after_sample:
            for consume in self.after_sample:
                consume(published)
            now = self.alerts.clock()
            after = self.alerts.summary(now)
            if after != summary:  # the rules raised or resolved something just now
                published = dataclasses.replace(
                    published, views=views.with_alerts(after),
                    alert_counts=self.alerts.counts(now), alerts_raised=self.alerts.raised())
            self.alerts.flush()
        self.published = published
        return published

    def sync_alerts(self) -> Published:
        """Write pending alert changes and republish documents and metrics with the alerts
        as they are now, without waiting for the next sample. Worker thread (or tests)."""
        self.alerts.flush()
        now = self.alerts.clock()
        p = self.published
        published = dataclasses.replace(
            p, views=p.views.with_alerts(self.alerts.summary(now)),
            alert_counts=self.alerts.counts(now), alerts_raised=self.alerts.raised())
        self.published = published
        return published

    def use_catalog(self, catalog: Catalog) -> None:
        """Price from `catalog` from the next sample on (a refreshed one; worker thread, so
        no sample sees half of the change): the price worked out from the old one is
        forgotten."""
        self.catalog = catalog
        self._pricing_key = None

    def run_start(self) -> tuple[float, float, float, float]:
        """(when this run started, the ledger's spend, waste and unattributed then)."""
        return (self.run_since, self._spend_at_start, self._waste_at_start,
                self._unattributed_at_start)

    # --- the loop side ---------------------------------------------------------------

    async def alerts_changed(self) -> None:
        """After the API changed an alert (in memory): persist it and refresh the documents
        on the worker thread. Waits for that (bounded), so an answered request is on disk."""
        loop = asyncio.get_running_loop()
        try:
            future = loop.run_in_executor(self._executor, self.sync_alerts)
        except RuntimeError:  # stopping: close() writes what is pending
            return
        try:
            await asyncio.wait_for(asyncio.shield(future), ALERT_WRITE_WAIT_SECONDS)
        except asyncio.TimeoutError:
            log.warning("costguard: the sampler is busy; alert change saved in memory and "
                        "written when it is free")

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self, gather: Callable[[], Awaitable[list[KernelInfo]]]) -> None:
        """Start ticking on the running loop; `gather` collects kernel facts on the loop."""
        self._stopping = False
        self._task = asyncio.ensure_future(self._sample_loop(gather))

    async def _sample_loop(self, gather: Callable[[], Awaitable[list[KernelInfo]]]) -> None:
        """A tick every `sample_interval` on the worker thread until `stop`; a failed tick is
        logged, and a late one is not caught up."""
        loop = asyncio.get_running_loop()
        next_at = time.monotonic()
        while not self._stopping:
            try:
                infos = await gather()
                await loop.run_in_executor(self._executor, self.tick, infos)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("costguard: sample failed")
            next_at += self.sample_interval
            delay = next_at - time.monotonic()
            if delay < 0:  # fell behind (slow disk, suspended VM): don't try to catch up
                next_at = time.monotonic()
                delay = 0
            await asyncio.sleep(delay)

    async def history(self, path: str, minutes: int) -> list[dict[str, float]]:
        """Minute history from disk, read on the worker thread that owns the database."""
        since = int(time.time() // HISTORY_BUCKET_SECONDS) - minutes
        points = await self._read(self.ledger.history, path, since)
        return history_doc(points, minutes)

    async def spend_history(self, minutes: int, notebook: str | None,
                            fit: bool = False) -> dict[str, Any]:
        """The spend chart's buckets over the last `minutes` (cost/timeline.py), summed by
        SQLite on the worker thread that owns the database (and records the samples)."""
        return await self._read(timeline.read, self.ledger, time.time(), minutes, notebook,
                                fit)

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on the worker that owns the database; `ShuttingDown` once `stop`
        began (the ledger is being closed), whatever the executor would still take."""
        if self._closed:
            raise ShuttingDown()
        return await on_worker(self._executor, fn, *args)

    async def stop(self) -> None:
        """Stop sampling, close the ledger and shut the worker down; a second call (the
        server's own, after a test's or an auto-stop's) does nothing."""
        if self._closed:
            return
        self._closed = True
        self._stopping = True
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._close)
        self._executor.shutdown(wait=False)

    def _close(self) -> None:
        self.alerts.close()
        self.telemetry.close()
        self.ledger.close()


def new_worker() -> ThreadPoolExecutor:
    """The single worker thread that owns the ledger's database (and the alerts in it)."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="costguard-sampler")
