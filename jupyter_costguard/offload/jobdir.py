"""The job directory: the one contract between the server, the runner, every backend and the
code inside a job's kernel.

A job is a directory. The server writes the spec (and any sent variables) into it; the runner,
wherever a backend starts it, reads those and writes its status, log, outputs and results back;
the server only ever reads what the runner wrote. Everything that crosses that line is named
here, and nowhere else: the file names, the environment variables a job's processes see, the
command that starts the runner, the runner's status record and the atomic JSON helpers both
sides use. Standard library only: the runner and the kernel-side helpers import it inside
jobs, where nothing else of the server is needed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
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
#: where checkpoints go when the job names no location (a directory in the job's)
CHECKPOINTS = "checkpoints"
#: what a job leaves for the server to fetch back (the Kubernetes backend copies these)
OUTPUT_FILES = (OUTPUTS, RESULTS_INDEX, RESULTS, ENVIRONMENT)
#: the Slurm backend's batch script, and Slurm's own output file (``%j``: Slurm's job id)
SLURM_SCRIPT = "job.sbatch"
SLURM_OUTPUT = "slurm-%j.out"
#: a warm runner's directory holds its own `STATUS` (state "ready" once its kernel runs) and,
#: once the server hands it a job, this: ``{"job_dir": ...}``
WARM_ASSIGNMENT = "assign.json"
WARM_READY = "ready"

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
#: where a Kubernetes pod's entry point leaves the runner's final status (tests move it)
ENV_TERMINATION_LOG = "COSTGUARD_TERMINATION_LOG"

# --- starting the runner --------------------------------------------------------------------
#: ``python -m RUNNER_MODULE JOB_DIR`` runs a job; a live runner's command line names it
RUNNER_MODULE = "jupyter_costguard.offload.runner"
#: ``python -m RUNNER_MODULE --warm DIR KERNEL SERVER_PID`` starts a kernel and waits for a job
WARM_FLAG = "--warm"


def runner_command(job_dir: Path | str, python: str = sys.executable) -> list[str]:
    """The command every backend starts a job's runner with (a pod's entry point too)."""
    return [python, "-m", RUNNER_MODULE, str(job_dir)]


def warm_command(warm_dir: Path, kernel_name: str, server_pid: int) -> list[str]:
    """The command of a warm runner (the local backend's pool)."""
    return [sys.executable, "-m", RUNNER_MODULE, WARM_FLAG, str(warm_dir), kernel_name,
            str(server_pid)]


def slurm_output(ref: str) -> str:
    """The name of Slurm's output file of job `ref` (`SLURM_OUTPUT` as Slurm expands it)."""
    return SLURM_OUTPUT.replace("%j", ref)


# --- files, written atomically -----------------------------------------------------------------


def write_bytes(path: Path, data: bytes) -> None:
    """Write `data` so a reader sees the old file or the new one, never half of one."""
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_json(path: Path, doc: Any) -> None:
    """`doc` as JSON, atomically (`write_bytes`)."""
    write_bytes(path, json.dumps(doc).encode())


def read_json(path: Path) -> Any:
    """The file's JSON, or None when it is missing or not (yet) JSON."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def read_object(path: Path) -> dict[str, Any]:
    """The file's JSON object; empty when it is missing, not (yet) JSON, or not an object."""
    doc = read_json(path)
    return doc if isinstance(doc, dict) else {}


def log_line(text: str) -> str:
    """One of costguard's own lines in a job's log (the runner's, a backend's)."""
    return f"[costguard {time.strftime('%H:%M:%S')}] {text}\n"


def say(job_dir: Path, text: str) -> None:
    """Append `log_line(text)` to the job's log; a log that cannot be written loses the line,
    never the job."""
    try:
        with open(job_dir / LOG, "a", encoding="utf-8") as f:
            f.write(log_line(text))
    except OSError:
        pass


# --- the runner's status ------------------------------------------------------------------------


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _optional(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda value: value is None or check(value)


#: what each field of `STATUS` must hold; a file where one does not is not read at all
_CHECKS: dict[str, Callable[[Any], bool]] = {
    "state": lambda v: isinstance(v, str),
    "phase": lambda v: isinstance(v, str),
    "attempt": _is_int,
    "attempts": lambda v: isinstance(v, list) and all(isinstance(a, dict) for a in v),
    "phase_times": lambda v: isinstance(v, dict) and all(
        isinstance(k, str) and _is_number(t) for k, t in v.items()),
    "exit_reason": _optional(lambda v: isinstance(v, str)),
    "kernel_pid": _optional(_is_int),
    "runner_pid": _optional(_is_int),
    "restarts": _optional(_is_int),
    "updated": _optional(_is_number),
    "kubernetes": _optional(lambda v: isinstance(v, dict)),
}
#: a document without these is no runner's status
_REQUIRED = ("state", "phase")
#: written only when set
_OMITTED_WHEN_NONE = ("restarts", "kubernetes")


@dataclass
class RunnerStatus:
    """`STATUS`: what the runner (or a backend speaking for it) says about the job. The
    server's follower turns it into the stored `Job`; a requeued or relaunched runner resumes
    from it."""

    #: running, succeeded, failed, cancelled (a cluster backend also writes queued)
    state: str
    #: one of `spec.PHASES`
    phase: str
    #: attempts begun (1 + retries used); a requeue continues the same one
    attempt: int = 0
    #: one entry per attempt: attempt, start, end, outcome, reason (and a backend's notes)
    attempts: list[dict[str, Any]] = field(default_factory=list)
    #: phase -> when it began
    phase_times: dict[str, float] = field(default_factory=dict)
    exit_reason: str | None = None
    kernel_pid: int | None = None
    runner_pid: int | None = None
    #: how many times the scheduler requeued the job (set only where it may: Slurm)
    restarts: int | None = None
    updated: float | None = None
    #: the Kubernetes backend's view: the Job's name, why it waits, its pods
    kubernetes: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        doc = dataclasses.asdict(self)
        for name in _OMITTED_WHEN_NONE:
            if doc[name] is None:
                del doc[name]
        return doc

    @classmethod
    def from_json(cls, doc: Any) -> RunnerStatus | None:
        """None for anything that is not a status the runner could have written: not an
        object, no state or phase, or a field of the wrong type (``"attempt": "x"``): such a
        file is treated as one not written yet, never trusted in part."""
        if not isinstance(doc, dict) or any(name not in doc for name in _REQUIRED):
            return None
        values = {name: doc[name] for name in _CHECKS if name in doc}
        if not all(_CHECKS[name](value) for name, value in values.items()):
            return None
        status = cls(**values)
        status.attempts = [dict(a) for a in status.attempts]
        status.phase_times = dict(status.phase_times)
        return status


def read_status(job_dir: Path) -> RunnerStatus | None:
    """The job's `STATUS`; None when it is missing, half written or not a status."""
    return RunnerStatus.from_json(read_json(job_dir / STATUS))


def write_status(job_dir: Path, status: RunnerStatus) -> None:
    write_json(job_dir / STATUS, status.to_json())
