"""SkyPilot SDK calls on threads of their own, so that the job worker never waits for them.

Through a busy API server a launch takes seconds to tens of seconds (it uploads the task's
file mounts), and so can a queue request. The job service has one worker thread, which every
job request (list, get, log, cancel) and every follow tick of every backend goes through:
one slow call there stalls them all. So the backend starts its calls here and reads their
answers on a later tick. A call only returns a value (or raises); applying it to the job's
files is left to the worker, the only thread that writes them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any


class Calls:
    """Named calls: at most one runs per name; the worker takes each answer once."""

    def __init__(self, workers: int = 2) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers,
                                        thread_name_prefix="costguard-skypilot")
        self._lock = threading.Lock()
        self._calls: dict[str, Future[Any]] = {}

    def start(self, name: str, fn: Callable[[], Any], keep: bool = True) -> bool:
        """Start `fn` as `name` unless a call of that name runs or waits to be taken;
        whether it started. ``keep=False``: nothing to take, the name is free once it ends
        (a call that keeps its answer itself)."""
        with self._lock:
            if name in self._calls:
                return False
            call = self._pool.submit(fn)
            self._calls[name] = call
        if not keep:
            call.add_done_callback(lambda done: self._forget(name, done))
        return True

    def _forget(self, name: str, call: Future[Any]) -> None:
        with self._lock:
            if self._calls.get(name) is call:
                del self._calls[name]

    def known(self, name: str) -> bool:
        """Whether a call of that name runs, or has ended and waits to be taken."""
        with self._lock:
            return name in self._calls

    def take(self, name: str) -> Future[Any] | None:
        """The ended call's future (its result or exception), once; None while it runs or
        when there is none."""
        with self._lock:
            call = self._calls.get(name)
            if call is None or not call.done():
                return None
            del self._calls[name]
            return call

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
