"""The job's spec as a machine other than the server runs it (a Kubernetes pod, a machine
SkyPilot launched): shared by the backends whose runner runs elsewhere.

That machine has its own paths, its own GPUs (none picked among the server's) and, when the
site gives object storage, keeps checkpoints there so that a new pod or machine resumes from
them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from jupyter_costguard.offload import jobdir
from jupyter_costguard.offload.spec import Job

#: environment the server picks for local jobs that means nothing on another machine (a
#: pod's GPUs are chosen by the device plugin, a launched machine's are all the job's)
DROPPED_ENVIRONMENT = frozenset({"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"})


def storage_prefix(storage_url: str | None, job: Job) -> str | None:
    """Where the job's files live in object storage: ``<storage_url>/job-<id>``."""
    if not storage_url:
        return None
    return f"{storage_url.rstrip('/')}/job-{job.id}"


def remote_spec(spec_doc: Mapping[str, Any], job: Job, work_dir: str,
                prefix: str | None) -> dict[str, Any]:
    """A copy of the job's spec file for that machine: `work_dir` as its folder, no GPU
    environment of the server's, and checkpoints where the job asked, else under `prefix`
    in object storage, else in `work_dir` (they live as long as that machine)."""
    doc: dict[str, Any] = json.loads(json.dumps(spec_doc))
    doc["spec"]["cwd"] = work_dir
    doc["environment"] = {k: v for k, v in dict(doc.get("environment") or {}).items()
                          if k not in DROPPED_ENVIRONMENT}
    if job.spec.checkpoint_location:
        doc["checkpoint_dir"] = job.spec.checkpoint_location
    elif prefix:
        doc["checkpoint_dir"] = f"{prefix}/{jobdir.CHECKPOINTS}"
    else:
        doc["checkpoint_dir"] = f"{work_dir}/{jobdir.CHECKPOINTS}"
    return doc
