"""Carries out the guard's acts on the IO loop, where the kernel manager lives.

Nothing here may take the server down by accident: every failure (a kernel that is already
gone, a shutdown command that is missing, fails or hangs) is logged and swallowed. The
shutdown command runs in its own session with its output captured in a temporary file, is
given `command_timeout` seconds, and is then killed together with whatever it started.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from typing import IO, Any

from jupyter_costguard.guard.base import Act

log = logging.getLogger("jupyter_costguard")

#: How long the shutdown command may run before it is killed.
COMMAND_TIMEOUT_SECONDS = 120.0
#: How much of the command's output (the end of it) goes into the log.
OUTPUT_TAIL_BYTES = 4000


class Actor:
    """Kernel actions through the kernel manager; the shutdown command as a subprocess."""

    def __init__(self, kernel_manager: Any, stop_server: Callable[[], Awaitable[None] | None],
                 loop: asyncio.AbstractEventLoop,
                 command_timeout: float = COMMAND_TIMEOUT_SECONDS) -> None:
        self.kernel_manager = kernel_manager
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

    def _start(self, act: Act) -> None:
        task = asyncio.ensure_future(self.run(act))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def run(self, act: Act) -> bool:
        """Carry out `act`; True when it worked. Never raises (except cancellation)."""
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
                    self.failed.append(act)
                    return False
            elif act.action == "stop-server":
                await _maybe(self.stop_server())
            else:
                log.error("costguard: unknown or incomplete guard action %r", act)
                self.failed.append(act)
                return False
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("costguard: guard action %s failed", act.action)
            self.failed.append(act)
            return False
        self.done.append(act)
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
