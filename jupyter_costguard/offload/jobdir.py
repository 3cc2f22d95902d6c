"""The job directory: the one contract between the server, the runner, every backend and the
code inside a job's kernel.

A job is a directory. The server writes the spec (and any sent variables) into it; the runner,
wherever a backend starts it, reads those and writes its status, log, outputs and results back;
the server only ever reads what the runner wrote. Everything that crosses that line is named
here, and nowhere else: the file names, the environment variables a job's processes see, the
command that starts the runner, the runner's status record and the atomic JSON helpers both
sides use. Standard library only (and `common.files`): the runner and the kernel-side
helpers import it inside jobs, where nothing else of the server is needed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import stat
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_costguard.common.files import PRIVATE_DIR as PRIVATE_DIR
from jupyter_costguard.common.files import PRIVATE_FILE as PRIVATE_FILE
from jupyter_costguard.common.files import open_private as open_private
from jupyter_costguard.common.files import write_bytes as write_bytes

# --- files in a job directory ----------------------------------------------------------------
#: the server's jobs database, in the jobs directory beside the job directories
JOBS_DB = "jobs.sqlite"
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

# --- what a server tells the kernels it starts ------------------------------------------------
#: a server's note beside its kernels' connection files (its runtime directory), named for its
#: process, a local kernel's parent: which jobs directory it keeps, so `%costguard fetch` in
#: any of its kernels reads the same one the server writes
SERVER_INFO = "costguard-server-{pid}.json"


def write_server_info(runtime_dir: Path | str, jobs_dir: Path | str,
                      pid: int | None = None) -> Path:
    """The note of this server (`pid`: its process) in `runtime_dir`, replaced whole."""
    path = Path(runtime_dir) / SERVER_INFO.format(pid=os.getpid() if pid is None else pid)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes(path, json.dumps({"jobs_dir": str(jobs_dir)}).encode())  # atomic, 0600
    return path


def server_jobs_dir(runtime_dir: Path | str, pid: int) -> str | None:
    """The jobs directory the server of process `pid` noted in `runtime_dir` (None: no note,
    or one that cannot be read)."""
    try:
        doc = json.loads((Path(runtime_dir) / SERVER_INFO.format(pid=pid)).read_text())
    except (OSError, ValueError):
        return None
    found = doc.get("jobs_dir") if isinstance(doc, dict) else None
    return found if isinstance(found, str) and found else None


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


# every file costguard writes into a job directory, and every directory it makes there, is
# private (`common.files`: PRIVATE_FILE, PRIVATE_DIR, open_private, write_bytes)


def private_dir(path: Path) -> Path:
    """`path` (and missing parents) as a directory only its owner may enter: 0700 whatever the
    umask (mkdir's mode is masked, so the mode is set again)."""
    path.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    os.chmod(path, PRIVATE_DIR)
    return path


def sha256_file(path: Path | str) -> str:
    """The file's sha256, hex (the digest costguard records of the pickles it hands on)."""
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):  # a FIFO would block the reader
            raise OSError(f"{path} is not a regular file")
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def unsafe_location(path: Path | str) -> str | None:
    """Why a pickle at `path` must not be loaded (its file or directory is not the current
    user's, or group or others may write to it); None when it may be."""
    for p in (os.path.dirname(os.path.abspath(path)), str(path)):
        st = os.stat(p)
        if st.st_uid != os.getuid():
            return f"{p} is not owned by the current user"
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return f"{p} is writable by group or others"
    return None


def write_json(path: Path, doc: Any) -> None:
    """`doc` as JSON, atomically (`write_bytes`)."""
    write_bytes(path, json.dumps(doc).encode())


#: the largest JSON file read back from a job directory (outputs may hold images)
MAX_JSON_BYTES = 64 << 20


def read_regular(path: Path, limit: int) -> bytes | None:
    """The bytes of `path` if it is a regular file (not a link, a FIFO that would block the
    reader, a device) of at most `limit` bytes; None otherwise or when it cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        with os.fdopen(fd, "rb") as f:
            fd = -1
            data = f.read(limit + 1)
    except OSError:
        return None
    finally:
        if fd >= 0:
            os.close(fd)
    return data if len(data) <= limit else None


def read_json(path: Path, limit: int = MAX_JSON_BYTES) -> Any:
    """The file's JSON, or None when it is missing, not (yet) JSON, or no regular file of at
    most `limit` bytes (`read_regular`)."""
    data = read_regular(path, limit)
    if data is None:
        return None
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
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
        with os.fdopen(open_private(job_dir / LOG), "a", encoding="utf-8") as f:
            f.write(log_line(text))
    except OSError:
        pass


# --- the runner's status ------------------------------------------------------------------------


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)


#: Job states. `queued` until a backend starts it; `lost` when its runner vanished without
#: saying how it ended and no retry was left. The runner's status names them too, so they
#: are defined here, on the job directory's side of the line (`spec` re-exports them).
STATES = ("queued", "running", "succeeded", "failed", "cancelled", "lost")
TERMINAL = frozenset({"succeeded", "failed", "cancelled", "lost"})
#: Timeline phases: queued (waiting for a backend), starting (runner and kernel coming up),
#: running (cells executing), finishing (results and outputs being written), done.
PHASES = ("queued", "starting", "running", "finishing", "done")
#: the longest exit reason a status may give
MAX_REASON_CHARS = 4096


def _optional(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda value: value is None or check(value)


def _is_str_dict(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) for k in value)


#: what each field of `STATUS` must hold; a file where one does not is not read at all
_CHECKS: dict[str, Callable[[Any], bool]] = {
    "state": lambda v: v in STATES,
    "phase": lambda v: v in PHASES,
    "attempt": _is_int,
    "attempts": lambda v: isinstance(v, list) and all(_is_str_dict(a) for a in v),
    "phase_times": lambda v: isinstance(v, dict) and all(
        k in PHASES and _is_number(t) for k, t in v.items()),
    "exit_reason": _optional(lambda v: isinstance(v, str) and len(v) <= MAX_REASON_CHARS),
    "kernel_pid": _optional(_is_int),
    "runner_pid": _optional(_is_int),
    "restarts": _optional(_is_int),
    "updated": _optional(_is_number),
    "kubernetes": _optional(_is_str_dict),
}
#: what a field must be, in a malformed status's reason
_EXPECTED = {
    "state": f"one of {', '.join(STATES)}", "phase": f"one of {', '.join(PHASES)}",
    "attempt": "an integer", "attempts": "a list of objects",
    "phase_times": "an object of phases to finite numbers",
    "exit_reason": f"a string of at most {MAX_REASON_CHARS} characters or null",
    "kernel_pid": "an integer or null",
    "runner_pid": "an integer or null", "restarts": "an integer or null",
    "updated": "a number or null", "kubernetes": "an object or null",
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

    @staticmethod
    def problem(doc: Any) -> str | None:
        """Why `doc` is no status the runner could have written (not an object, no state or
        phase, a field of the wrong type: ``"attempt": "x"``); None when it is one."""
        if not isinstance(doc, dict):
            return "it is not a JSON object"
        for name in _REQUIRED:
            if name not in doc:
                return f"it has no {name}"
        for name, check in _CHECKS.items():
            if name in doc and not check(doc[name]):
                return f"{name} must be {_EXPECTED[name]}"
        return None

    @classmethod
    def from_json(cls, doc: Any) -> RunnerStatus | None:
        """None for anything that is not a status the runner could have written
        (`problem`): such a document is never trusted in part."""
        if cls.problem(doc) is not None:
            return None
        values = {name: doc[name] for name in _CHECKS if name in doc}
        status = cls(**values)
        status.attempts = [dict(a) for a in status.attempts]
        status.phase_times = dict(status.phase_times)
        return status


def read_status(job_dir: Path) -> RunnerStatus | None:
    """The job's `STATUS`; None when it is missing, half written or not a status."""
    return RunnerStatus.from_json(read_json(job_dir / STATUS))


def check_status(job_dir: Path) -> tuple[RunnerStatus | None, str | None]:
    """The job's `STATUS` and, when the file is a complete JSON document that is no status,
    why (the file is written atomically, so such a document is final, not half written):
    (None, None) while it is missing or not (yet) JSON."""
    doc = read_json(job_dir / STATUS)
    if doc is None:
        return None, None
    problem = RunnerStatus.problem(doc)
    if problem is not None:
        return None, f"the runner's {STATUS} is malformed: {problem}"
    return RunnerStatus.from_json(doc), None


# --- what else a job writes back, type-checked ------------------------------------------------


def read_outputs(job_dir: Path) -> list[dict[str, Any]]:
    """`OUTPUTS`: one object per selected cell (cell_id, execution_count, outputs); anything
    else in the file is left out."""
    doc = read_json(job_dir / OUTPUTS)
    if not isinstance(doc, list):
        return []
    return [c for c in doc if isinstance(c, dict) and isinstance(c.get("cell_id"), str)
            and isinstance(c.get("outputs"), list)
            and all(isinstance(o, dict) for o in c["outputs"])
            and (c.get("execution_count") is None or _is_int(c.get("execution_count")))]


def read_results_index(job_dir: Path) -> dict[str, Any]:
    """`RESULTS_INDEX`: ``results`` (name, type, size_bytes each), ``skipped`` (name ->
    why) and ``sha256`` (of `RESULTS`, or None); wrong shapes read as nothing."""
    doc = read_object(job_dir / RESULTS_INDEX)
    results = doc.get("results")
    entries = [e for e in results if isinstance(e, dict) and isinstance(e.get("name"), str)
               and isinstance(e.get("type"), str) and _is_int(e.get("size_bytes"))] \
        if isinstance(results, list) else []
    skipped = doc.get("skipped")
    digest = doc.get("sha256")
    return {
        "results": [{"name": e["name"], "type": e["type"], "size_bytes": e["size_bytes"]}
                    for e in entries],
        "skipped": {k: v for k, v in skipped.items() if isinstance(k, str)
                    and isinstance(v, str)} if isinstance(skipped, dict) else {},
        "sha256": digest if isinstance(digest, str) and len(digest) == 64 else None,
    }


def read_environment(job_dir: Path) -> dict[str, Any] | None:
    """`ENVIRONMENT`: python, executable, platform (strings) and packages (name ->
    version); None when it is missing or not of that shape."""
    doc = read_object(job_dir / ENVIRONMENT)
    packages = doc.get("packages")
    if not all(isinstance(doc.get(k), str) for k in ("python", "executable", "platform")) \
            or not isinstance(packages, dict) \
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in packages.items()):
        return None
    return {"python": doc["python"], "executable": doc["executable"],
            "platform": doc["platform"], "packages": packages}


def write_status(job_dir: Path, status: RunnerStatus) -> None:
    write_json(job_dir / STATUS, status.to_json())


def end_status(job_dir: Path, state: str, reason: str | None, now: float, *,
               reopened: frozenset[str] = frozenset(), runner_gone: bool = False) -> bool:
    """End the job in its status as the runner would have, for a backend that learnt of the
    end from its cluster (the runner could not say): the last attempt ends with `state` and
    `reason` (also one the runner ended with an outcome in `reopened`, which the cluster
    knows better), and the log says so. `runner_gone` also clears the runner's PID. False,
    and nothing written, when the status already ended."""
    status = read_status(job_dir)
    if status is not None and status.state in TERMINAL:
        return False
    status = status or RunnerStatus(state=state, phase="done")
    times = dict(status.phase_times)
    times["done"] = now
    attempts = list(status.attempts)
    if attempts and ("end" not in attempts[-1]
                     or attempts[-1].get("outcome") in reopened):
        attempts[-1] = {**attempts[-1], "end": attempts[-1].get("end", now),
                        "outcome": state, "reason": reason}
    status = dataclasses.replace(
        status, state=state, phase="done", exit_reason=reason, kernel_pid=None,
        runner_pid=None if runner_gone else status.runner_pid, phase_times=times,
        attempts=attempts, updated=now)
    say(job_dir, f"job {state}" + (f": {reason}" if reason else ""))
    write_status(job_dir, status)
    return True


# --- the server's record of a job, for code inside a kernel -----------------------------------

def recorded_results_digest(jobs_dir: Path | str, job_id: int) -> str | None:
    """The sha256 of a job's results that the server recorded when the job ended (in
    `JOBS_DB`, read-only), or None when it recorded none or there is no such database.

    The one read of the jobs store's tables outside `offload/store.py`, which owns them (its
    `record` column holds `results_sha256`): here so `%costguard fetch` in a kernel can check
    a pickle without importing the server."""
    import sqlite3

    from jupyter_costguard.common.sqlite import open_read_only

    path = Path(jobs_dir) / JOBS_DB
    if not path.exists():
        return None
    try:
        db = open_read_only(path)
        try:
            row = db.execute("SELECT record FROM job WHERE id=?", (job_id,)).fetchone()
        finally:
            db.close()
        record = json.loads(row[0]) if row else None
    except (sqlite3.Error, TypeError, ValueError):
        return None
    digest = record.get("results_sha256") if isinstance(record, dict) else None
    return digest if isinstance(digest, str) else None
