"""Work handed to a worker thread while the server shuts down.

A request that reaches a service after its worker was shut down (the server is stopping)
must be told so, not fail with "cannot schedule new futures after shutdown": `on_worker`
turns the executor's refusal into `ShuttingDown`, which the API answers with a 503."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, TypeVar

T = TypeVar("T")

SHUTTING_DOWN_MESSAGE = "the server is shutting down; costguard no longer answers this"


class ShuttingDown(RuntimeError):
    """The service is stopping or stopped: its workers take no more work."""

    def __init__(self, message: str = SHUTTING_DOWN_MESSAGE) -> None:
        super().__init__(message)


async def on_worker(executor: Executor, fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` on `executor`; `ShuttingDown` when the executor was shut down."""
    try:
        future = asyncio.get_running_loop().run_in_executor(executor, fn, *args)
    except RuntimeError as e:  # concurrent.futures: "cannot schedule new futures after shutdown"
        raise ShuttingDown() from e
    return await future
