"""The job directory: the one contract between the server, the runner, every backend and the
code inside a job's kernel.

A job is a directory. The server writes the spec (and any sent variables) into it; the runner,
wherever a backend starts it, reads those and writes its status, log, outputs and results back;
the server only ever reads what the runner wrote. Everything that crosses that line is named
here, and nowhere else: the file names, the environment variables a job's processes see, and
the atomic JSON helpers both sides use. Standard library only: the runner and the kernel-side
helpers import it inside jobs, where nothing else of the server is needed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

# --- files in a job directory ----------------------------------------------------------------
#: the job spec (`spec.JobSpec` as JSON), written by the server before the runner starts
SPEC = "spec.json"
#: pickled variables sent from the user's kernel (`state.send_variables`); optional
INPUTS = "inputs.pkl"
#: the runner's status (`RunnerStatus` fields), rewritten atomically as the job goes
STATUS = "status.json"
#: the job's output, streamed as it comes
LOG = "log.txt"
#: the executed cells' outputs, written at the end (nbformat outputs per cell)
OUTPUTS = "outputs.json"
#: the names the job brought back: index (JSON) and values (pickle)
RESULTS_INDEX = "results.json"
RESULTS = "results.pkl"
#: the job kernel's Python and package versions (the reproducibility record)
ENVIRONMENT = "env.json"
#: written by a backend's cancel: a SIGTERM that follows is the user's cancel
CANCEL = "cancel"
#: written by the kernel (its pid) when it handles SIGUSR1 (`checkpoint.enable_final_save`)
SIGNAL_OK = "signal-ok"
#: what a detached local runner printed before its log existed
RUNNER_OUT = "runner.out"
#: the Kubernetes backend's own notes (object names, log cursor)
K8S_STATE = "k8s.json"
#: where checkpoints are staged before an upload, when no staging directory is set
CHECKPOINT_STAGING = "checkpoint-staging"
#: what a job leaves for the server to fetch back (the Kubernetes backend copies these)
OUTPUT_FILES = (OUTPUTS, RESULTS_INDEX, RESULTS, ENVIRONMENT)

# --- environment of a job's processes -------------------------------------------------------
#: the job directory (runner, kernel)
ENV_JOB_DIR = "COSTGUARD_JOB_DIR"
#: the job's id in the server's store
ENV_JOB_ID = "COSTGUARD_JOB_ID"
#: which attempt this is (1 + retries used)
ENV_ATTEMPT = "COSTGUARD_JOB_ATTEMPT"
#: how many times the scheduler requeued this job; set only where SIGTERM may mean "requeued"
ENV_RESTART_COUNT = "COSTGUARD_RESTART_COUNT"
#: where `checkpoint.save` writes (a directory or an fsspec URL), and how many it keeps
ENV_CHECKPOINT_DIR = "COSTGUARD_CHECKPOINT_DIR"
ENV_CHECKPOINT_KEEP = "COSTGUARD_CHECKPOINT_KEEP"
ENV_CHECKPOINT_STAGING = "COSTGUARD_CHECKPOINT_STAGING"
#: the Pushgateway jobs push their metrics to
ENV_PUSHGATEWAY_URL = "COSTGUARD_PUSHGATEWAY_URL"
#: the server's jobs directory (the widget's `%costguard fetch` finds results there)
ENV_JOBS_DIR = "COSTGUARD_JOBS_DIR"


def write_json(path: Path, doc: Any) -> None:
    """Write `doc` so a reader sees the old file or the new one, never half of one."""
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    """The file's JSON, or None when it is missing or not (yet) JSON."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
