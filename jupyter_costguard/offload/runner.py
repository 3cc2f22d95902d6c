"""The job runner: a process of its own that runs one job's cells in a fresh kernel.

``python -m jupyter_costguard.offload.runner JOB_DIR`` is started by a backend, detached from
the Jupyter server (its own session), so a job keeps running while the server restarts. It
talks to the server only through the files of JOB_DIR that `jobdir` names, written
atomically: it reads the spec and the sent variables, and writes its `jobdir.RunnerStatus`, the
log (the cells' streams and errors as they come, and its own lines), the selected cells'
outputs after each cell, the names brought back and the kernel's environment.

Attempts: a failed cell or a dead kernel is retried (``retries`` times, with doubling
back-off) in a new kernel with the same checkpoint directory, so `checkpoint.latest()`
resumes it. The time limit covers all attempts and is not retried. SIGTERM cancels: the
kernel is shut down and the job ends ``cancelled``. A runner started on a directory whose
status says attempts were made (the previous runner was lost) continues with the next one.

Batch schedulers (the Slurm backend) add three things, all inert for the local backend:

- `jobdir.ENV_RESTART_COUNT` (set by the batch script from ``SLURM_RESTART_COUNT``): when it
  is set, SIGTERM is the scheduler stopping the job (requeue, preemption, its time limit)
  unless the `jobdir.CANCEL` file exists (written by the backend's cancel): the attempt is
  recorded as ``interrupted`` and the job stays ``running`` (phase ``queued``) for the
  scheduler to start again or the backend to report how it ended. A runner whose count is
  above the one in its status is that requeued job: it continues the same attempt (a requeue
  is not the job's fault and uses no retry), resuming from the same checkpoint directory.
- SIGUSR1 (the scheduler's warning before a time limit) is passed on to the kernel only when
  the kernel asked for it by writing its pid to the `jobdir.SIGNAL_OK` file (the checkpoint
  helper does, with a handler that makes a final save); otherwise it would kill the kernel.
- `jobdir.ENV_JOB_DIR` in the kernel's environment, so the kernel side finds that file.

``--warm`` runs a warm runner instead (`warm`): a kernel that waits for its job.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import sys
import time
import traceback
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from jupyter_costguard.common.proc import descends_from
from jupyter_costguard.offload import jobdir
from jupyter_costguard.offload.jobclient import job_client
from jupyter_costguard.offload.jobdir import RunnerStatus
from jupyter_costguard.offload.spec import JobSpec
from jupyter_costguard.offload.warm import warm_main

#: Executed first in the job's kernel: the notebook's directory, the sent variables.
PREAMBLE = """\
def _costguard_preamble(cwd, inputs, digest, environ):
    import hashlib, os, pickle, sys
    os.environ.update(environ)
    os.chdir(cwd)
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    if inputs:  # only when the spec says variables were sent, and only what was sent
        with open(inputs, "rb") as f:
            data = f.read()
        if digest is None or hashlib.sha256(data).hexdigest() != digest:
            raise ValueError("the sent variables (inputs.pkl) do not match the sha256 "
                             "recorded at submit (or none was recorded); not loaded")
        globals().update(pickle.loads(data))
_costguard_preamble({cwd!r}, {inputs!r}, {digest!r}, {environ!r})
del _costguard_preamble
"""

#: Executed after the cells, failed or not: the kernel is killed, not shut down, when the job
#: ends (no atexit there), so checkpoints still uploading in the background are flushed first.
FLUSH_CHECKPOINTS = """\
import sys as _costguard_sys
if "jupyter_costguard.kernel.checkpoint" in _costguard_sys.modules:
    _costguard_sys.modules["jupyter_costguard.kernel.checkpoint"].wait()
del _costguard_sys
"""

#: Executed after the cells: what the kernel ran on, then the names to bring back.
ENVIRONMENT = """\
def _costguard_environment(path):
    import importlib.metadata, json, os, platform, sys
    packages = {{}}
    for d in importlib.metadata.distributions():
        name = d.metadata["Name"]
        if name:
            packages[name] = d.version
    doc = {{"python": sys.version, "executable": sys.executable,
           "platform": platform.platform(), "packages": dict(sorted(packages.items()))}}
    fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f)
    os.replace(path + ".tmp", path)
_costguard_environment({path!r})
del _costguard_environment
"""

RESULTS = """\
def _costguard_results(names, path, index):
    import hashlib, json, os, pickle, types
    def private(name, mode):
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)
        return os.fdopen(fd, mode)
    g = globals()
    kept, entries, skipped = {{}}, [], {{}}
    for name in names:
        if name not in g:
            skipped[name] = "not defined"
            continue
        value = g[name]
        if isinstance(value, (type, types.FunctionType, types.ModuleType)):
            skipped[name] = "code, not data: run its cell to have it"
            continue
        try:
            data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:
            skipped[name] = f"cannot be pickled: {{type(e).__name__}}: {{e}}"
            continue
        kept[name] = value
        t = type(value)
        entries.append({{"name": name, "type": f"{{t.__module__}}.{{t.__qualname__}}",
                         "size_bytes": len(data)}})
    data = pickle.dumps(kept, protocol=pickle.HIGHEST_PROTOCOL)
    with private(path + ".tmp", "wb") as f:
        f.write(data)
    os.replace(path + ".tmp", path)
    with private(index + ".tmp", "w") as f:
        json.dump({{"results": entries, "skipped": skipped,
                    "sha256": hashlib.sha256(data).hexdigest()}}, f)
    os.replace(index + ".tmp", index)
_costguard_results({names!r}, {path!r}, {index!r})
del _costguard_results
"""


class TimeLimit(Exception):
    """The job's time limit ran out during a cell (not retried)."""


class Runner:
    def __init__(self, job_dir: Path) -> None:
        self.dir = job_dir
        doc = json.loads((job_dir / jobdir.SPEC).read_text())
        self.job_id = doc["id"]
        self.spec = JobSpec.from_json(doc["spec"])
        self.checkpoint_dir: str = doc["checkpoint_dir"]
        self.environment: dict[str, str] = dict(doc.get("environment", {}))
        #: the digest of `jobdir.INPUTS` the server recorded when it wrote the file; without
        #: one (a spec from a server before digests, or one written by hand) sent variables
        #: are refused, never unpickled unchecked
        digest = doc.get("inputs_sha256")
        self.inputs_sha256: str | None = digest if isinstance(digest, str) else None
        #: what an earlier runner of this job left (lost, or requeued by the scheduler)
        self.previous = jobdir.read_status(job_dir)
        previous = self.previous or RunnerStatus(state="running", phase="starting")
        # scheduler hook: None where the backend never requeues (local)
        restarts = os.environ.get(jobdir.ENV_RESTART_COUNT)
        self.restarts: int | None = int(restarts) if restarts and restarts.isdigit() else \
            (0 if restarts is not None else None)
        self.interrupted = False
        self.status = RunnerStatus(
            runner_pid=os.getpid(), state="running", phase="starting",
            attempt=previous.attempt, kernel_pid=None, phase_times=dict(previous.phase_times),
            attempts=list(previous.attempts), exit_reason=None, restarts=self.restarts)
        self.deadline: float | None = None
        limit = self.spec.resources.time_limit_seconds
        if limit is not None:
            first = self.status.phase_times.get("starting", time.time())
            self.deadline = first + limit
        self.log_file = os.fdopen(jobdir.open_private(job_dir / jobdir.LOG), "a", buffering=1,
                                  encoding="utf-8")
        self.outputs: dict[str, dict[str, Any]] = {}
        self.cancelled = False
        self._install_signals: Any = lambda: None
        #: a client whose kernel was started before the job came (see `warm`)
        self.warm: Any = None

    # --- reporting -------------------------------------------------------------------

    def say(self, text: str) -> None:
        self.log_file.write(jobdir.log_line(text))

    def write(self, text: str) -> None:
        self.log_file.write(text)

    def report(self, **changes: Any) -> None:
        self.status = dataclasses.replace(self.status, **changes, updated=time.time())
        jobdir.write_status(self.dir, self.status)

    def enter(self, phase: str) -> None:
        self.status.phase_times.setdefault(phase, time.time())
        if phase == "running":
            self.status.phase_times["running"] = time.time()
        self.report(phase=phase)

    # --- the run ---------------------------------------------------------------------

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None

        def on_term() -> None:
            if self.restarts is not None and not (self.dir / jobdir.CANCEL).exists():
                self.interrupted = True  # the scheduler stops it; it may start it again
            else:
                self.cancelled = True
            task.cancel()

        def install() -> None:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, on_term)
            loop.add_signal_handler(signal.SIGUSR1, self._on_warning)

        self._install_signals = install
        self._install_signals()
        if self._requeued():
            ended = self.previous.state if self.previous is not None else None
            if ended in ("succeeded", "failed", "cancelled"):
                self.say(f"requeued after the job ended ({ended}); nothing to do")
                return 0 if ended == "succeeded" else 1
            self._resume_requeued()
        self.enter("starting")
        max_attempts = self.spec.retries + 1
        if self.status.attempt > 0 and not self._requeued():
            self.say(f"the previous runner was lost during attempt {self.status.attempt}")
            self._end_attempt("lost", "the runner process vanished")
        try:
            while True:
                if self.status.attempt >= max_attempts:
                    return self.finish("failed", self.status.exit_reason or "no attempts left")
                self.status.attempt += 1
                attempt = self.status.attempt
                self.status.attempts.append({"attempt": attempt, "start": time.time()})
                self.say(f"attempt {attempt} of {max_attempts}: starting kernel "
                         f"{self.spec.kernel_name!r} in {self.spec.cwd}")
                self.report()
                try:
                    await self.attempt()
                except Exception as e:  # a failed cell, a dead kernel: retried
                    if self.cancelled or self.interrupted:
                        raise asyncio.CancelledError from e
                    if isinstance(e, TimeLimit) or self._past_deadline():
                        return self._timed_out()
                    reason = self._reason(e)
                    self._end_attempt("failed", reason)
                    if self.status.attempt >= max_attempts:
                        return self.finish("failed", reason)
                    delay = self.spec.retry_backoff_seconds * 2 ** (self.status.attempt - 1)
                    self.say(f"attempt {attempt} failed ({reason}); retrying in {delay:g} s")
                    self.report(phase="starting", kernel_pid=None)
                    if self.deadline is not None and time.time() + delay >= self.deadline:
                        return self._timed_out()
                    await asyncio.sleep(delay)
                    continue
                self._end_attempt("succeeded", None)
                return self.finish("succeeded", None)
        except asyncio.CancelledError:
            if self.interrupted and not self.cancelled:
                return self._interrupted()
            if not self.cancelled:
                raise
            self._end_attempt("cancelled", "cancelled")
            return self.finish("cancelled", "cancelled by the user")

    # --- scheduler hooks -------------------------------------------------------------------

    def _requeued(self) -> bool:
        """Whether this runner is a scheduler's restart of the job (not a lost runner)."""
        before = self.previous.restarts if self.previous is not None else None
        return bool(self.restarts) and self.restarts != (before or 0)

    def _resume_requeued(self) -> None:
        """Continue the attempt the scheduler interrupted, without counting a new one."""
        attempt = self.status.attempt
        if self.status.attempts:
            last = self.status.attempts[-1]
            last.setdefault("end", time.time())
            if last.get("outcome") in (None, "interrupted"):
                last["outcome"] = "requeued"
                last["reason"] = "the scheduler requeued the job (preemption or requeue)"
        if attempt > 0:
            self.status.attempt = attempt - 1  # the loop counts it again
        self.say(f"the scheduler requeued the job (restart {self.restarts}); "
                 + (f"attempt {attempt} continues from the latest checkpoint, not counted as "
                    "a retry" if attempt > 0 else "starting"))

    def _interrupted(self) -> int:
        self._end_attempt("interrupted", "stopped by the scheduler (requeue, preemption or "
                          "its time limit)")
        self.say("stopped by the scheduler; the job stays queued if it is requeued")
        self.report(phase="queued", kernel_pid=None)
        return 3

    def _on_warning(self) -> None:
        """SIGUSR1: the scheduler will stop the job soon. Passed on to the kernel only when
        it handles the signal (it wrote its pid to `jobdir.SIGNAL_OK`); otherwise it would
        die."""
        kernel = self.status.kernel_pid
        try:
            pid = int((self.dir / jobdir.SIGNAL_OK).read_text().strip())
        except (OSError, ValueError):
            pid = None
        if (pid is not None and isinstance(kernel, int)
                and (pid == kernel or descends_from(pid, kernel))):
            try:
                os.kill(pid, signal.SIGUSR1)
            except OSError as e:
                self.say(f"warning signal received; could not pass it to the kernel: {e}")
                return
            self.say("warning signal received; passed to the kernel for a final checkpoint")
        else:
            self.say("warning signal received (the scheduler will stop the job soon); the "
                     "job does not handle it")

    def _past_deadline(self) -> bool:
        # nbclient may report a kernel it lost while the limit cancelled it as "died"
        return self.deadline is not None and time.time() >= self.deadline - 0.05

    def _timed_out(self) -> int:
        limit = self.spec.resources.time_limit_seconds or 0.0
        reason = f"time limit of {limit:g} s exceeded"
        self._end_attempt("timeout", reason)
        return self.finish("failed", reason)

    def _reason(self, e: BaseException) -> str:
        from nbclient.exceptions import CellExecutionError, DeadKernelError

        if isinstance(e, DeadKernelError):
            return "the kernel died"
        if isinstance(e, CellExecutionError):
            return f"{e.ename}: {e.evalue}" if e.ename else "a cell raised an error"
        return f"{type(e).__name__}: {e}"

    def _end_attempt(self, outcome: str, reason: str | None) -> None:
        if self.status.attempts:
            last = self.status.attempts[-1]
            last.setdefault("end", time.time())
            last.setdefault("outcome", outcome)
            last.setdefault("reason", reason)
        self.report()

    def finish(self, state: str, reason: str | None) -> int:
        self.status.phase_times.setdefault("finishing", time.time())
        self.status.phase_times["done"] = time.time()
        self.say(f"job {state}" + (f": {reason}" if reason else ""))
        self.report(state=state, phase="done", exit_reason=reason, kernel_pid=None)
        self._push_metrics()
        return 0 if state == "succeeded" else 1

    def _push_metrics(self) -> None:
        """Duration, attempts and outcome to the job's Pushgateway, if it has one; after the
        final status is written, so nothing waits on it. Never fails the job."""
        from jupyter_costguard.metrics.pushgateway import push_runner_metrics

        env = jobdir.ENV_PUSHGATEWAY_URL
        url = self.job_environment().get(env) or os.environ.get(env)
        if url and push_runner_metrics(url, self.job_id, self.status.to_json(),
                                       notebook=self.spec.notebook, backend=self.spec.backend):
            self.say(f"metrics pushed to {url}")
        elif url:
            self.say(f"could not push metrics to {url}")

    def job_environment(self) -> dict[str, str]:
        env = dict(self.environment)
        env.update({jobdir.ENV_JOB_ID: str(self.job_id),
                    jobdir.ENV_JOB_DIR: str(self.dir),
                    jobdir.ENV_ATTEMPT: str(self.status.attempt),
                    jobdir.ENV_CHECKPOINT_DIR: self.checkpoint_dir})
        return env

    def notebook(self) -> Any:
        import nbformat

        # inputs.pkl is unpickled only when the spec sent variables (a file that is there
        # otherwise is none of the job's), and only if it matches the recorded digest
        inputs = str(self.dir / jobdir.INPUTS) if self.spec.send else ""
        cells = [nbformat.v4.new_code_cell(PREAMBLE.format(
            cwd=self.spec.cwd, inputs=inputs, digest=self.inputs_sha256,
            environ=self.job_environment()))]
        for c in self.spec.cells:
            cell = nbformat.v4.new_code_cell(c.source)
            cell.metadata["costguard"] = {"cell_id": c.cell_id, "selected": c.selected}
            cells.append(cell)
        return nbformat.v4.new_notebook(cells=cells)

    async def attempt(self) -> None:
        (self.dir / jobdir.SIGNAL_OK).unlink(missing_ok=True)  # a pid of an earlier kernel
        nb = self.notebook()
        warm, self.warm = self.warm, None
        if warm is not None:  # the first attempt runs in the kernel started ahead of time
            warm.runner = self
            warm.nb = nb
            warm.reset_execution_trackers()
            try:
                await self._execute(warm, nb)
            finally:
                await warm._async_cleanup_kernel()  # a retry starts from a fresh kernel
            return
        env = dict(os.environ)
        env.update(self.job_environment())
        client = job_client(self, nb, kernel_name=self.spec.kernel_name)
        async with client.async_setup_kernel(env=env, cwd=self.spec.cwd):
            self._install_signals()  # nbclient put its own SIGTERM handler in place of ours
            await self._execute(client, nb)

    async def _execute(self, client: Any, nb: Any) -> None:
        import nbformat
        from nbclient.exceptions import CellExecutionError

        pid = getattr(getattr(client.km, "provisioner", None), "pid", None)
        self.report(kernel_pid=pid if isinstance(pid, int) else None)
        self.enter("running")
        try:
            for index, cell in enumerate(nb.cells):
                await self._bounded(client.async_execute_cell(cell, index))
                self._keep_outputs(cell)
        except CellExecutionError:
            self._keep_outputs(nb.cells[index])
            await self._flush_checkpoints(client)  # the retry resumes from them
            await self._record_environment(client)
            raise
        self.enter("finishing")
        await self._flush_checkpoints(client)
        await self._record_environment(client)
        if self.spec.bring_back:
            results = nbformat.v4.new_code_cell(RESULTS.format(
                names=list(self.spec.bring_back), path=str(self.dir / jobdir.RESULTS),
                index=str(self.dir / jobdir.RESULTS_INDEX)))
            await self._extra(client, results)

    async def _extra(self, client: Any, cell: Any) -> None:
        """Run a cell of the runner's own after the user's (nbclient indexes into nb)."""
        client.nb.cells.append(cell)
        await self._bounded(client.async_execute_cell(cell, len(client.nb.cells) - 1))

    async def _bounded(self, work: Any) -> Any:
        if self.deadline is None:
            return await work
        try:
            return await asyncio.wait_for(work, max(0.0, self.deadline - time.time()))
        except asyncio.TimeoutError:
            raise TimeLimit from None

    async def _flush_checkpoints(self, client: Any) -> None:
        import nbformat

        try:
            await self._extra(client, nbformat.v4.new_code_cell(FLUSH_CHECKPOINTS))
        except (TimeLimit, asyncio.CancelledError):
            raise
        except Exception:
            self.say("could not flush the checkpoints' uploads")

    async def _record_environment(self, client: Any) -> None:
        import nbformat

        cell = nbformat.v4.new_code_cell(ENVIRONMENT.format(
            path=str(self.dir / jobdir.ENVIRONMENT)))
        try:
            await self._extra(client, cell)
        except (TimeLimit, asyncio.CancelledError):
            raise
        except Exception:
            self.say("could not record the kernel's environment")

    def _keep_outputs(self, cell: Any) -> None:
        meta = cell.metadata.get("costguard")
        if not meta or not meta.get("selected"):
            return
        self.outputs[meta["cell_id"]] = {
            "cell_id": meta["cell_id"], "execution_count": cell.get("execution_count"),
            "outputs": [dict(o) for o in cell.outputs],
        }
        jobdir.write_json(self.dir / jobdir.OUTPUTS, list(self.outputs.values()))


async def run_assigned(job_dir: Path, client: Any) -> int:
    """Run the job in `job_dir` in a warm runner's `client` (its kernel already started)."""
    runner = Runner(job_dir)
    runner.warm = client
    client.runner = runner
    return await _exit_code(runner, runner.run())


async def _exit_code(runner: Runner, run: Coroutine[Any, Any, int]) -> int:
    """The run's exit code; a failure of the runner itself still ends the job, with why."""
    try:
        return await run
    except Exception:
        runner.say("runner error:\n" + traceback.format_exc())
        runner.finish("failed", "the job runner itself failed; see the log")
        return 1


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 4 and args[0] == jobdir.WARM_FLAG:
        return asyncio.run(warm_main(Path(args[1]), args[2], int(args[3]), run_assigned))
    if len(args) != 1:
        print(f"usage: python -m {jobdir.RUNNER_MODULE} JOB_DIR\n"
              f"       python -m {jobdir.RUNNER_MODULE} {jobdir.WARM_FLAG} DIR KERNEL "
              "SERVER_PID", file=sys.stderr)
        return 2
    job_dir = Path(args[0])
    try:
        runner = Runner(job_dir)
    except Exception:
        traceback.print_exc()
        return 2
    return asyncio.run(_exit_code(runner, runner.run()))


if __name__ == "__main__":
    sys.exit(main())
