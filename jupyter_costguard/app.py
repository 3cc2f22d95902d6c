"""The server extension: its own options (`c.CostGuard.…`: instance, prices, sampling,
ledger), the components' Configurables (`c.Offload`, `c.SlurmBackend`, …, each declared beside
the part it configures and created here with the extension as parent) and the wiring of the
parts. Nothing else."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from jupyter_server.extension.application import ExtensionApp
from tornado.ioloop import IOLoop
from traitlets.config import Config, Configurable

from jupyter_costguard.alerts.store import AlertStore
from jupyter_costguard.cloud.container import read_cgroup_limits
from jupyter_costguard.cloud.metadata import lookup
from jupyter_costguard.cloud.watcher import MetadataWatcher
from jupyter_costguard.common.moved import forward_moved, moves_of
from jupyter_costguard.common.owner import owner_from_doc, owner_from_environ
from jupyter_costguard.cost.config import CostTraits
from jupyter_costguard.cost.hubreport import HubReport, HubReporter, reporter_from
from jupyter_costguard.cost.ledger import Ledger
from jupyter_costguard.cost.pricing import ContainerFacts, MachinePrice, price_machine
from jupyter_costguard.cost.published import Published
from jupyter_costguard.cost.refresh import CatalogRefresher, background_refresh_off
from jupyter_costguard.cost.service import CostService, load_catalog, new_worker
from jupyter_costguard.guard.actions import Actor
from jupyter_costguard.guard.autostop import terminal_activity
from jupyter_costguard.guard.budget import BudgetRule, NotebookBudgets
from jupyter_costguard.guard.config import Guard
from jupyter_costguard.guard.engine import GuardEngine
from jupyter_costguard.guard.idle import HIBERNATED_KIND
from jupyter_costguard.guard.rules import default_rules
from jupyter_costguard.hibernate.layout import adopt, prepare, snapshot_paths
from jupyter_costguard.hibernate.resume import Resume
from jupyter_costguard.hibernate.service import Held, HibernateService
from jupyter_costguard.hibernate.settings import Hibernate
from jupyter_costguard.metrics import collector as metrics
from jupyter_costguard.metrics.pushgateway import push_finished_job
from jupyter_costguard.offload import jobdir
from jupyter_costguard.offload.accounting import kernel_gpu_usage, pick_gpus
from jupyter_costguard.offload.backends.base import Backend
from jupyter_costguard.offload.backends.kubernetes.traits import KubernetesBackend
from jupyter_costguard.offload.backends.local import LocalBackend, LocalExecutor
from jupyter_costguard.offload.backends.skypilot.traits import SkyPilotBackend
from jupyter_costguard.offload.backends.slurm import SlurmBackend
from jupyter_costguard.offload.service import JobService
from jupyter_costguard.offload.settings import Offload, Pushgateway, ServerHooks
from jupyter_costguard.offload.store import JobStore
from jupyter_costguard.sampling.kernels import gather_kernels
from jupyter_costguard.sampling.records import KernelInfo
from jupyter_costguard.sampling.sources import SamplingTraits
from jupyter_costguard.sampling.telemetry import Telemetry
from jupyter_costguard.web.routes import handlers

#: each component's own Configurable (`c.<Name>.<option>`), created with the extension as
#: parent; listed in `CostGuard.classes` so `--help-all` shows each under its own name
COMPONENTS: tuple[type[Configurable], ...] = (
    Guard, Hibernate, HubReport, Offload, LocalBackend, SlurmBackend, KubernetesBackend,
    SkyPilotBackend, Pushgateway)


class CostGuard(ExtensionApp, CostTraits, SamplingTraits):
    """Cost of GPU notebooks: sampling, ledger, guard, batch jobs, REST API and metrics."""

    name = "jupyter_costguard"
    load_other_extensions = True
    classes = [*ExtensionApp.classes, *COMPONENTS]
    #: old `c.CostGuard.<name>` -> (component, new name): still read for a release
    moved_options = moves_of(COMPONENTS)

    service: CostService | None = None
    jobs: JobService | None = None
    hibernation: HibernateService | None = None
    resume: Resume | None = None
    guard: GuardEngine | None = None
    hub_reporter: HubReporter | None = None
    catalog_refresher: CatalogRefresher | None = None
    _budget: BudgetRule | None = None

    def _load_config(self, cfg: Config, section_names: list[str] | None = None,
                     traits: dict[str, Any] | None = None) -> None:
        """Every config this app reads passes here first (files, the command line, the
        server's): an old `c.CostGuard.<moved>` goes to its component's section, with one
        warning per name, before traitlets would call it unknown."""
        warned: set[str] = self.__dict__.setdefault("_warned_moves", set())
        forward_moved(cfg, "CostGuard", self.moved_options, warned, self.log.warning)
        super()._load_config(cfg, section_names, traits)

    @property
    def server(self) -> Any:
        """The ServerApp (always set once the extension is loaded)."""
        assert self.serverapp is not None
        return self.serverapp

    def _root_dir(self) -> str:
        return getattr(self.server.contents_manager, "root_dir", None) or self.server.root_dir

    def initialize_settings(self) -> None:
        self.offload = Offload(parent=self)
        self.hibernate_options = Hibernate(parent=self)
        self.pushgateway = Pushgateway(parent=self)
        ledger = Ledger(self.db_path, retention_days=self.history_retention_days, now=time.time())
        worker = new_worker()  # owns the ledger's file; the alerts share it
        alerts = AlertStore(ledger.db_path, schedule=worker.submit, logger=self.log)
        pricing_config = self.pricing_config()
        catalog = load_catalog(pricing_config)
        config = Guard(parent=self)
        self._budget = BudgetRule(config) if config.enabled else None
        # The job service reads the latest sample; it exists before the service that makes it.
        self.jobs = self._job_service(ledger) if self.offload.enabled else None
        jobs = self.jobs
        #: the note that tells this server's kernels its jobs directory (`%costguard fetch`)
        self._server_info: Path | None = None
        if jobs is not None:
            try:
                self._server_info = jobdir.write_server_info(self.server.runtime_dir,
                                                             jobs.jobs_dir)
            except OSError as e:  # the magic then needs --dir; nothing else depends on it
                self.log.warning("costguard: cannot tell kernels the jobs directory: %s", e)
        if config.enabled:
            loop = getattr(self.serverapp, "io_loop", None) or IOLoop.current()
            self.actor = Actor(self.server.kernel_manager, self._stop_server,
                               loop.asyncio_loop,  # type: ignore[union-attr]
                               hibernate=self._hibernate_idle)
            rules = default_rules(config, server_activity=terminal_activity(self.server),
                                  gpu_busy_percent=self.idle_gpu_threshold_percent,
                                  budget=self._budget)
            self.guard = GuardEngine(
                config, rules, alerts, ledger, catalog, dispatch=self.actor.dispatch,
                running_jobs=jobs.running_count if jobs is not None else (lambda: 0),
                notebook_budgets=NotebookBudgets(self._root_dir(), logger=self.log))
            self.actor.listeners.append(self.guard.heard)
        self._worker = worker
        self.service = service = CostService(
            Telemetry(self.gpu_source()), ledger, pricing_config,
            sample_interval=self.sample_interval,
            idle_threshold_percent=self.idle_gpu_threshold_percent,
            metrics_builder=metrics.build_metrics, alerts=alerts, logger=self.log,
            catalog=catalog, worker=worker,
            after_sample=[self.guard.evaluate] if self.guard is not None else [],
            metadata=self._metadata_watcher(),
            container=ContainerFacts(read_cgroup_limits(), mode=self.container_share),
        )
        if jobs is not None and self.pushgateway.url:
            url = self.pushgateway.url

            def push(job: Any) -> None:
                gpu = job.record.get("gpu") or {}
                mean = gpu.get("mean_utilization_percent")
                owner = owner_from_doc(job.record.get("owner"))  # whose job, under a hub
                push_finished_job(url, job, currency=service.published.pricing.currency,
                                  gpu_utilization_ratio=mean / 100 if mean is not None else None,
                                  extra_labels={"user": owner.user, "server": owner.server}
                                  if owner is not None else None)

            jobs.listeners.append(push)
        metrics.install(lambda: service.published.metrics + (jobs.metrics() if jobs else [])
                        + (self.hibernation.metrics() if self.hibernation else []),
                        owner=service.owner)
        self.hub_reporter = reporter_from(
            HubReport(parent=self), os.environ, service.owner, published=self._published,
            run_start=service.run_start, alerts=service.alerts,
            alerts_changed=service.alerts_changed,
            active_jobs=jobs.running_count if jobs is not None else (lambda: 0),
            waste_removed=self.hibernation.waste_removed if self.hibernation
            else (lambda: 0.0))
        self.catalog_refresher = self._catalog_refresher()
        self.settings["costguard_service"] = service
        self.settings["costguard_jobs"] = jobs
        self.settings["costguard_guard"] = self.guard
        self.hibernation = self._hibernate_service()
        if self.hibernation is not None:
            self.hibernation.listeners.append(self._snapshot_gone)
            self.resume = Resume(self.hibernation, self.server.session_manager, self.log,
                                 enabled=self.hibernate_options.resume)
            self.resume.install()
        self.settings["costguard_hibernate"] = self.hibernation
        self.log.info("costguard: ledger at %s, %s", self.db_path,
                      service.published.pricing.detail)
        # The server calls _start_jupyter_server_extension once its loop runs; embedders
        # that never run that hook (pytest-jupyter) still get sampling via this callback.
        loop = getattr(self.serverapp, "io_loop", None) or IOLoop.current()
        loop.add_callback(self._ensure_started)

    def _metadata_watcher(self) -> MetadataWatcher:
        """The cloud's metadata, asked on a thread of its own from now on (never the loop)."""
        enabled, timeout = self.cloud_metadata, self.cloud_metadata_timeout
        watcher = MetadataWatcher(lambda: lookup(timeout=timeout, enabled=enabled),
                                  interval=self.cloud_metadata_interval)
        watcher.start()
        return watcher

    def _catalog_refresher(self) -> CatalogRefresher | None:
        """The background price refresh (`cost.refresh`), when on and gpuhunt is here."""
        off = background_refresh_off(self.catalog_refresh_hours)
        if off:
            self.log.info("costguard: background catalog refresh off: %s", off)
            return None
        return CatalogRefresher(self.catalog_refresh_hours * 3600.0,
                                self.catalog_refresh_timeout, self._use_catalog, log=self.log)

    def _use_catalog(self, path: Path) -> None:
        """A refreshed catalog (on the refresher's thread): loaded as at start, then swapped
        in on the service's worker, which re-prices from it at its next sample."""
        catalog = load_catalog(self.pricing_config())
        service, guard = self.service, self.guard

        def swap() -> None:
            if service is not None:
                service.use_catalog(catalog)
            if guard is not None:
                guard.catalog = catalog

        self._worker.submit(swap).result(timeout=60)

    def _published(self) -> Published:
        assert self.service is not None
        return self.service.published

    def _machine_price(self, provider: str, instance_type: str, region: str | None,
                       market: str) -> MachinePrice | None:
        """A machine a job ran on, at the price of the catalog in use (refreshed or not)."""
        assert self.service is not None
        return price_machine(self.service.catalog, provider, instance_type, region, market)

    def _job_service(self, ledger: Ledger) -> JobService:
        # the default sits next to the ledger, whose path is the cost settings'
        jobs_dir = Path(self.offload.jobs_dir
                        or os.path.join(os.path.dirname(self.db_path), "jobs"))
        budget = self._budget
        ksm = self.server.kernel_spec_manager
        default_kernel = getattr(self.server.kernel_manager, "default_kernel_name", None) \
            or "python3"
        root = self._root_dir()
        self.local_backend = LocalBackend(parent=self)
        backends: dict[str, Backend] = {
            "local": LocalExecutor(warm_dir=jobs_dir / "warm",
                                   warm_kernels=max(0, self.local_backend.warm_kernels),
                                   warm_kernel_name=default_kernel)}
        for backend in (SlurmBackend(parent=self).backend(),
                        KubernetesBackend(parent=self).backend(),
                        SkyPilotBackend(parent=self).backend()):
            if backend is not None:
                backends[backend.name] = backend
        hooks = ServerHooks(
            kernel_manager=self.server.kernel_manager,
            kernel_spec_names=lambda: set(ksm.find_kernel_specs()),
            job_spend=ledger.kernel_spend,
            currency=lambda: self._published().pricing.currency,
            budget_refuses=budget.refuses if budget is not None else (lambda path: None),
            gpu_picker=lambda n: pick_gpus(self._published().sample, n),
            local_capacity=self._local_capacity(),
            gpu_usage=lambda kid: kernel_gpu_usage(self._published().sample, kid),
            machine_price=self._machine_price)
        return JobService(JobStore(jobs_dir / jobdir.JOBS_DB), jobs_dir, backends, Path(root),
                          self.offload.job_settings(self.pushgateway.url), hooks,
                          owner=owner_from_environ(os.environ))

    def _hibernate_service(self) -> HibernateService | None:
        """Snapshots beside the ledger unless `snapshot_dir` says; the MAC key in the data
        folder (beside the ledger) even when the snapshots are elsewhere; on a hub, in folders
        of the owner's own (`hibernate.layout`). A failure here turns hibernate off (503) and
        leaves the rest of costguard running."""
        data = Path(os.path.dirname(os.path.abspath(self.db_path)))
        owner = owner_from_environ(os.environ)
        options = self.hibernate_options
        paths = snapshot_paths(data, options.snapshot_dir, owner.user if owner else None)
        root = paths.root
        if options.store_url_refused is not None:
            self.log.error("costguard: hibernate is off: %s", options.store_url_refused)
            self.settings["costguard_hibernate_off"] = \
                f"hibernate is off on this server: {options.store_url_refused}"
            return None

        def held(kernel_id: str) -> Held:
            if self.service is None:
                return Held()
            view = next((k for k in self.service.published.views.kernels
                         if k.kernel_id == kernel_id), None)
            if view is None:
                return Held()
            return Held(gpus=len(view.gpus), rate_per_hour=view.spend_rate_per_hour)

        try:
            if owner is not None:
                prepare(paths, data)
                adopt(paths, owner.user, self.log)
            return HibernateService(
                root, paths.key, self.server.kernel_manager,
                self.server.session_manager,
                options.service_settings(self.price_stale_after_days),
                held=held, owner=owner.user if owner else None, logger=self.log,
                currency=lambda: self._published().pricing.currency)
        except Exception as e:
            self.log.error("costguard: hibernate is off: cannot use %s: %s", root, e)
            self.settings["costguard_hibernate_off"] = \
                f"hibernate is off on this server: cannot use its snapshot folder ({e})"
            return None

    async def _snapshot_gone(self, snapshot_id: str) -> None:
        """A snapshot restored or deleted: its "hibernated" notice (the idle rule's, keyed by
        the snapshot) has nothing left to offer, so it is resolved."""
        service = self.service
        if service is not None and service.alerts.resolve(HIBERNATED_KIND, snapshot_id):
            await service.alerts_changed()

    async def _hibernate_idle(self, kernel_id: str) -> dict[str, Any]:
        """The idle rule's `hibernate-kernel` (`c.Guard.hibernate_idle_after_seconds`):
        automatic, so the kernel is shut down only if every variable was saved (or what is
        left behind is what `c.Hibernate.may_leave_behind` allows)."""
        if self.hibernation is None:
            raise RuntimeError(self.settings.get("costguard_hibernate_off")
                               or "hibernate is off on this server (the log at start says why)")
        return await self.hibernation.hibernate(kernel_id, automatic=True)

    def _local_capacity(self) -> Any:
        limit = self.local_backend.max_jobs

        def capacity() -> int:
            if limit is not None and limit > 0:
                return int(limit)
            sample = self._published().sample
            gpus = [g for g in sample.gpu.gpus if g.faulty is None] if sample else []
            return max(1, len(gpus))

        return capacity

    def _stop_server(self) -> None:
        """Auto-stop without a shutdown command: stop this Jupyter server."""
        self.log.warning("costguard: auto-stop: stopping the Jupyter server")
        self.server.stop(from_signal=True)

    def _ensure_started(self) -> None:
        # `enabled` switches the sampler and the hub reports; the job service runs either way
        if self.service is not None and self.enabled and not self.service.running:
            self.service.start(self._gather)
        if self.jobs is not None:
            self.jobs.start()
        if self.hub_reporter is not None and self.enabled and not self.hub_reporter.running:
            self.hub_reporter.start()
        if self.catalog_refresher is not None:
            self.catalog_refresher.start()

    def initialize_handlers(self) -> None:
        # Registered outside the extension's own namespace so the routes are exactly
        # {base_url}costguard/api/...
        self.server.web_app.add_handlers(".*$", handlers(self.server.base_url))

    async def _start_jupyter_server_extension(self, serverapp: Any) -> None:
        self._ensure_started()

    async def _gather(self) -> list[KernelInfo]:
        infos = gather_kernels(self.server.kernel_manager, self.server.session_manager)
        if self.jobs is not None:
            infos += self.jobs.running_kernels()
        return infos

    async def _hibernate_on_stop(self) -> None:
        """Before anything else stops (and before the server shuts its kernels down, which it
        does after the extensions): hibernate the kernels that hold GPUs in the latest
        sample, within `c.Hibernate.on_stop_seconds`."""
        if self.hibernation is None or self.service is None:
            return
        budget = self.hibernate_options.on_stop_seconds
        if budget <= 0:
            return
        # the kernels' views say which hold GPUs, as they say it for `held` and the panel
        live = set(self.server.kernel_manager.list_kernel_ids())
        holding = [k.kernel_id for k in self.service.published.views.kernels
                   if k.gpus and k.kernel_id in live]
        if not holding:
            return
        self.log.info("costguard: stopping: hibernating %d kernel(s) that hold GPUs (within "
                      "%g s)", len(holding), budget)
        outcome = await self.hibernation.hibernate_on_stop(holding, budget)
        for kernel_id, result in outcome.items():
            self.log.warning("costguard: stopping: kernel %s: %s", kernel_id,
                             result if result.startswith("not ") else
                             f"hibernated as snapshot {result}")

    async def stop_extension(self) -> None:
        try:
            await self._hibernate_on_stop()
        except Exception:  # a stop must go on whatever happened here
            self.log.exception("costguard: hibernating kernels at stop failed")
        info = getattr(self, "_server_info", None)
        if info is not None:
            await asyncio.to_thread(info.unlink, missing_ok=True)
        if self.catalog_refresher is not None:
            await self.catalog_refresher.stop()
        if self.hub_reporter is not None:
            await self.hub_reporter.stop()
        if self.jobs is not None:
            await self.jobs.stop()
            self.jobs.close()
        if self.hibernation is not None:
            await asyncio.to_thread(self.hibernation.close)
        if self.service is not None:
            if self.service.metadata is not None:
                self.service.metadata.stop()
            await self.service.stop()
            metrics.install(None)
