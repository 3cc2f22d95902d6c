"""The final save on a warning signal: SIGUSR1 (Slurm's `--signal`, ahead of a time limit)
persists the newest state given to `save`, even one `every=N` held back, and waits for its
upload. This module holds that newest state per location.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from dataclasses import dataclass
from typing import Any

from jupyter_costguard.common.files import write_bytes
from jupyter_costguard.kernel.checkpoint.settings import ENV_JOB_DIR, SIGNAL_OK
from jupyter_costguard.kernel.checkpoint.upload import persist, wait

_log = logging.getLogger(__name__)


@dataclass
class _Newest:
    """The state of the newest `save` call per location, for a final save on SIGUSR1."""

    state: Any
    step: int
    keep: int
    background: bool | None
    persisted: bool


_lock = threading.RLock()  # re-entrant: the SIGUSR1 handler may run inside a `save`
_newest: dict[str, _Newest] = {}
_calls: dict[str, int] = {}


def defer(loc: str, every: int, state: Any, step: int, keep: int, background: bool | None
          ) -> bool:
    """Count a `save` call at `loc`; True when `every` skips this one, whose state is then kept
    for a final save."""
    with _lock:
        _calls[loc] = calls = _calls.get(loc, 0) + 1
        if calls % every:
            _newest[loc] = _Newest(state, step, keep, background, persisted=False)
            return True
    return False


def mark_written(loc: str, step: int, keep: int, background: bool | None) -> None:
    """A `save` at `loc` was written: nothing for a final save to do, and no reason to hold on
    to its state."""
    with _lock:
        _newest[loc] = _Newest(None, step, keep, background, persisted=True)


_handlers: dict[int, int] = {}  # signal -> pid of the process that installed our handler
_auto_tried = False


def auto_enable() -> None:
    """The first save inside a job installs the SIGUSR1 handler (main thread only)."""
    global _auto_tried
    if _auto_tried or not os.environ.get(ENV_JOB_DIR, "").strip():
        return
    if threading.current_thread() is not threading.main_thread():
        return
    _auto_tried = True
    try:
        enable_final_save()
    except Exception as e:
        _log.warning("no final checkpoint on SIGUSR1: %s: %s", type(e).__name__, e)


def enable_final_save(signum: int | None = None) -> bool:
    """On `signum` (default SIGUSR1), persist the newest state given to `save` and wait for its
    upload, then call whatever handler was there before.

    Inside a job this also writes `$COSTGUARD_JOB_DIR/signal-ok` (this process's pid), which
    tells the runner it may forward the batch system's warning signal to the kernel; without
    a handler that signal would kill it. Must be called from the main thread; returns False
    where it can't be installed (another thread, no SIGUSR1 on this platform).
    """
    sig = signum if signum is not None else getattr(signal, "SIGUSR1", None)
    if sig is None:
        return False
    if threading.current_thread() is not threading.main_thread():
        _log.warning("checkpoint.enable_final_save() must be called from the main thread")
        return False
    pid = os.getpid()
    with _lock:
        if _handlers.get(sig) != pid:
            previous = signal.getsignal(sig)

            def on_signal(signum: int, frame: Any) -> None:
                if os.getpid() == pid:  # not in a forked child that inherited the handler
                    _final_save(signum)
                if callable(previous):
                    previous(signum, frame)

            signal.signal(sig, on_signal)
            _handlers[sig] = pid
    _write_signal_ok()
    return True


def _write_signal_ok() -> None:
    job_dir = os.environ.get(ENV_JOB_DIR, "").strip()
    if not job_dir:
        return
    path = os.path.join(job_dir, SIGNAL_OK)
    try:
        write_bytes(path, f"{os.getpid()}\n".encode())
    except OSError as e:
        _log.warning("could not write %s: %s", path, e)


def _final_save(signum: int) -> None:
    """Persist each location's newest unsaved state, then flush uploads; never raises (it
    runs inside a signal handler, in the middle of the user's code)."""
    with _lock:
        todo = [(loc, n) for loc, n in _newest.items() if not n.persisted]
    saved: list[str] = []
    for loc, n in todo:
        try:
            persist(n.state, n.step, loc, n.keep, n.background)
        except Exception as e:
            _log.warning("final checkpoint of step %d at %s failed: %s: %s", n.step, loc,
                         type(e).__name__, e)
            continue
        n.persisted, n.state = True, None
        saved.append(f"step {n.step}")
    uploaded = wait()
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = str(signum)
    what = ", ".join(saved) if saved else "nothing new (the newest save was already written)"
    print(f"costguard: {name}: final checkpoint: {what}"
          + ("" if uploaded else "; some uploads failed"), file=sys.stderr, flush=True)


def _after_fork_in_child() -> None:
    """A forked child must not inherit a lock some thread of the parent held."""
    global _lock
    _lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
