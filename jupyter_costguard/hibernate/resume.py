"""Resume on use (issue 44 item 2): a notebook's next kernel starts with its variables.

When the server starts a new kernel for a notebook session (`POST /api/sessions`, or a
session's kernel changed by `PATCH`) and the notebook has a pending snapshot (its newest, of
this owner, not restored), the snapshot is restored into that kernel *first*: the session's
answer is held until the kernel has begun running the restore cell. A client sends cells
only after that answer, and a kernel runs its shell messages one at a time in the order they
came, so every cell any client (JupyterLab, Notebook 7, nbclient) sends afterwards runs after
the restore, with the variables. JupyterLab and Notebook 7 start a session under a random
placeholder path and then `PATCH` the notebook's path before they send a cell: the kernel
stays fresh until then, and that answer is the one held. While it loads, the snapshot's doc says
`restoring` (the notebook's banner shows "Restoring N variables (size)").

A restore that fails never lets a cell run silently in the empty kernel: the kernel is armed
(`kernel/resume.py`) so that the user's next cell raises the reason instead of running, and
the snapshot's doc carries `restore_error`; the snapshot stays pending (the banner offers
Restore and Discard). The server's session manager is wrapped, not replaced: its own logic is
untouched, and a kernel it did not start itself (an existing one joined to a session) is left
alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from jupyter_costguard.hibernate.errors import HibernateError
from jupyter_costguard.hibernate.kernelcall import call
from jupyter_costguard.hibernate.service import HibernateService
from jupyter_costguard.hibernate.store import SnapshotRecord
from jupyter_costguard.kernel.resume import failed_code, resume_code


def _size(n: int) -> str:
    """1.5 GiB, 320 KiB: as the banner says it."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"  # pragma: no cover


#: how long the session's answer waits for the kernel to begin the restore (seconds): past it
#: (the snapshot's store does not answer) the kernel is armed with why instead
START_SECONDS = 20.0


def failure_message(record: SnapshotRecord) -> str:
    """What the user's first cell says when the snapshot could not be restored; `{why}` is
    where the reason goes."""
    count = len(record.saved)
    return (f"costguard: the variables of {record.notebook} were not restored: snapshot "
            f"{record.id} ({count} variable{'' if count == 1 else 's'}, "
            f"{_size(record.bytes)}) could not be loaded into this kernel: {{why}}. This cell "
            "did not run. Run it again to run it in the empty kernel, or use the notebook's "
            "banner to restore or discard the snapshot.")


class Resume:
    """Restores a notebook's pending snapshot into the notebook's new kernels (see the
    module's doc). `install()` wraps the session manager; `enabled` may be turned off."""

    def __init__(self, service: HibernateService, session_manager: Any, logger: Any = None,
                 enabled: bool = True) -> None:
        self.service = service
        self.sessions = session_manager
        self.log = logger
        self.enabled = enabled
        #: kernels the session manager started and has not tied to a session yet
        self._fresh: set[str] = set()
        #: the restores under way (kept so that they are not collected mid-flight)
        self._tasks: set[asyncio.Task[None]] = set()

    def install(self) -> None:
        self.service.listeners.append(self._settled)
        sm = self.sessions
        start, create, update = (sm.start_kernel_for_session, sm.create_session,
                                 sm.update_session)

        async def start_kernel_for_session(*args: Any, **kwargs: Any) -> Any:
            kernel_id = await start(*args, **kwargs)
            with contextlib.suppress(Exception):  # forget those gone before being named
                self._fresh &= {str(k) for k in self.service.km.list_kernel_ids()}
            self._fresh.add(str(kernel_id))
            return kernel_id

        async def create_session(*args: Any, **kwargs: Any) -> Any:
            model = await create(*args, **kwargs)
            with contextlib.suppress(KeyError, TypeError):
                await self.kernel_started(str(model["kernel"]["id"]))
            return model

        async def update_session(session_id: Any, **kwargs: Any) -> Any:
            done = await update(session_id, **kwargs)
            kernel_id = kwargs.get("kernel_id")
            if not kernel_id and kwargs.get("path") and self._fresh:
                with contextlib.suppress(Exception):  # JupyterLab names the real path now
                    kernel_id = (await sm.get_session(session_id=session_id))["kernel"]["id"]
            if kernel_id:
                await self.kernel_started(str(kernel_id))
            return done

        sm.start_kernel_for_session = start_kernel_for_session
        sm.create_session = create_session
        sm.update_session = update_session

    async def _settled(self, snapshot_id: str) -> None:
        """Restored (by hand too) or deleted: what resume on use said of it is over."""
        self.service.resuming.pop(snapshot_id, None)

    async def kernel_started(self, kernel_id: str) -> None:
        """A session now has `kernel_id`: if the server started it just now for a notebook
        with a pending snapshot, restore that first. Returns once the kernel has begun the
        restore (or has been armed with why it cannot); never raises."""
        if kernel_id not in self._fresh:
            return
        try:
            notebook = self.service.notebook_of(kernel_id)
            if notebook is None:  # a placeholder path (`session_paths`): the real one comes next
                return
            self._fresh.discard(kernel_id)
            if not self.enabled:
                return
            record = await self.service.pending(notebook)
        except Exception:
            if self.log is not None:
                self.log.exception("costguard: resume on use: looking for a snapshot of the "
                                   "session of kernel %s failed", kernel_id)
            return
        if record is None:
            return
        started = asyncio.Event()
        task = asyncio.ensure_future(self._restore(record, kernel_id, started))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        waiter = asyncio.ensure_future(started.wait())
        limit = min(START_SECONDS, self.service.settings.timeout_seconds)
        try:
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED,
                               timeout=limit)
        finally:
            waiter.cancel()
        if started.is_set() or task.done():
            return
        # the snapshot could not even be read in time (a store that does not answer): the
        # session is not held any longer, and its first cell must not run unwarned
        task.cancel()
        why = (f"the snapshot could not be read within {limit:g} s (is its store "
               "reachable?)")
        self.service.resuming[record.id] = {"restore_error": why}
        if self.log is not None:
            self.log.warning("costguard: resume on use: snapshot %s was not restored into "
                             "kernel %s: %s", record.id, kernel_id, why)
        armed = asyncio.Event()
        arm = asyncio.ensure_future(
            self._arm(kernel_id, failure_message(record).replace("{why}", why), record.saved,
                      armed))
        self._tasks.add(arm)
        arm.add_done_callback(self._tasks.discard)
        waiter = asyncio.ensure_future(armed.wait())
        try:
            await asyncio.wait({arm, waiter}, return_when=asyncio.FIRST_COMPLETED,
                               timeout=limit)
        finally:
            waiter.cancel()

    async def _restore(self, record: SnapshotRecord, kernel_id: str, started: asyncio.Event
                       ) -> None:
        message = failure_message(record)
        self.service.resuming[record.id] = {"restoring": {
            "kernel_id": kernel_id, "since": time.time(), "variables": len(record.saved),
            "bytes": record.bytes}}
        if self.log is not None:
            self.log.info("costguard: resume on use: restoring snapshot %s (%d variables) into "
                          "kernel %s of %s", record.id, len(record.saved), kernel_id,
                          record.notebook)
        try:
            await self.service.restore(record.id, kernel_id,
                                       wrap=lambda code: resume_code(code, message,
                                                                     record.saved),
                                       started=started.set)
        except HibernateError as e:
            self.service.resuming[record.id] = {"restore_error": str(e)}
            if self.log is not None:
                self.log.warning("costguard: resume on use: snapshot %s was not restored "
                                 "into kernel %s: %s", record.id, kernel_id, e)
            if not started.is_set():  # refused before the kernel ran anything: tell it first
                await self._arm(kernel_id, message.replace("{why}", str(e)), record.saved,
                                started)
        except Exception as e:  # a bug must not leave the session waiting, nor pass silently
            self.service.resuming[record.id] = {"restore_error": f"{type(e).__name__}: {e}"}
            if self.log is not None:
                self.log.exception("costguard: resume on use: restoring snapshot %s failed",
                                   record.id)
            if not started.is_set():
                await self._arm(kernel_id, message.replace("{why}", str(e)), record.saved,
                                started)
        else:
            self.service.resuming.pop(record.id, None)
        finally:
            started.set()

    async def _arm(self, kernel_id: str, message: str, names: list[str],
                   started: asyncio.Event) -> None:
        """Make the kernel's next user cell raise `message` (its first message)."""
        try:
            kernel = self.service.km.get_kernel(kernel_id)
            await call(kernel, kernel_id, failed_code(message, names),
                       self.service.settings.timeout_seconds, "saying the restore failed",
                       started=started.set)
        except Exception as e:  # the arming cell prints no answer: that is expected
            if not isinstance(e, HibernateError) and self.log is not None:
                self.log.warning("costguard: could not tell kernel %s that its restore "
                                 "failed: %s", kernel_id, e)
