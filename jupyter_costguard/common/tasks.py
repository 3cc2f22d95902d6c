"""Ending an asyncio task at stop: one way for the server's loops and the hub service's."""

from __future__ import annotations

import asyncio
from typing import Any


async def cancel_and_wait(task: asyncio.Future[Any] | None) -> None:
    """`task` cancelled and waited for, whatever it raised on the way out: a stop goes on
    (its own last steps follow), and the task has ended when this returns."""
    if task is None:
        return
    task.cancel()
    try:
        await task
    except (asyncio.CancelledError, Exception):
        pass
