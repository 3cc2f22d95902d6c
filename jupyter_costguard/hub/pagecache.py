"""The pages' figures kept ready: each answer computed on the worker and reused while the store
has not changed or is young enough, so opening a page costs next to nothing at any scale.

With thousands of servers reporting the store changes hundreds of times a second, and a page
would otherwise recompute every figure on every open. While a page is open (it asks again
every 30 s), what pages asked for and the admin's default views are recomputed in the
background after each look at the Hub; while none is, nothing is (at 10,000 servers the three
default views are a second of work a cycle, for no one), and the first open computes its own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

T = TypeVar("T")
#: the most answers kept ready after each look at the Hub (the most recently asked): however
#: many different queries users send, the background work per cycle is bounded
MAX_KEPT_READY = 16
#: a query not asked for this long is no longer kept ready; while none was, no page is open
#: (an open page asks again every 30 s) and the default views are not kept ready either
ASKED_SECONDS = 90.0
#: the most answers held at once
MAX_HELD = 256

Key = tuple[Any, ...]
Work = Callable[..., Any]


def cache_key(fn: Work, args: tuple[Any, ...]) -> Key:
    """A key for `fn(*args)`: lists as tuples, unhashable objects by identity."""
    parts: list[Any] = [fn.__name__]
    for arg in args:
        if isinstance(arg, list):
            parts.append(tuple(arg))
            continue
        try:
            hash(arg)
        except TypeError:
            parts.append(("id", id(arg)))
            continue
        parts.append(arg)
    return tuple(parts)


class PageCache:
    def __init__(self, version: Callable[[], int],
                 run: Callable[..., Awaitable[Any]], max_age: Callable[[], float]) -> None:
        #: the store's version now (bumped by every write)
        self.version = version
        #: runs work on the service's worker thread
        self.run = run
        #: how old an answer may be (seconds)
        self.max_age = max_age
        #: key -> (store version, when computed (monotonic), value)
        self.held: dict[Key, tuple[int, float, Any]] = {}
        self.computing: dict[Key, asyncio.Future[Any]] = {}
        #: what pages asked for, and when last (refresh keeps these ready)
        self.asked: dict[Key, tuple[Work, tuple[Any, ...], float]] = {}

    async def answer(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on the worker, answered from what is held: as is while the store has
        not changed; while it is younger than `max_age` (and, up to twice that, while a
        fresh one is computed in the background); else computed now."""
        key = cache_key(fn, args)
        self.asked.pop(key, None)
        self.asked[key] = (fn, args, time.monotonic())
        while len(self.asked) > MAX_KEPT_READY:  # the least recently asked first
            del self.asked[next(iter(self.asked))]
        hit = self.held.get(key)
        if hit is not None:
            version, at, value = hit
            age = time.monotonic() - at
            limit = self.max_age()
            if version == self.version() or age < limit:
                return cast(T, value)
            if age < 2 * limit:
                if key not in self.computing:
                    self.computing[key] = asyncio.ensure_future(self._compute(key, fn, args))
                return cast(T, value)
        pending = self.computing.get(key)
        if pending is None:
            pending = self.computing[key] = asyncio.ensure_future(self._compute(key, fn, args))
        return cast(T, await asyncio.shield(pending))

    def refresh(self, views: list[tuple[Work, tuple[Any, ...]]]) -> None:
        """Recompute, in the background, what pages asked for in the last ASKED_SECONDS and,
        while any did, `views` (the admin's defaults), so the next open finds them ready."""
        now = time.monotonic()
        for key, (_, _, used) in list(self.asked.items()):
            if now - used > ASKED_SECONDS:
                del self.asked[key]
        if not self.asked:
            return  # no page open
        ready = {cache_key(fn, args): (fn, args) for fn, args in views}
        ready.update((key, (fn, args)) for key, (fn, args, _) in self.asked.items())
        for key, (fn, args) in ready.items():
            hit = self.held.get(key)
            fresh = hit is not None and (hit[0] == self.version()
                                         or now - hit[1] < self.max_age())
            if not fresh and key not in self.computing:
                self.computing[key] = asyncio.ensure_future(self._compute(key, fn, args))

    async def _compute(self, key: Key, fn: Work, args: tuple[Any, ...]) -> Any:
        try:
            version, at = self.version(), time.monotonic()
            value = await self.run(fn, *args)
            if len(self.held) >= MAX_HELD:
                self.held.clear()
            self.held[key] = (version, at, value)
            return value
        finally:
            self.computing.pop(key, None)
