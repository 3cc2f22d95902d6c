"""Carries out the guard's acts on the IO loop, where the kernel manager lives."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from .base import Act

log = logging.getLogger("jupyter_costguard")


class Actor:
    """Kernel actions through the kernel manager; the shutdown command as a subprocess."""

    def __init__(self, kernel_manager: Any, stop_server: Callable[[], Awaitable[None] | None],
                 loop: asyncio.AbstractEventLoop) -> None:
        self.kernel_manager = kernel_manager
        self.stop_server = stop_server
        self.loop = loop
        self.done: list[Act] = []  # what was carried out (tests, the log)

    def dispatch(self, act: Act) -> None:
        """Thread-safe: schedules `run(act)` on the loop."""
        self.loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self.run(act)))

    async def run(self, act: Act) -> None:
        try:
            km = self.kernel_manager
            if act.action == "interrupt-kernel" and act.kernel_id:
                await _maybe(km.interrupt_kernel(act.kernel_id))
            elif act.action == "restart-kernel" and act.kernel_id:
                await _maybe(km.restart_kernel(act.kernel_id))
            elif act.action == "shutdown-kernel" and act.kernel_id:
                await _maybe(km.shutdown_kernel(act.kernel_id))
            elif act.action == "run-command" and act.command:
                proc = await asyncio.create_subprocess_exec(
                    *act.command, stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.STDOUT)
                out, _ = await proc.communicate()
                log.warning("costguard: shutdown command %s exited %s: %s", list(act.command),
                            proc.returncode, out.decode(errors="replace")[-2000:])
            elif act.action == "stop-server":
                await _maybe(self.stop_server())
            else:
                log.error("costguard: unknown guard action %r", act.action)
                return
            self.done.append(act)
        except Exception:
            log.exception("costguard: guard action %s failed", act.action)


async def _maybe(value: Any) -> None:
    if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
        await value
