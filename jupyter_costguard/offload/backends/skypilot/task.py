"""What one offloaded job is to SkyPilot, and what SkyPilot's answers mean for the job.

Plain data, built and read without SkyPilot installed (so it can be tested anywhere): the task
is the dict SkyPilot's task YAML holds (`sky.Task.from_yaml_config` turns it into a task), and
a managed job's record is the dict `sky.jobs.queue_v2` answers with.

The task: the job's input (its spec file, rewritten for the remote machine, and the pickled
sent variables) is a file mount of a staging directory; its ``run`` is the remote entry point
(`remote`), which runs the same job runner the local backend runs and keeps the job's status,
log and outputs in object storage (`SkyPilotSettings.storage_url`) for the server to read;
resources come from the job (GPUs, CPUs, memory) and the settings (accelerator type, spot or
on-demand, which clouds and regions). SkyPilot recovers a preempted spot job by launching the
task again elsewhere; the remote entry point finds the job's status in object storage and the
runner continues the interrupted attempt from the latest checkpoint (kept there too).
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jupyter_costguard.offload import jobdir
from jupyter_costguard.offload.backends import remotecopy
from jupyter_costguard.offload.backends.remotecopy import remote_spec
from jupyter_costguard.offload.spec import Job

#: the remote entry point
REMOTE_MODULE = "jupyter_costguard.offload.backends.skypilot.remote"
#: where the job's input is mounted on the remote machine (relative to the remote home)
INPUT_MOUNT = "~/.costguard/job-{id}/input"
#: the runner's directory on the remote machine
WORK_DIR = "~/.costguard/job-{id}/work"

#: SkyPilot's managed-job statuses in which the job may still run
ACTIVE = frozenset({"PENDING", "SUBMITTED", "STARTING", "RUNNING", "WINDING_DOWN",
                    "RECOVERING", "CANCELLING"})
#: the end statuses the runner cannot report itself, and what they mean for the user
ENDED_REASONS = {
    "FAILED": "the job's task failed on its machine",
    "FAILED_SETUP": "the task's setup failed on its machine (c.SkyPilotBackend.setup)",
    "FAILED_PRECHECKS": "SkyPilot could not launch the job: no cloud, region or instance "
                        "fits what it asks for (or a precheck failed)",
    "FAILED_NO_RESOURCE": "SkyPilot found no capacity for the job in the allowed clouds and "
                          "regions",
    "FAILED_CONTROLLER": "SkyPilot's managed-jobs controller failed",
    "CANCELLED": "cancelled in SkyPilot",
}
#: SkyPilot statuses in which the runner's last status is stale, and what the job is then:
#: (state, phase). Only a recovery: while SkyPilot says PENDING or STARTING the runner may
#: already have started and reported (SkyPilot's status lags), and its word stands.
WAITING = {"RECOVERING": ("running", "queued")}


class TaskError(ValueError):
    """The job cannot become a SkyPilot task; the message says what to change."""


@dataclass(frozen=True)
class SkyPilotSettings:
    """What the admin configures (``c.SkyPilotBackend``); the job brings its sizes."""

    #: accelerator type for a job that asks for GPUs (``A100``, ``H100``, ``L4``, ...): SkyPilot
    #: picks the cheapest cloud and region that has it
    accelerator: str = "A100"
    #: spot (preemptible) capacity; SkyPilot recovers the job when it is preempted
    use_spot: bool = True
    #: allowed places, as SkyPilot's ``infra`` (``aws``, ``gcp/us-central1``, ``slurm``);
    #: empty: any cloud enabled in SkyPilot's config
    infra: Sequence[str] = ()
    #: the most an hour of the chosen instance may cost (None: no cap); checked against the
    #: optimizer's choice before the job is launched
    max_price_per_hour: float | None = None
    #: fsspec URL the server and the remote machines both reach: the job's status, log,
    #: outputs, results and checkpoints (without it nothing comes back but SkyPilot's state)
    storage_url: str | None = None
    #: the remote machine's Python with jupyter_costguard installed (after `setup`)
    python: str = "python3"
    #: commands run on the remote machine before the job (install jupyter_costguard and what
    #: the notebook imports); None: none
    setup: str | None = None
    #: more of SkyPilot's task YAML merged into ``resources`` (``disk_size``, ``image_id``)
    extra_resources: Mapping[str, Any] = field(default_factory=dict)
    #: more environment of the task
    env: Mapping[str, str] = field(default_factory=dict)
    #: how SkyPilot recovers a preempted job (``EAGER_NEXT_REGION``, ``FAILOVER``)
    recovery_strategy: str | None = None


def job_name(job: Job) -> str:
    """The managed job's name: lower-case letters, digits and dashes, as every cloud takes."""
    return f"costguard-job-{job.id}"


def storage_prefix(settings: SkyPilotSettings, job: Job) -> str | None:
    """Where the job's files live in object storage: ``<storage_url>/job-<id>``."""
    return remotecopy.storage_prefix(settings.storage_url, job)


def remote_spec_doc(spec_doc: Mapping[str, Any], job: Job,
                    settings: SkyPilotSettings) -> dict[str, Any]:
    """The remote machine's copy of the job's spec file: its own paths (the notebook's
    directory does not exist there), no GPU picked among the server's, and checkpoints in
    object storage so that a recovered job on another machine resumes from them."""
    # without storage, checkpoints live as long as the machine: a recovery starts over
    return remote_spec(spec_doc, job, WORK_DIR.format(id=job.id), storage_prefix(settings, job))


def accelerators(job: Job, settings: SkyPilotSettings) -> str | None:
    """``A100:2`` for a job that asks for 2 GPUs; None for one that asks for none."""
    gpus = job.spec.resources.gpus
    if not gpus:
        return None
    if not settings.accelerator:
        raise TaskError("the job asks for GPUs but c.SkyPilotBackend.accelerator is empty")
    return f"{settings.accelerator}:{gpus}"


def resources(job: Job, settings: SkyPilotSettings) -> dict[str, Any]:
    """The task's ``resources``: at least the CPUs and memory the job asks for (``4+``), its
    GPUs as the configured accelerator, spot or not, and the allowed places (``any_of`` when
    more than one)."""
    r = job.spec.resources
    doc: dict[str, Any] = {"use_spot": bool(settings.use_spot)}
    acc = accelerators(job, settings)
    if acc is not None:
        doc["accelerators"] = acc
    if r.cpus is not None:
        doc["cpus"] = f"{math.ceil(r.cpus)}+"
    if r.memory_gib is not None:
        doc["memory"] = f"{math.ceil(r.memory_gib)}+"
    recovery: dict[str, Any] = {"max_restarts_on_errors": 0}  # the runner retries failures
    if settings.recovery_strategy:
        recovery["strategy"] = settings.recovery_strategy
    doc["job_recovery"] = recovery
    for key, value in settings.extra_resources.items():
        doc[str(key)] = value
    places = [p for p in settings.infra if p]
    if len(places) == 1:
        doc["infra"] = places[0]
    elif places:
        doc["any_of"] = [{"infra": p} for p in places]
    return doc


def run_command(job: Job, settings: SkyPilotSettings) -> str:
    """The task's ``run``: the remote entry point, exec'd so that SkyPilot's signals reach it."""
    args = [settings.python, "-m", REMOTE_MODULE, INPUT_MOUNT.format(id=job.id),
            WORK_DIR.format(id=job.id), storage_prefix(settings, job) or ""]
    # ~ must expand on the remote machine: the two paths are left unquoted there
    quoted = [a if a.startswith("~/") and _plain(a) else shlex.quote(a) for a in args]
    return "exec " + " ".join(quoted)


def _plain(text: str) -> bool:
    return all(c.isalnum() or c in "~/._-" for c in text)


def task_config(job: Job, settings: SkyPilotSettings, staging_dir: str) -> dict[str, Any]:
    """The SkyPilot task (its YAML as a dict) for `job`, whose input is in `staging_dir`."""
    envs = {str(k): str(v) for k, v in settings.env.items()}
    envs[jobdir.ENV_JOB_ID] = str(job.id)
    doc: dict[str, Any] = {
        "name": job_name(job),
        "resources": resources(job, settings),
        "envs": envs,
        "file_mounts": {INPUT_MOUNT.format(id=job.id): staging_dir},
        "run": run_command(job, settings),
    }
    if settings.setup:
        doc["setup"] = settings.setup
    return doc


@dataclass(frozen=True)
class ManagedJob:
    """What SkyPilot says about one managed job (a record of ``sky.jobs.queue_v2``)."""

    job_id: int
    status: str
    recovery_count: int = 0
    failure_reason: str | None = None
    cloud: str | None = None
    region: str | None = None
    cluster_resources: str | None = None
    start_at: float | None = None
    end_at: float | None = None

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    @property
    def where(self) -> str | None:
        """"aws us-east-1, 1x(gpus=A100:1, ...)": where it runs, as far as SkyPilot says."""
        parts = [p for p in (self.cloud, self.region, self.cluster_resources)
                 if p and p != "-"]
        return ", ".join(parts) or None


def parse_record(record: Mapping[str, Any]) -> ManagedJob | None:
    """A queue record (a dict, or SkyPilot's pydantic model dumped) as a `ManagedJob`."""
    job_id = record.get("job_id")
    status = record.get("status")
    if job_id is None or status is None:
        return None
    status = str(getattr(status, "value", status))
    if status.startswith("ManagedJobStatus."):
        status = status.split(".", 1)[1]

    def text(key: str) -> str | None:
        value = record.get(key)
        return str(value) if value not in (None, "") else None

    def number(key: str) -> float | None:
        value = record.get(key)
        return float(value) if isinstance(value, (int, float)) and value > 0 else None

    return ManagedJob(job_id=int(job_id), status=status,
                      recovery_count=int(record.get("recovery_count") or 0),
                      failure_reason=text("failure_reason"), cloud=text("cloud"),
                      region=text("region"), cluster_resources=text("cluster_resources"),
                      start_at=number("start_at"), end_at=number("end_at"))


def ended_as(info: ManagedJob, cancel_asked: bool, storage: bool) -> tuple[str, str | None]:
    """(state, reason) of a job SkyPilot says has ended when its runner did not say how
    (`storage`: whether it could have, through object storage)."""
    if info.status == "SUCCEEDED" and not storage:
        return "succeeded", None
    if info.status == "SUCCEEDED":
        return "failed", ("SkyPilot says the job succeeded, but its runner's final status "
                          "never arrived (is c.SkyPilotBackend.storage_url reachable from "
                          "the remote machine?)")
    if info.status == "CANCELLED":
        return "cancelled", "cancelled by the user" if cancel_asked else ENDED_REASONS[
            "CANCELLED"]
    reason = ENDED_REASONS.get(info.status, f"the SkyPilot job ended {info.status}")
    if info.failure_reason:
        reason = f"{reason}: {info.failure_reason}"
    return "failed", f"{reason} (SkyPilot managed job {info.job_id}: {info.status})"


def waiting_as(info: ManagedJob) -> tuple[str, str] | None:
    """(state, phase) for a job SkyPilot is recovering (its machine is gone), else None."""
    return WAITING.get(info.status)


def price_refusal(hourly: float | None, cap: float | None, choice: str) -> str | None:
    """Why the optimizer's choice is refused under the price cap, or None."""
    if cap is None or hourly is None or hourly <= cap:
        return None
    return (f"the cheapest place SkyPilot found ({choice}) costs {hourly:.4g} per hour, above "
            f"the cap of {cap:.4g} (c.SkyPilotBackend.max_price_per_hour)")
