"""The Slurm backend: a job is a batch job that runs the same runner as the local backend.

It writes a batch script (`jobdir.SLURM_SCRIPT`) into the job's directory (resources from the
spec, partition, account and extra arguments from settings, ``--requeue`` and a warning signal
ahead of the time limit), submits it with ``sbatch``, follows it with ``squeue`` (then
``scontrol show job`` and ``sacct`` once it has left the queue) and cancels it with
``scancel``. The batch script runs the runner (`jobdir.runner_command`), so status, log,
outputs, results and checkpoints travel through the job's directory exactly as they do
locally: **the job directory and the notebook's directory must be on a filesystem the login
node (the Jupyter server) and the compute nodes share**, the usual HPC setup, and the
interpreter given as ``python`` must exist on the nodes with this package installed.

What Slurm knows and the runner cannot say (a bad partition, a job killed at Slurm's time
limit, out of memory, a node failure, an interpreter missing on the node) becomes the job's
``exit_reason``, and the end of Slurm's own output file (`jobdir.SLURM_OUTPUT`) is added to the
job's log. A requeued job (preemption, ``scontrol requeue``, a node failure) runs the runner
again in the same directory; it continues the interrupted attempt from the latest checkpoint
without using a retry (see runner.py's scheduler hooks).

Quoting: every path and setting in a ``#SBATCH`` line is written the way sbatch reads it
(double quotes, ``\\`` and ``"`` backslash-escaped), so quotes, backslashes, ``#``, ``$``,
backticks, spaces and non-ASCII letters in the notebook's directory survive; ``%`` in the job
directory is written ``%%`` (Slurm's filename patterns), and a job directory holding a
backslash is refused (Slurm drops backslashes from ``--output``). The runner's command line is
shell-quoted. A newline, carriage return or NUL in ``slurm_partition``, ``slurm_account``,
``slurm_extra_args`` or ``slurm_python`` is refused when the server starts (and again when a
script is written), so no setting can end a line early and become a command.

All calls run on the job service's worker thread, never on the IO loop; each has a timeout,
and ``squeue`` answers are shared by every job for `query_interval` seconds so that following
many jobs does not hammer the controller.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from traitlets import Bool, Int, List, TraitError, Unicode, validate
from traitlets.config import Configurable

from jupyter_costguard.offload import jobdir
from jupyter_costguard.offload.backends.base import Backend
from jupyter_costguard.offload.errors import JobError
from jupyter_costguard.offload.spec import TERMINAL, Job

#: Slurm job states in which the job may still run (or run again, once requeued)
ACTIVE_STATES = frozenset({
    "PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "REQUEUED",
    "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "SPECIAL_EXIT",
    "RESV_DEL_HOLD", "POWER_UP_NODE", "UPDATE_DB",
})
#: a pending reason that never resolves by itself: the launch failed and Slurm held the job
LAUNCH_FAILED = "launch_failed_requeued_held"
#: what Slurm's end states mean for the user (the runner could not report these itself)
ENDED_REASONS = {
    "TIMEOUT": "Slurm's time limit was reached",
    "OUT_OF_MEMORY": "the job ran out of memory (Slurm OUT_OF_MEMORY); ask for more "
                     "memory_gib",
    "NODE_FAIL": "the node running the job failed (Slurm NODE_FAIL)",
    "BOOT_FAIL": "the node could not boot (Slurm BOOT_FAIL)",
    "PREEMPTED": "Slurm preempted the job and did not requeue it",
    "DEADLINE": "Slurm could not run the job before its deadline",
    "REVOKED": "Slurm revoked the job (federation)",
}
#: end states after which running it again may help (not the job's fault)
RETRYABLE = frozenset({"NODE_FAIL", "BOOT_FAIL", "PREEMPTED"})
LOG_TAIL_BYTES = 4096
#: seconds before the time limit that a job gets SIGUSR1 (its final checkpoint)
DEFAULT_SIGNAL_SECONDS = 60


class SlurmError(RuntimeError):
    """A Slurm command that could not run or did not answer in time."""


@dataclass(frozen=True)
class SlurmJob:
    """What Slurm says about one job. `state` is Slurm's JobState, or ``UNKNOWN`` when
    Slurm no longer knows the job (purged after MinJobAge, and no accounting)."""

    job_id: str
    state: str
    reason: str | None = None
    node: str | None = None
    exit_code: int | None = None
    exit_signal: int | None = None
    restarts: int | None = None
    time_limit: str | None = None

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES


def _value(raw: str | None) -> str | None:
    raw = (raw or "").strip()
    return None if raw in ("", "None", "(null)", "N/A", "n/a") else raw


def parse_scontrol(text: str) -> SlurmJob | None:
    """``scontrol show job -o ID`` (one line of Key=Value; values such as paths may hold
    spaces, so only the keys needed are matched)."""
    def key(name: str) -> str | None:
        m = re.search(rf"(?:^|\s){name}=(\S*)", text)
        return _value(m.group(1)) if m else None

    job_id, state = key("JobId"), key("JobState")
    if job_id is None or state is None:
        return None
    exit_code = exit_signal = None
    m = re.fullmatch(r"(\d+):(\d+)", key("ExitCode") or "")
    if m:
        exit_code, exit_signal = int(m.group(1)), int(m.group(2))
    restarts = key("Restarts")
    return SlurmJob(job_id, state, key("Reason"), key("NodeList"), exit_code, exit_signal,
                    int(restarts) if restarts and restarts.isdigit() else None,
                    key("TimeLimit"))


#: characters no setting or path written into the batch script may hold: a line break would
#: end a directive or a comment early and make the rest a command of the script
LINE_BREAKS = {"\n": "a newline", "\r": "a carriage return", "\0": "a NUL byte"}


def refuse_line_breaks(what: str, value: str) -> None:
    """Raise SlurmError naming `what` if `value` holds a newline, carriage return or NUL."""
    for char, name in LINE_BREAKS.items():
        if char in value:
            raise SlurmError(f"{what} holds {name} ({value!r}), which cannot go into a Slurm "
                             "batch script")


def _directive(value: str, what: str) -> str:
    """An #SBATCH value as sbatch reads it: inside double quotes a backslash escapes the next
    character, and ``#``, ``'``, spaces and anything else are literal; no line break."""
    refuse_line_breaks(what, value)
    if re.fullmatch(r"[\w./:=@+,-]+", value, re.ASCII):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _output_path(job_dir: Path) -> str:
    """--output: the job directory with Slurm's filename patterns escaped (``%`` as ``%%``),
    then Slurm's own ``%j``. Slurm drops every backslash from such a path (and then expands
    no pattern), so a job directory holding one cannot be given."""
    text = str(job_dir)
    if "\\" in text:
        raise SlurmError(f"the job directory {text!r} holds a backslash, which Slurm's "
                         "--output cannot take; choose a jobs_dir without one")
    return text.replace("%", "%%") + "/" + jobdir.SLURM_OUTPUT


def time_minutes(seconds: float) -> int:
    """Slurm's --time in whole minutes, rounded up (at least 1)."""
    return max(1, math.ceil(seconds / 60))


class SlurmExecutor(Backend):
    """Runs jobs as Slurm batch jobs; the job's directory must be on a filesystem the
    compute nodes share (see the module docstring)."""

    def __init__(self, partition: str | None = None, account: str | None = None,
                 extra_args: Sequence[str] = (), signal_seconds: int = DEFAULT_SIGNAL_SECONDS,
                 python: str = sys.executable, environ: Mapping[str, str] | None = None,
                 name: str = "slurm", query_interval: float = 2.0,
                 settle_seconds: float = 30.0, command_timeout: float = 30.0) -> None:
        self.name = name
        self.partition = partition or None
        self.account = account or None
        self.extra_args = list(extra_args)
        self.signal_seconds = int(signal_seconds)
        self.python = python
        self.environ = dict(os.environ if environ is None else environ)
        #: squeue answers are reused this long (for every job at once)
        self.query_interval = query_interval
        #: after Slurm says the job ended, how long to wait for the runner's final status to
        #: become visible (on NFS a renamed file can take the attribute cache's 30 s)
        self.settle_seconds = settle_seconds
        self.command_timeout = command_timeout
        self._lock = threading.Lock()
        self._known: dict[str, tuple[float, SlurmJob | None]] = {}  # None: Slurm unreachable
        self._asked: dict[str, float] = {}
        self._ended_at: dict[str, float] = {}

    # --- the batch script --------------------------------------------------------------

    def script(self, job: Job, job_dir: Path) -> str:
        """The batch script for `job`: directives from its resources and the settings, then
        the runner, exec'd so that Slurm's signals (SIGTERM, the SIGUSR1 warning sent with
        ``B:``) reach it and not a shell that would ignore or die of them."""
        res = job.spec.resources
        refuse_line_breaks("python", self.python)
        for arg in self.extra_args:
            refuse_line_breaks("extra args", arg)
        lines = [
            "#!/bin/bash",
            f"# costguard job {job.id} from {job.spec.notebook!r}: written and submitted by "
            "the Slurm backend",
            f"#SBATCH --job-name=costguard-{job.id}",
            f"#SBATCH --output={_directive(_output_path(job_dir), 'job directory')}",
            "#SBATCH --open-mode=append",
            f"#SBATCH --chdir={_directive(job.spec.cwd, 'the notebook directory')}",
            "#SBATCH --nodes=1",
            "#SBATCH --ntasks=1",
            "#SBATCH --requeue",
            "#SBATCH --export=ALL",
        ]
        if self.signal_seconds > 0:
            lines.append(f"#SBATCH --signal=B:USR1@{min(self.signal_seconds, 65535)}")
        if res.cpus is not None:
            lines.append(f"#SBATCH --cpus-per-task={math.ceil(res.cpus)}")
        if res.memory_gib is not None:
            lines.append(f"#SBATCH --mem={math.ceil(res.memory_gib * 1024)}M")
        if res.gpus:
            lines.append(f"#SBATCH --gres=gpu:{res.gpus}")
        if res.time_limit_seconds is not None:
            lines.append(f"#SBATCH --time={time_minutes(res.time_limit_seconds)}")
        if self.partition:
            lines.append(f"#SBATCH --partition={_directive(self.partition, 'partition')}")
        if self.account:
            lines.append(f"#SBATCH --account={_directive(self.account, 'account')}")
        if self.extra_args:
            lines.append(f"# and on sbatch's command line: {shlex.join(self.extra_args)}")
        lines += [
            "",
            "# a requeued job runs this again in the same directory; the runner resumes",
            f'export {jobdir.ENV_RESTART_COUNT}="${{SLURM_RESTART_COUNT:-0}}"',
            f"exec {shlex.join(jobdir.runner_command(job_dir, self.python))}",
            "",
        ]
        return "\n".join(lines)

    # --- Backend -------------------------------------------------------------------------

    def launch(self, job: Job, job_dir: Path, environment: Mapping[str, str] = {}) -> str | None:
        """Submit; returns Slurm's job id. A refusal (bad partition, more than a node has)
        ends the job ``failed`` with sbatch's message, in its status and its log."""
        if "CUDA_VISIBLE_DEVICES" in environment:
            _drop_server_gpus(job_dir)  # Slurm picks the node's GPUs (--gres), not the server
        try:
            text = self.script(job, job_dir)
        except SlurmError as e:
            self._fail(job_dir, f"the job cannot be written as a Slurm batch script: {e}")
            return None
        path = job_dir / jobdir.SLURM_SCRIPT
        path.write_text(text)
        path.chmod(0o755)
        (job_dir / jobdir.CANCEL).unlink(missing_ok=True)  # left by a cancel of an earlier launch
        try:
            out = self._command(["sbatch", "--parsable", *self.extra_args, str(path)])
        except SlurmError as e:
            self._fail(job_dir, f"sbatch failed: {e}")
            return None
        ref = out.strip().splitlines()[-1].split(";")[0].strip() if out.strip() else ""
        if not ref.isdigit():
            self._fail(job_dir, f"sbatch answered {out.strip()!r}, not a job id")
            return None
        where = ", ".join(f"{k} {v}" for k, v in (("partition", self.partition),
                                                 ("account", self.account)) if v)
        jobdir.say(job_dir, f"submitted to Slurm as job {ref}" + (f" ({where})" if where else ""))
        with self._lock:
            self._asked[ref] = time.monotonic()
        return ref

    def reconcile(self, job: Job, job_dir: Path) -> bool:
        """True while Slurm may still run the job (pending, running, requeued). When it has
        ended without the runner saying how, Slurm's reason becomes the job's (written to its
        status and log); a job Slurm could not launch on its node is cancelled first."""
        ref = job.backend_ref
        if not ref:
            return False
        info = self.query(ref)
        if info is None:
            return True  # Slurm does not answer: say nothing rather than lose the job
        now = time.monotonic()
        if info.active:
            if info.state == "PENDING" and info.reason == LAUNCH_FAILED:
                self._cancel_quietly(ref)
                self._ended(job_dir, ref, info, "Slurm could not launch the job on its node "
                            f"({LAUNCH_FAILED})")
                return False
            with self._lock:
                self._ended_at.pop(ref, None)
            return True
        status = jobdir.read_status(job_dir)
        if status is not None and status.state in TERMINAL:
            return False
        if (job_dir / jobdir.CANCEL).exists():
            self._ended(job_dir, ref, info, "cancelled by the user", state="cancelled")
            return False
        with self._lock:
            first = self._ended_at.setdefault(ref, now)
        reported = info.state in ("COMPLETED", "FAILED", "UNKNOWN") and \
            info.exit_signal in (0, None) and info.exit_code in (0, 1, None)
        if reported and now - first < self.settle_seconds:
            return True  # the runner wrote how it ended; wait until that can be read
        attempt, max_attempts = status.attempt if status else 0, job.spec.retries + 1
        if reported and attempt == 0:  # e.g. the package is missing on the node
            self._ended(job_dir, ref, info, "the job runner did not start on the node; see "
                        "the log")
            return False
        if reported:
            jobdir.say(job_dir, f"Slurm job {ref} ended ({info.state}) but the runner's final "
                       "status never arrived")
            self._append_slurm_output(job_dir, ref)
            return False  # the job service decides: run it again or call it lost
        if info.state in RETRYABLE and 0 < attempt < max_attempts:
            jobdir.say(job_dir, f"Slurm job {ref} ended {info.state}: "
                       f"{ENDED_REASONS[info.state]}")
            self._append_slurm_output(job_dir, ref)
            return False  # the job service runs it again
        if info.state == "CANCELLED":
            self._ended(job_dir, ref, info, "cancelled in Slurm (scancel, or an administrator)",
                        state="cancelled")
        elif info.state == "TIMEOUT":
            limit = f" of {info.time_limit}" if info.time_limit else ""
            self._ended(job_dir, ref, info, f"Slurm's time limit{limit} was reached")
        elif info.state in ENDED_REASONS:
            self._ended(job_dir, ref, info, ENDED_REASONS[info.state])
        else:
            code = f"exit code {info.exit_code}" if info.exit_code else \
                f"signal {info.exit_signal}" if info.exit_signal else "no exit code"
            self._ended(job_dir, ref, info, f"the Slurm job ended {info.state} ({code}) "
                        "before the runner reported; see the log")
        return False

    def cancel(self, job: Job, job_dir: Path, force: bool = False) -> None:
        """``scancel``: Slurm sends SIGTERM, and the runner (seeing the ``cancel`` file, so
        it knows this is no requeue) shuts its kernel down and ends ``cancelled``. `force`
        sends SIGKILL to everything the job runs, then cancels it."""
        jobdir.write_json(job_dir / jobdir.CANCEL, {"at": time.time(), "force": force})
        ref = job.backend_ref
        if not ref:
            return
        try:
            if force:
                self._command(["scancel", "--signal=KILL", "--full", ref], check=False)
            self._command(["scancel", ref])
        except SlurmError as e:
            if not force:
                raise JobError(f"Slurm did not accept the cancel of job {ref}: {e}", 503) \
                    from None
        finally:
            with self._lock:
                self._known.pop(ref, None)

    def describe(self, job: Job, job_dir: Path) -> dict[str, Any] | None:
        """What Slurm says about the job, for the UI: state, pending reason, node."""
        ref = job.backend_ref
        if not ref:
            return None
        info = self.query(ref)
        if info is None:
            return {"slurm_job_id": ref, "slurm_state": "UNKNOWN",
                    "reason": "the Slurm controller did not answer", "node": None}
        return {"slurm_job_id": ref, "slurm_state": info.state, "reason": info.reason,
                "node": info.node}

    # --- asking Slurm ------------------------------------------------------------------

    def query(self, ref: str) -> SlurmJob | None:
        """Slurm's view of job `ref` (cached `query_interval` s); None when Slurm did not
        answer. One ``squeue`` covers every job asked about in the last minute."""
        now = time.monotonic()
        with self._lock:
            self._asked[ref] = now
            known = self._known.get(ref)
            if known is not None and now - known[0] < self.query_interval:
                return known[1]
            refs = sorted(r for r, t in self._asked.items() if now - t < 60.0)
            self._asked = {r: self._asked[r] for r in refs}
        answers = self._squeue(refs)
        result: dict[str, SlurmJob | None] = {}
        for r in refs:
            info = answers.get(r) if answers is not None else None
            if answers is not None and (info is None or not info.active):
                info = self._details(r, info)  # exit code, or the job after it left squeue
            result[r] = info
        with self._lock:
            for r, info in result.items():
                self._known[r] = (now, info)
        return result.get(ref)

    def _squeue(self, refs: list[str]) -> dict[str, SlurmJob] | None:
        try:
            out = self._command(["squeue", "--noheader", "--states=all", "--jobs",
                                 ",".join(refs), "--format=%i|%T|%r|%N"])
        except SlurmError as e:
            if "Invalid job id" in str(e):
                return {}  # none of them is known any more
            return None
        jobs = {}
        for line in out.splitlines():
            parts = line.strip().split("|")
            if len(parts) == 4:
                jobs[parts[0]] = SlurmJob(parts[0], parts[1], _value(parts[2]), _value(parts[3]))
        return jobs

    def _details(self, ref: str, seen: SlurmJob | None) -> SlurmJob | None:
        """An ended (or vanished) job: ``scontrol show job`` while the controller keeps it
        (MinJobAge), then ``sacct`` where accounting is on, else UNKNOWN."""
        try:
            found = parse_scontrol(self._command(["scontrol", "show", "job", "-o", ref]))
            if found is not None:
                return found
        except SlurmError as e:
            if "Invalid job id" not in str(e):
                return seen
        try:
            out = self._command(["sacct", "--noheader", "--parsable2", "--allocations",
                                 "--jobs", ref, "--format=JobID,State,ExitCode,Reason,NodeList"])
        except SlurmError:
            out = ""  # e.g. "Slurm accounting storage is disabled"
        for line in out.splitlines():
            parts = line.split("|")
            if len(parts) >= 5 and parts[0] == ref:
                state = parts[1].split()[0] if parts[1] else "UNKNOWN"  # "CANCELLED by 0"
                m = re.fullmatch(r"(\d+):(\d+)", parts[2])
                return SlurmJob(ref, state, _value(parts[3]), _value(parts[4]),
                                int(m.group(1)) if m else None, int(m.group(2)) if m else None)
        return seen or SlurmJob(ref, "UNKNOWN")

    def _command(self, args: list[str], check: bool = True) -> str:
        try:
            proc = subprocess.run(args, env=self.environ, stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True,
                                  timeout=self.command_timeout)
        except subprocess.TimeoutExpired:
            raise SlurmError(f"{args[0]} did not answer within {self.command_timeout:g} s") \
                from None
        except OSError as e:
            raise SlurmError(f"cannot run {args[0]}: {e}") from None
        if check and proc.returncode != 0:
            message = (proc.stderr or proc.stdout).strip() or f"exit status {proc.returncode}"
            raise SlurmError(message)
        return proc.stdout

    def _cancel_quietly(self, ref: str) -> None:
        try:
            self._command(["scancel", ref], check=False)
        except SlurmError:
            pass

    # --- reporting what the runner could not ------------------------------------------

    def _ended(self, job_dir: Path, ref: str, info: SlurmJob, reason: str,
               state: str = "failed") -> None:
        self._append_slurm_output(job_dir, ref)
        detail = f" (Slurm job {ref}: {info.state}" + \
            (f", {info.reason}" if info.reason else "") + ")"
        self._fail(job_dir, reason + ("" if state == "cancelled" else detail), state=state)

    def _append_slurm_output(self, job_dir: Path, ref: str) -> None:
        """The end of Slurm's own output file (its errors, the runner's stderr)."""
        path = job_dir / jobdir.slurm_output(ref)
        try:
            with open(path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - LOG_TAIL_BYTES))
                tail = f.read().decode("utf-8", "replace").strip()
        except OSError:
            return
        if tail:
            jobdir.say(job_dir, f"the end of {path.name}:\n{tail}")

    def _fail(self, job_dir: Path, reason: str, state: str = "failed") -> None:
        """End the job in its status (as the runner would), keeping its attempts."""
        jobdir.end_status(job_dir, state, reason, time.time())


def _drop_server_gpus(job_dir: Path) -> None:
    """The job service picks GPUs of the server's machine for the local backend; on a
    cluster node Slurm sets CUDA_VISIBLE_DEVICES from --gres, so the pick must not reach the
    kernel (the runner applies the spec's environment)."""
    path = job_dir / jobdir.SPEC
    try:
        doc = jobdir.read_json(path)
        doc.get("environment", {}).pop("CUDA_VISIBLE_DEVICES", None)
    except AttributeError:  # not there, or not a spec
        return
    jobdir.write_json(path, doc)


class SlurmBackend(Configurable):
    """The Slurm backend's options (`c.SlurmBackend.<name>`); `backend()` is what the job
    service gets."""

    #: the old names (`c.CostGuard.<old>`), which still work for a release
    moved_from_costguard: ClassVar[dict[str, str]] = {
        "slurm_enabled": "enabled",
        "slurm_partition": "partition",
        "slurm_account": "account",
        "slurm_extra_args": "extra_args",
        "slurm_signal_seconds": "signal_seconds",
        "slurm_python": "python",
    }

    enabled = Bool(
        None, allow_none=True, config=True,
        help="Offer the Slurm backend (jobs with backend 'slurm'). None: when sbatch is on "
        "PATH. The job directories must be on a filesystem the compute nodes share.")
    partition = Unicode(None, allow_none=True, config=True,
                              help="Slurm partition for jobs (None: the cluster's default).")
    account = Unicode(None, allow_none=True, config=True,
                            help="Slurm account jobs are charged to (None: the user's default).")
    extra_args = List(
        Unicode(), config=True,
        help="More sbatch arguments, e.g. ['--qos=normal', '--constraint=a100'].")
    signal_seconds = Int(
        DEFAULT_SIGNAL_SECONDS, config=True,
        help="Seconds before Slurm's time limit that a job gets SIGUSR1 (a final checkpoint); "
        "0: none.")
    python = Unicode(
        sys.executable, config=True,
        help="Python on the compute nodes that has jupyter_costguard installed (default: the "
        "server's, which a shared filesystem makes the same).")

    @validate("partition", "account", "python", "extra_args")
    def _no_line_breaks(self, proposal: Any) -> Any:
        """Each of these goes into the batch script: a line break there could end a line
        early and make the rest a shell command, so the server refuses it at startup."""
        name, value = proposal["trait"].name, proposal["value"]
        for item in ([] if value is None else [value] if isinstance(value, str) else value):
            try:
                refuse_line_breaks(f"c.SlurmBackend.{name}", item)
            except SlurmError as e:
                raise TraitError(str(e)) from None
        return value

    def backend(self) -> SlurmExecutor | None:
        """The backend when it is offered: `enabled`, or `sbatch` on PATH."""
        if not (self.enabled or (self.enabled is None and shutil.which("sbatch"))):
            return None
        return SlurmExecutor(partition=self.partition, account=self.account,
                            extra_args=self.extra_args,
                            signal_seconds=self.signal_seconds, python=self.python)

