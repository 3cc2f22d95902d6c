"""Batch jobs' options (`c.CostGuard.<name>`): the job store, the local backend, Slurm, what
cluster time costs, and the Pushgateway. The Kubernetes options sit beside that backend."""

from __future__ import annotations

import os
import sys

from traitlets import Bool, Dict, Float, HasTraits, Int, List, Unicode, default


class OffloadTraits(HasTraits):
    """Mixed into the server extension; the job service is built from these."""

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

    @default("jobs_dir")
    def _default_jobs_dir(self) -> str:
        return os.path.join(os.path.dirname(self.db_path), "jobs")  # type: ignore[attr-defined]


class SlurmTraits(HasTraits):
    """The Slurm backend's options."""

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
