"""The server extension: configuration (`c.CostGuard.…`) and wiring, nothing else."""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from jupyter_server.extension.application import ExtensionApp
from tornado.ioloop import IOLoop
from traitlets import Bool, CaselessStrEnum, Dict, Float, Int, List, Unicode, default

from jupyter_costguard.cost.ledger import Ledger, default_db_path
from jupyter_costguard.cost.service import CostService, PricingConfig
from jupyter_costguard.guard import Guard, GuardConfig
from jupyter_costguard.guard.actions import Actor
from jupyter_costguard.guard.autostop import terminal_activity
from jupyter_costguard.guard.budget import BudgetRule
from jupyter_costguard.guard.rules import default_rules
from jupyter_costguard.metrics import collector as metrics
from jupyter_costguard.metrics.pushgateway import push_finished_job
from jupyter_costguard.offload.backends.local import Backend, LocalBackend
from jupyter_costguard.offload.backends.slurm import SlurmBackend
from jupyter_costguard.offload.service import Defaults, JobService, kernel_gpu_usage, pick_gpus
from jupyter_costguard.offload.spec import Resources
from jupyter_costguard.offload.store import JobStore
from jupyter_costguard.sampling.records import GpuReading, KernelInfo
from jupyter_costguard.sampling.replay import ReplaySource
from jupyter_costguard.sampling.telemetry import GpuSource, Telemetry
from jupyter_costguard.web import handlers as api


class NvmlSource:
    """`GpuSource` over the real NVML reader."""

    simulated = False
    instance_type = None

    def __init__(self) -> None:
        from jupyter_costguard.sampling.nvml import NvmlReader

        self.reader = NvmlReader()

    def read(self, kernel_pids: Any) -> GpuReading:
        return self.reader.read()

    def close(self) -> None:
        self.reader.close()


class FallbackSource:
    """NVML when a driver answers; otherwise the replayed trace (demo configuration)."""

    def __init__(self, nvml: NvmlSource, replay: ReplaySource) -> None:
        self.nvml = nvml
        self.replay = replay
        self.simulated = True
        self.instance_type: str | None = replay.instance_type

    def read(self, kernel_pids: Any) -> GpuReading:
        reading = self.nvml.read(kernel_pids)
        if reading.status == "ok" and reading.gpus:
            self.simulated = False
            self.instance_type = None
            return reading
        self.simulated = True
        self.instance_type = self.replay.instance_type
        return self.replay.read(kernel_pids)

    def close(self) -> None:
        self.nvml.close()


class CostGuard(ExtensionApp):
    """Cost of GPU notebooks: sampling, ledger, REST API and Prometheus metrics."""

    name = "jupyter_costguard"
    load_other_extensions = True

    instance_type = Unicode(
        None, allow_none=True, config=True,
        help="Catalog instance type this server runs on (e.g. p4d.24xlarge). Beats detection.",
    )
    hourly_rate = Float(
        None, allow_none=True, config=True,
        help="Hourly rate to use when the instance cannot be found in the catalog.",
    )
    market = CaselessStrEnum(
        ["on-demand", "spot"], default_value="on-demand", config=True,
        help="Which catalog price applies: on-demand or spot.",
    )
    currency = Unicode("USD", config=True, help="Currency code shown with every amount.")
    gpu_share = Float(
        None, allow_none=True, config=True,
        help="Fraction of the hourly rate that is the GPUs' (the rest is the host's). "
        "Default: the catalog row's, else a rule by vCPU and RAM (see README).",
    )
    catalog_files = List(
        Unicode(), config=True,
        help="Extra catalog files (CSV or JSON) whose rows add to or override the shipped ones.",
    )
    sample_interval = Float(2.0, config=True, help="Seconds between samples.")
    idle_gpu_threshold_percent = Float(
        5.0, config=True,
        help="A GPU below this utilisation is idle; kernels holding it while not busy waste.",
    )
    db_path = Unicode(config=True, help="SQLite file holding the ledger.")
    history_retention_days = Float(7.0, config=True, help="Days of per-minute history kept.")
    replay_trace = Unicode(
        None, allow_none=True, config=True,
        help="A recorded GPU trace to play (figures labelled simulated).",
    )
    replay_mode = CaselessStrEnum(
        ["fallback", "always"], default_value="fallback", config=True,
        help="'fallback': play replay_trace only when no NVIDIA driver answers; 'always': play it.",
    )
    enabled = Bool(True, config=True, help="Turn sampling off entirely.")

    # --- batch jobs (see README "Offloading cells") ------------------------------------
    offload_enabled = Bool(True, config=True, help="Offer running cells as batch jobs.")
    jobs_dir = Unicode(
        config=True, help="Directory of the job store (jobs.sqlite) and each job's files. "
        "Default: 'jobs' next to the ledger.")
    offload_time_limit_seconds = Float(
        None, allow_none=True, config=True,
        help="Time limit of a job that asks for none (seconds; None: no limit).")
    offload_retries = Int(0, config=True, help="Retries of a failed job that asks for none.")
    offload_retry_backoff_seconds = Float(
        2.0, config=True, help="Wait before the first retry; doubled for each next one.")
    offload_max_send_bytes = Int(
        100 << 20, config=True, help="Largest pickle of variables sent into a job.")
    offload_warm_kernels = Int(
        1, config=True,
        help="Kernels (of the default kernelspec) kept started for the local backend, so a "
        "job starts without waiting for one. 0: start a kernel per job.")
    offload_max_local_jobs = Int(
        None, allow_none=True, config=True,
        help="Local jobs that may run at once; more wait, queued, first come first served. "
        "None: one per GPU the server sees (at least one).")
    offload_poll_interval = Float(
        0.5, config=True, help="Seconds between reads of an active job's status.")
    slurm_enabled = Bool(
        None, allow_none=True, config=True,
        help="Offer the Slurm backend (jobs with backend 'slurm'). None: when sbatch is on "
        "PATH. The job directories must be on a filesystem the compute nodes share.")
    slurm_partition = Unicode(None, allow_none=True, config=True,
                              help="Slurm partition for jobs (None: the cluster's default).")
    slurm_account = Unicode(None, allow_none=True, config=True,
                            help="Slurm account jobs are charged to (None: the user's default).")
    slurm_extra_args = List(
        Unicode(), config=True,
        help="More sbatch arguments, e.g. ['--qos=normal', '--constraint=a100'].")
    slurm_signal_seconds = Int(
        60, config=True,
        help="Seconds before Slurm's time limit that a job gets SIGUSR1 (a final checkpoint); "
        "0: none.")
    slurm_python = Unicode(
        sys.executable, config=True,
        help="Python on the compute nodes that has jupyter_costguard installed (default: the "
        "server's, which a shared filesystem makes the same).")
    k8s_enabled = Bool(
        None, allow_none=True, config=True,
        help="Offer the Kubernetes backend (jobs with backend 'kubernetes'). None: when "
        "k8s_image is set.")
    k8s_namespace = Unicode("default", config=True, help="Namespace jobs are created in.")
    k8s_image = Unicode(
        None, allow_none=True, config=True,
        help="Container image for jobs: Python with ipykernel, jupyter_costguard and what the "
        "notebook imports (the notebook's own environment is not in the pod).")
    k8s_image_pull_policy = Unicode(None, allow_none=True, config=True,
                                    help="imagePullPolicy (None: the cluster's default).")
    k8s_image_pull_secrets = List(Unicode(), config=True, help="imagePullSecrets names.")
    k8s_service_account = Unicode(None, allow_none=True, config=True,
                                  help="Service account of the job's pod.")
    k8s_node_selector = Dict(config=True, help="nodeSelector of the job's pod.")
    k8s_tolerations = List(Dict(), config=True, help="Tolerations (raw V1Toleration dicts).")
    k8s_volumes = List(Dict(), config=True,
                       help="Extra volumes (raw V1Volume dicts): how a job reaches its data.")
    k8s_volume_mounts = List(Dict(), config=True, help="Mounts of k8s_volumes (V1VolumeMount).")
    k8s_env = Dict(config=True, help="Extra environment variables of the job's container.")
    k8s_env_from = List(Dict(), config=True,
                        help="envFrom sources (raw dicts), e.g. a Secret with storage keys.")
    k8s_labels = Dict(config=True, help="Extra labels of the Job and its pod.")
    k8s_annotations = Dict(config=True, help="Extra annotations of the Job and its pod.")
    k8s_priority_class = Unicode(None, allow_none=True, config=True,
                                 help="priorityClassName of the job's pod.")
    k8s_gpu_resource = Unicode("nvidia.com/gpu", config=True,
                               help="The extended resource GPUs are requested as.")
    k8s_ttl_seconds_after_finished = Int(
        3600, allow_none=True, config=True,
        help="Finished Jobs are deleted after this (None: kept).")
    k8s_storage_url = Unicode(
        None, allow_none=True, config=True,
        help="fsspec URL the server and pods share: big inputs, checkpoints, outputs and "
        "results (without it a job's outputs and results stay in its pod).")
    k8s_python = Unicode("python", config=True, help="Python in the image.")
    k8s_kubeconfig = Unicode(None, allow_none=True, config=True,
                             help="kubeconfig file (None: the default, or in-cluster config).")
    k8s_context = Unicode(None, allow_none=True, config=True, help="kubeconfig context.")
    k8s_in_cluster = Bool(None, allow_none=True, config=True,
                          help="Use the pod's service account (None: when in a pod).")
    k8s_sync_interval = Float(2.0, config=True,
                              help="Seconds between reads of a running job's state and log.")
    cluster_rates = Dict(
        config=True,
        help="What a cluster job's allocation costs, per backend, in the configured currency: "
        "{'slurm': {'gpu_per_hour': 2.5, 'cpu_per_hour': 0.04, 'memory_gib_per_hour': 0.005}}. "
        "A job's spend is the time its allocation was held times the rates of what it asked "
        "for. Without it cluster jobs show no spend (the server cannot sample them).")
    pushgateway_url = Unicode(
        None, allow_none=True, config=True,
        help="Prometheus Pushgateway jobs push their metrics to (it must be reachable from "
        "where jobs run).")

    # --- the guard (see README "Guard rules"); defaults are GuardConfig's ----------------
    guard_enabled = Bool(True, config=True, help="Run the guard's rules after each sample.")
    training_min_gpus = Int(4, config=True,
                            help="An instance with at least this many GPUs is training-sized.")
    training_min_gpu_memory_gib = Float(
        40.0, config=True, help="An instance with a GPU this large (GiB) is training-sized.")
    training_min_rate_per_hour = Float(
        10.0, allow_none=True, config=True,
        help="An instance at least this expensive per hour is training-sized (None: off).")
    interactive_window_seconds = Float(
        1800.0, config=True, help="Window over which interactive use is judged (seconds).")
    interactive_max_utilization_percent = Float(
        20.0, config=True, help="GPUs averaging below this over the window are idle.")
    interactive_min_coverage = Float(
        0.5, config=True, help="Judge interactive use once this share of the window is sampled.")
    suggest_same_provider = Bool(
        True, config=True, help="Suggest cheaper instances of the same provider only.")
    starved_min_busy_seconds = Float(
        120.0, config=True, help="A kernel must be busy this long before it can be starved.")
    starved_min_busy_share = Float(
        0.5, config=True, help="Share of busy time the GPU must wait to call it starved.")
    idle_kernel_seconds = Float(
        900.0, config=True, help="A kernel holding GPU memory idle this long raises an alert.")
    cull_idle_kernels = Bool(
        False, config=True, help="Shut idle GPU kernels down (after a warning). Opt-in.")
    cull_after_seconds = Float(
        3600.0, config=True, help="Idle time after which an idle GPU kernel is shut down.")
    cull_warning_seconds = Float(
        600.0, config=True, help="How long before a cull the warning comes (seconds).")
    notebook_budget = Float(
        None, allow_none=True, config=True,
        help="Budget per notebook (currency units); a notebook's metadata "
        "costguard.budget overrides it.")
    server_budget = Float(None, allow_none=True, config=True,
                          help="Budget for the whole server (currency units).")
    budget_warn_fraction = Float(0.8, config=True,
                                 help="Warn when this fraction of a budget is spent.")
    budget_enforce = Bool(
        False, config=True,
        help="At 100% of a budget, interrupt the notebook's kernels and refuse offloads.")
    auto_stop_idle_seconds = Float(
        None, allow_none=True, config=True,
        help="Stop after this long with nothing running and no activity (None: off).")
    auto_stop_countdown_seconds = Float(
        300.0, config=True, help="Countdown announced before auto-stop (cancellable).")
    shutdown_command = List(
        Unicode(), config=True,
        help="Command (argv) auto-stop runs, e.g. ['sudo', 'shutdown', '-h', 'now']; "
        "empty: stop the Jupyter server.")
    starved_window_seconds = Float(600.0, config=True,
                                   help="Window over which a starved GPU is judged.")
    starved_max_utilization_percent = Float(
        30.0, config=True, help="A busy kernel's GPU below this is waiting on data.")

    def guard_config(self) -> GuardConfig:
        names = {f.name for f in dataclasses.fields(GuardConfig)}
        values = {n: getattr(self, n) for n in names if self.has_trait(n)}
        values["shutdown_command"] = tuple(self.shutdown_command)
        return GuardConfig(**values)

    @default("db_path")
    def _default_db_path(self) -> str:
        return default_db_path()

    @default("jobs_dir")
    def _default_jobs_dir(self) -> str:
        return os.path.join(os.path.dirname(self.db_path), "jobs")

    service: CostService | None = None
    jobs: JobService | None = None

    @property
    def server(self) -> Any:
        """The ServerApp (always set once the extension is loaded)."""
        assert self.serverapp is not None
        return self.serverapp

    def _gpu_source(self) -> GpuSource:
        if self.replay_trace:
            replay = ReplaySource(self.replay_trace)
            if self.replay_mode == "always":
                return replay
            return FallbackSource(NvmlSource(), replay)
        return NvmlSource()

    def initialize_settings(self) -> None:
        telemetry = Telemetry(self._gpu_source())
        ledger = Ledger(self.db_path, retention_days=self.history_retention_days, now=time.time())
        self.service = CostService(
            telemetry,
            ledger,
            PricingConfig(
                instance_type=self.instance_type,
                hourly_rate=self.hourly_rate,
                market=self.market,
                currency=self.currency,
                gpu_share=self.gpu_share,
                catalog_files=tuple(self.catalog_files),
            ),
            sample_interval=self.sample_interval,
            idle_threshold_percent=self.idle_gpu_threshold_percent,
            environ=dict(os.environ),
            metrics_builder=metrics.build_metrics,
            logger=self.log,
        )
        service = self.service
        if self.guard_enabled:
            loop = getattr(self.serverapp, "io_loop", None) or IOLoop.current()
            self.actor = Actor(self.server.kernel_manager, self._stop_server,
                               loop.asyncio_loop)  # type: ignore[union-attr]
            config = self.guard_config()
            rules = default_rules(config, server_activity=terminal_activity(self.server),
                                  gpu_busy_percent=self.idle_gpu_threshold_percent)
            service.guard = Guard(config, rules, service.alerts, ledger, service.catalog,
                                  dispatch=self.actor.dispatch)
            service.guard.notebook_budgets = self._notebook_budgets()
        self.settings["costguard_service"] = self.service
        self.jobs = self._job_service(service, ledger) if self.offload_enabled else None
        jobs = self.jobs
        if jobs is not None and self.pushgateway_url:
            url = self.pushgateway_url

            def push(job: Any) -> None:
                gpu = job.record.get("gpu") or {}
                mean = gpu.get("mean_utilization_percent")
                push_finished_job(url, job, currency=service.published.pricing.currency,
                                  gpu_utilization_ratio=mean / 100 if mean is not None else None)

            jobs.listeners.append(push)
        metrics.install(lambda: service.published.metrics + (jobs.metrics() if jobs else []))
        self.settings["costguard_jobs"] = self.jobs
        if self.jobs is not None and service.guard is not None:
            service.guard.running_jobs = self.jobs.running_count
        self.log.info("costguard: ledger at %s, %s", self.db_path,
                      service.published.pricing.detail)
        # The server calls _start_jupyter_server_extension once its loop runs; embedders
        # that never run that hook (pytest-jupyter) still get sampling via this callback.
        loop = getattr(self.serverapp, "io_loop", None) or IOLoop.current()
        loop.add_callback(self._ensure_started)

    def _job_service(self, service: CostService, ledger: Ledger) -> JobService:
        jobs_dir = Path(self.jobs_dir)
        budget = next((r for r in (service.guard.rules if service.guard else [])
                       if isinstance(r, BudgetRule)), None)
        ksm = self.server.kernel_spec_manager
        default_kernel = getattr(self.server.kernel_manager, "default_kernel_name", None) \
            or "python3"
        root = getattr(self.server.contents_manager, "root_dir", None) or self.server.root_dir
        backends: dict[str, Backend] = {
            "local": LocalBackend(warm_dir=jobs_dir / "warm",
                                  warm_kernels=max(0, self.offload_warm_kernels),
                                  warm_kernel_name=default_kernel)}
        if self.slurm_enabled or (self.slurm_enabled is None and shutil.which("sbatch")):
            backends["slurm"] = SlurmBackend(
                partition=self.slurm_partition, account=self.slurm_account,
                extra_args=self.slurm_extra_args, signal_seconds=self.slurm_signal_seconds,
                python=self.slurm_python)
        if self.k8s_enabled or (self.k8s_enabled is None and self.k8s_image):
            backends["kubernetes"] = self._kubernetes_backend()
        return JobService(
            JobStore(jobs_dir / "jobs.sqlite"), jobs_dir, backends,
            Path(root), kernel_manager=self.server.kernel_manager,
            kernel_spec_names=lambda: set(ksm.find_kernel_specs()),
            job_spend=ledger.kernel_spend,
            currency=lambda: service.published.pricing.currency,
            budget_refuses=budget.refuses if budget is not None else (lambda path: None),
            gpu_picker=lambda n: pick_gpus(service.published.sample, n),
            defaults=Defaults(
                resources=Resources(time_limit_seconds=self.offload_time_limit_seconds),
                retries=self.offload_retries,
                retry_backoff_seconds=self.offload_retry_backoff_seconds,
                max_send_bytes=self.offload_max_send_bytes),
            pushgateway_url=self.pushgateway_url,
            local_capacity=self._local_capacity(service),
            cluster_rates=self.cluster_rates,
            gpu_usage=lambda kid: kernel_gpu_usage(service.published.sample, kid),
            poll_interval=self.offload_poll_interval,
        )

    def _local_capacity(self, service: CostService) -> Any:
        limit = self.offload_max_local_jobs

        def capacity() -> int:
            if limit is not None and limit > 0:
                return int(limit)
            sample = service.published.sample
            gpus = [g for g in sample.gpu.gpus if g.faulty is None] if sample else []
            return max(1, len(gpus))

        return capacity

    def _kubernetes_backend(self) -> Backend:
        from jupyter_costguard.offload.backends.kubernetes.backend import KubernetesBackend
        from jupyter_costguard.offload.backends.kubernetes.manifest import KubernetesSettings

        settings = KubernetesSettings(
            namespace=self.k8s_namespace, image=self.k8s_image,
            image_pull_policy=self.k8s_image_pull_policy,
            image_pull_secrets=tuple(self.k8s_image_pull_secrets),
            service_account=self.k8s_service_account, node_selector=dict(self.k8s_node_selector),
            tolerations=tuple(self.k8s_tolerations), volumes=tuple(self.k8s_volumes),
            volume_mounts=tuple(self.k8s_volume_mounts), env=dict(self.k8s_env),
            env_from=tuple(self.k8s_env_from), labels=dict(self.k8s_labels),
            annotations=dict(self.k8s_annotations), priority_class=self.k8s_priority_class,
            gpu_resource=self.k8s_gpu_resource,
            ttl_seconds_after_finished=self.k8s_ttl_seconds_after_finished,
            storage_url=self.k8s_storage_url, python=self.k8s_python)
        return KubernetesBackend(settings, kubeconfig=self.k8s_kubeconfig,
                                 context=self.k8s_context, in_cluster=self.k8s_in_cluster,
                                 sync_interval=self.k8s_sync_interval)

    def _notebook_budgets(self) -> Any:
        """Per-notebook budget overrides from notebook metadata (`costguard.budget`), read
        on the sampler thread relative to the contents root (see guard/budget.py)."""
        from jupyter_costguard.guard.budget import NotebookBudgets

        root = getattr(self.server.contents_manager, "root_dir", None) or self.server.root_dir
        return NotebookBudgets(root, logger=self.log)

    def _stop_server(self) -> None:
        """Auto-stop without a shutdown command: stop this Jupyter server."""
        self.log.warning("costguard: auto-stop: stopping the Jupyter server")
        self.server.stop(from_signal=True)

    def _ensure_started(self) -> None:
        if self.service is not None and self.enabled and not self.service.running:
            self.service.start(self._gather)
        if self.jobs is not None:
            self.jobs.start()

    def initialize_handlers(self) -> None:
        # Registered outside the extension's own namespace so the routes are exactly
        # {base_url}costguard/api/...
        self.server.web_app.add_handlers(".*$", api.handlers(self.server.base_url))

    async def _start_jupyter_server_extension(self, serverapp: Any) -> None:
        self._ensure_started()

    async def _gather(self) -> list[KernelInfo]:
        """Kernel facts from the kernel and session managers: attribute reads, no messages."""
        km = self.server.kernel_manager
        paths: dict[str, str] = {}
        sm = self.server.session_manager
        try:
            rows = sm.cursor.execute("SELECT kernel_id, path FROM session").fetchall()
            paths = {kid: path for kid, path in rows if kid}
        except Exception:
            paths = {}
        infos = []
        for kid in list(km.list_kernel_ids()):
            try:
                kernel = km.get_kernel(kid)
            except KeyError:
                continue
            provisioner = getattr(kernel, "provisioner", None)
            pid = getattr(provisioner, "pid", None)
            last = getattr(kernel, "last_activity", None)
            infos.append(KernelInfo(
                kernel_id=kid,
                name=getattr(kernel, "kernel_name", "") or "",
                pid=pid if isinstance(pid, int) else None,
                execution_state=getattr(kernel, "execution_state", "unknown") or "unknown",
                last_activity=last.timestamp() if last is not None else time.time(),
                connections=int(getattr(km, "_kernel_connections", {}).get(kid, 0)),
                path=paths.get(kid),
            ))
        if self.jobs is not None:
            infos += self.jobs.running_kernels()
        return infos

    async def stop_extension(self) -> None:
        if self.jobs is not None:
            await self.jobs.stop()
            self.jobs.close()
        if self.service is not None:
            await self.service.stop()
            metrics.install(None)
