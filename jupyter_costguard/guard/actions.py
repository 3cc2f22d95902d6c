"""Carries out the guard's acts on the IO loop, where the kernel manager lives.

Nothing here may take the server down by accident: every failure (a kernel that is already
gone, a shutdown command that is missing, fails or hangs) is logged and swallowed. The
shutdown command runs in its own session with its output captured in a temporary file, is
given `command_timeout` seconds, and is then killed together with whatever it started.

A `hibernate-kernel` act is done by the `hibernate` callable the server gives (its hibernate
service: save the variables, then shut the kernel down); every act's `Outcome` is told to the
`listeners` (the guard, whose rules may wait to hear it), done or failed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import IO, Any

from jupyter_costguard.guard.base import Act, Outcome

log = logging.getLogger("jupyter_costguard")

#: How long the shutdown command may run before it is killed.
COMMAND_TIMEOUT_SECONDS = 120.0
#: Hibernate a kernel, automatically (the server's `_hibernate_idle`: it shuts the kernel down
#: only when every variable was saved and no cell ran since the save began): its snapshot's
#: document, or an exception saying why not (which names the variables that block it).
Hibernate = Callable[[str], Awaitable[Mapping[str, Any]]]
#: How much of the command's output (the end of it) goes into the log.
OUTPUT_TAIL_BYTES = 4000


class Actor:
    """Kernel actions through the kernel manager; the shutdown command as a subprocess."""

    def __init__(self, kernel_manager: Any, stop_server: Callable[[], Awaitable[None] | None],
                 loop: asyncio.AbstractEventLoop,
                 command_timeout: float = COMMAND_TIMEOUT_SECONDS,
                 hibernate: Hibernate | None = None) -> None:
        self.kernel_manager = kernel_manager
        self.hibernate = hibernate
        #: told every act's outcome (on the loop; a listener must not block)
        self.listeners: list[Callable[[Outcome], None]] = []
        self.stop_server = stop_server
        self.loop = loop
        self.command_timeout = command_timeout
        self.done: list[Act] = []  # what was carried out (tests, the log)
        self.failed: list[Act] = []  # what was tried and did not work
        self._tasks: set[asyncio.Future[bool]] = set()  # keep running acts referenced

    def dispatch(self, act: Act) -> None:
        """Thread-safe: schedules `run(act)` on the loop."""
        try:
            self.loop.call_soon_threadsafe(self._start, act)
        except RuntimeError:  # the loop is closed: the server is going away anyway
            log.error("costguard: cannot carry out %s (%s): the event loop has stopped",
                      act.action, act.reason)
            self.failed.append(act)
            self._tell(act, "the event loop has stopped")

    def _start(self, act: Act) -> None:
        task = asyncio.ensure_future(self.run(act))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _tell(self, act: Act, error: str | None,
              result: Mapping[str, Any] | None = None) -> None:
        outcome = Outcome(act=act, time=time.time(), error=error, result=result or {})
        for listen in self.listeners:
            try:
                listen(outcome)
            except Exception:
                log.exception("costguard: a listener failed to hear %s", act.action)

    async def run(self, act: Act) -> bool:
        """Carry out `act`; True when it worked. Never raises (except cancellation)."""
        if act.action == "hibernate-kernel" and act.kernel_id:
            return await self._hibernate(act)
        error = await self._carry_out(act)
        (self.done if error is None else self.failed).append(act)
        self._tell(act, error)
        return error is None

    async def _carry_out(self, act: Act) -> str | None:
        """None when `act` worked, else why not (logged)."""
        try:
            km = self.kernel_manager
            if act.action == "interrupt-kernel" and act.kernel_id:
                await _maybe(km.interrupt_kernel(act.kernel_id))
            elif act.action == "restart-kernel" and act.kernel_id:
                await _maybe(km.restart_kernel(act.kernel_id))
            elif act.action == "shutdown-kernel" and act.kernel_id:
                await _maybe(km.shutdown_kernel(act.kernel_id))
            elif act.action == "run-command" and act.command:
                if not await self.run_command(act.command):
                    return "the shutdown command failed"
            elif act.action == "stop-server":
                await _maybe(self.stop_server())
            else:
                log.error("costguard: unknown or incomplete guard action %r", act)
                return f"unknown or incomplete guard action {act.action!r}"
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.exception("costguard: guard action %s failed", act.action)
            return str(e) or type(e).__name__
        return None

    async def _hibernate(self, act: Act) -> bool:
        """A refused hibernation is expected (a kernel too big to save, gone, busy): logged
        with its reason, no traceback, and told to the listeners with the snapshot."""
        assert act.kernel_id
        try:
            if self.hibernate is None:
                raise RuntimeError("hibernate is not available on this server")
            doc = await self.hibernate(act.kernel_id)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.warning("costguard: kernel %s was not hibernated: %s", act.kernel_id, e)
            self.failed.append(act)
            self._tell(act, str(e) or type(e).__name__)
            return False
        log.warning("costguard: kernel %s hibernated as snapshot %s", act.kernel_id,
                    doc.get("id"))
        self.done.append(act)
        self._tell(act, None, doc)
        return True

    async def run_command(self, command: Sequence[str]) -> bool:
        """Run the shutdown command, bounded by `command_timeout`; True when it exited 0."""
        argv = [str(a) for a in command]
        log.warning("costguard: running the shutdown command %s", argv)
        with tempfile.TemporaryFile() as out:
            try:
                proc = await asyncio.create_subprocess_exec(
                    *argv, stdin=asyncio.subprocess.DEVNULL, stdout=out,
                    stderr=asyncio.subprocess.STDOUT, start_new_session=os.name == "posix")
            except (OSError, ValueError) as e:  # missing, not executable, bad argv
                log.error("costguard: the shutdown command %s could not be started: %s",
                          argv, e)
                return False
            try:
                code = await asyncio.wait_for(proc.wait(), self.command_timeout)
            except asyncio.TimeoutError:
                _kill(proc)
                try:
                    await asyncio.wait_for(proc.wait(), 10.0)
                except asyncio.TimeoutError:
                    pass
                log.error("costguard: the shutdown command %s did not finish within %g s and "
                          "was killed; its output: %s", argv, self.command_timeout, _tail(out))
                return False
            output = _tail(out)
        if code != 0:
            log.error("costguard: the shutdown command %s failed (exit status %s); its "
                      "output: %s", argv, code, output)
            return False
        log.warning("costguard: the shutdown command %s finished (exit status 0); its "
                    "output: %s", argv, output)
        return True


def _kill(proc: asyncio.subprocess.Process) -> None:
    """Kill the command and everything it started (its own session on POSIX)."""
    try:
        if os.name == "posix":
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
    except (ProcessLookupError, PermissionError, OSError):
        pass


def _tail(out: IO[bytes]) -> str:
    try:
        size = out.seek(0, os.SEEK_END)
        out.seek(max(0, size - OUTPUT_TAIL_BYTES))
        text = out.read().decode(errors="replace").strip()
    except OSError as e:
        return f"<unreadable: {e}>"
    if not text:
        return "<none>"
    return ("…" if size > OUTPUT_TAIL_BYTES else "") + text


async def _maybe(value: Any) -> None:
    if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
        await value
