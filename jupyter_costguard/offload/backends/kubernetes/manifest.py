"""The Kubernetes objects one offloaded job becomes: a ConfigMap with its input and a Job.

Plain dicts, built without the Kubernetes client (so they can be built, inspected and tested
anywhere); `backend` sends them through the official client, and the tests hold them to
the API schema shipped with that client. Targets Kubernetes >= 1.26 (`podFailurePolicy` is beta
and on by default from 1.26, GA in 1.31).

The pod shares no filesystem with the server, so the runner's input (the spec and the
pickled sent variables) travels in a ConfigMap mounted read-only at `KubernetesSettings.job_mount`
and is copied into a writable emptyDir (`work_dir`), where the runner runs as it does locally.
The notebook's directory does not exist in the pod: the job's working directory is `work_dir`,
and data must come from the image, object storage or a volume the admin mounts.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import secrets
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jupyter_costguard.offload import jobdir
from jupyter_costguard.offload.backends import remotecopy
from jupyter_costguard.offload.backends.remotecopy import DROPPED_ENVIRONMENT, remote_spec
from jupyter_costguard.offload.spec import Job

MANAGED_BY = "jupyter-costguard"
CONTAINER = "runner"
#: the pod-side entry point (copies the input, runs the runner, streams its log to stdout)
POD_MODULE = "jupyter_costguard.offload.backends.kubernetes.pod"
#: what a ConfigMap may carry in total (the API server refuses more than 1 MiB; keep headroom
#: for the object's metadata)
MAX_CONFIGMAP_BYTES = 1_000_000
#: exit code of the runner when it cannot read its spec: retrying will not help
EXIT_USAGE = 2

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


class ManifestError(ValueError):
    """The job cannot become Kubernetes objects; the message says what to change."""


@dataclass(frozen=True)
class KubernetesSettings:
    """What the admin configures (``c.KubernetesBackend``); the job brings its resources."""

    namespace: str = "default"
    #: the container image: it must have Python, ipykernel and jupyter_costguard installed
    image: str | None = None
    image_pull_policy: str | None = None
    image_pull_secrets: Sequence[str] = ()
    service_account: str | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    #: raw `V1Toleration` dicts, e.g. ``{"key": "nvidia.com/gpu", "operator": "Exists",
    #: "effect": "NoSchedule"}``
    tolerations: Sequence[Mapping[str, Any]] = ()
    #: raw `V1Volume` / `V1VolumeMount` dicts: how a job reaches data (a PVC, a CSI bucket)
    volumes: Sequence[Mapping[str, Any]] = ()
    volume_mounts: Sequence[Mapping[str, Any]] = ()
    #: extra environment for the job's container, and raw `V1EnvFromSource` dicts (a Secret
    #: with object-storage credentials)
    env: Mapping[str, str] = field(default_factory=dict)
    env_from: Sequence[Mapping[str, Any]] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    priority_class: str | None = None
    #: the extended resource GPUs are asked for by (``amd.com/gpu`` on AMD clusters)
    gpu_resource: str = "nvidia.com/gpu"
    #: finished Jobs (and their pods and ConfigMap) are deleted after this; None keeps them
    ttl_seconds_after_finished: int | None = 3600
    #: any fsspec URL both the server and the pods can reach: inputs too big for a ConfigMap,
    #: checkpoints that survive a pod, outputs and results brought back
    storage_url: str | None = None
    python: str = "python"
    job_mount: str = "/costguard/job"
    work_dir: str = "/costguard/work"
    max_configmap_bytes: int = MAX_CONFIGMAP_BYTES


def job_name(job: Job) -> str:
    """``costguard-job-<id>-<random>``: a relaunch never meets an old Job of the same id that
    Kubernetes has not deleted yet."""
    return f"costguard-job-{job.id}-{secrets.token_hex(3)}"


def label_value(text: str) -> str:
    """`text` itself when it is a valid label value, else a readable slug plus a hash (label
    values are at most 63 characters of [A-Za-z0-9-_.]); the annotations keep the original."""
    if len(text) <= 63 and _LABEL_VALUE.match(text):
        return text
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", text)[-52:].strip("-_.")
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    return f"{slug}-{digest}" if slug else digest


def storage_prefix(settings: KubernetesSettings, job: Job) -> str | None:
    return remotecopy.storage_prefix(settings.storage_url, job)


def outputs_url(prefix: str, name: str) -> str:
    """Where the pod puts the job's output files (`jobdir.OUTPUT_FILES`) for the server."""
    return f"{prefix}/{name}/out"


def labels(job: Job, settings: KubernetesSettings) -> dict[str, str]:
    doc = {str(k): str(v) for k, v in settings.labels.items()}
    doc.update({
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "app.kubernetes.io/component": "offload-job",
        "costguard/job-id": str(job.id),
        "costguard/notebook": label_value(job.spec.notebook),
    })
    user = job.record.get("submitted_by")
    if isinstance(user, str) and user:
        doc["costguard/user"] = label_value(user)
    return doc


def annotations_of(job: Job, settings: KubernetesSettings) -> dict[str, str]:
    doc = {str(k): str(v) for k, v in settings.annotations.items()}
    doc.update({"costguard/notebook": job.spec.notebook, "costguard/job-id": str(job.id),
                "costguard/server": socket.gethostname()})
    user = job.record.get("submitted_by")
    if isinstance(user, str) and user:
        doc["costguard/user"] = user
    return doc


def pod_spec_doc(spec_doc: Mapping[str, Any], job: Job, settings: KubernetesSettings,
                 name: str) -> dict[str, Any]:
    """The pod's copy of the job's spec file: paths the pod has, one attempt per pod (Kubernetes
    retries pods: ``backoffLimit``), and no GPU selection made on the server's GPUs."""
    prefix = storage_prefix(settings, job)
    # without storage, checkpoints live as long as the pod: a retry in a new pod starts over
    doc = remote_spec(spec_doc, job, settings.work_dir, prefix)
    doc["spec"]["retries"] = 0
    doc["kubernetes"] = {"job": name,
                         "outputs_url": outputs_url(prefix, name) if prefix else None,
                         "inputs_url": None}
    return doc


def configmap(job: Job, settings: KubernetesSettings, name: str, pod_doc: Mapping[str, Any],
              inputs: bytes | None) -> dict[str, Any]:
    """The job's input; `inputs` is None when there is none or it went to object storage."""
    text = json.dumps(pod_doc)
    size = len(text.encode()) + (len(inputs) if inputs is not None else 0)
    if size > settings.max_configmap_bytes:
        raise ManifestError(
            f"the job's input is {size / 2**20:.1f} MiB; a ConfigMap carries at most "
            f"{settings.max_configmap_bytes / 2**20:.1f} MiB. Send less (or recompute it in the "
            "job), or set c.KubernetesBackend.storage_url to object storage the server and the "
            "pods both reach")
    doc: dict[str, Any] = {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": settings.namespace,
                     "labels": labels(job, settings),
                     "annotations": annotations_of(job, settings)},
        "immutable": True,
        "data": {jobdir.SPEC: text},
    }
    if inputs is not None:
        doc["binaryData"] = {jobdir.INPUTS: base64.b64encode(inputs).decode("ascii")}
    return doc


def _cpu(cpus: float) -> str:
    return str(int(cpus)) if float(cpus).is_integer() else f"{math.ceil(cpus * 1000)}m"


def resources(job: Job, settings: KubernetesSettings) -> dict[str, Any]:
    """Requests for CPU and memory (memory also its limit: a pod over it is OOM-killed rather
    than starving its node), the GPUs as a limit of the extended resource."""
    res = job.spec.resources
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    if res.cpus is not None:
        requests["cpu"] = _cpu(res.cpus)
    if res.memory_gib is not None:
        requests["memory"] = limits["memory"] = f"{math.ceil(res.memory_gib * 1024)}Mi"
    if res.gpus:
        limits[settings.gpu_resource] = str(res.gpus)
    doc: dict[str, Any] = {}
    if requests:
        doc["requests"] = requests
    if limits:
        doc["limits"] = limits
    return doc


def pod_failure_policy() -> dict[str, Any]:
    """Preemption, eviction, node drain (the pod's DisruptionTarget condition) are not the
    job's fault and do not use up its retries; a runner that cannot read its spec fails the
    job at once."""
    return {"rules": [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        {"action": "FailJob", "onExitCodes": {"containerName": CONTAINER, "operator": "In",
                                              "values": [EXIT_USAGE]}},
    ]}


def job_manifest(job: Job, settings: KubernetesSettings, name: str,
                 environment: Mapping[str, str] = {}) -> dict[str, Any]:
    if not settings.image:
        raise ManifestError(
            "the Kubernetes backend needs a container image for its jobs (the notebook's "
            "environment does not exist in a pod): set c.KubernetesBackend.image to an image with "
            "Python, ipykernel and jupyter_costguard installed")
    meta_labels = labels(job, settings)
    env = [{"name": str(k), "value": str(v)} for k, v in settings.env.items()]
    env += [{"name": k, "value": v} for k, v in environment.items()
            if k not in DROPPED_ENVIRONMENT]
    env += [{"name": "PYTHONUNBUFFERED", "value": "1"},
            {"name": jobdir.ENV_JOB_ID, "value": str(job.id)}]
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": settings.image,
        "command": [settings.python, "-m", POD_MODULE, "pod", settings.job_mount,
                    settings.work_dir],
        "workingDir": settings.work_dir,
        "env": env,
        "volumeMounts": [{"name": "costguard-job", "mountPath": settings.job_mount,
                          "readOnly": True},
                         {"name": "costguard-work", "mountPath": settings.work_dir},
                         *[dict(m) for m in settings.volume_mounts]],
        # the runner's final status goes to /dev/termination-log; a runner that never got
        # that far leaves its last log lines there instead
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if settings.env_from:
        container["envFrom"] = [dict(e) for e in settings.env_from]
    if settings.image_pull_policy:
        container["imagePullPolicy"] = settings.image_pull_policy
    res = resources(job, settings)
    if res:
        container["resources"] = res
    pod: dict[str, Any] = {
        "restartPolicy": "Never",  # podFailurePolicy requires it; Kubernetes retries pods
        "containers": [container],
        "volumes": [{"name": "costguard-job", "configMap": {"name": name}},
                    {"name": "costguard-work", "emptyDir": {}},
                    *[dict(v) for v in settings.volumes]],
    }
    if settings.service_account:
        pod["serviceAccountName"] = settings.service_account
    if settings.node_selector:
        pod["nodeSelector"] = {str(k): str(v) for k, v in settings.node_selector.items()}
    if settings.tolerations:
        pod["tolerations"] = [dict(t) for t in settings.tolerations]
    if settings.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": s} for s in settings.image_pull_secrets]
    if settings.priority_class:
        pod["priorityClassName"] = settings.priority_class
    spec: dict[str, Any] = {
        "backoffLimit": job.spec.retries,
        "podFailurePolicy": pod_failure_policy(),
        "template": {"metadata": {"labels": dict(meta_labels)}, "spec": pod},
    }
    limit = job.spec.resources.time_limit_seconds
    if limit is not None:  # no limit asked for: none imposed, however long it waits
        spec["activeDeadlineSeconds"] = max(1, math.ceil(limit))
    if settings.ttl_seconds_after_finished is not None:
        spec["ttlSecondsAfterFinished"] = settings.ttl_seconds_after_finished
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": settings.namespace, "labels": meta_labels,
                     "annotations": annotations_of(job, settings)},
        "spec": spec,
    }
