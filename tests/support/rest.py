"""The REST API of the in-process server (pytest-jupyter's `jp_fetch`)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

Fetch = Callable[..., Awaitable[Any]]


async def get_json(jp_fetch: Fetch, *parts: str, **kw: Any) -> Any:
    resp = await jp_fetch(*parts, **kw)
    return json.loads(resp.body)


async def wait_for(jp_fetch: Fetch, predicate: Callable[[dict[str, Any]], bool],
                   endpoint: str = "status", timeout: float = 30.0) -> dict[str, Any]:
    """Poll a costguard document until `predicate` holds (samples arrive asynchronously)."""
    deadline = time.monotonic() + timeout
    doc: dict[str, Any] = {}
    while time.monotonic() < deadline:
        doc = await get_json(jp_fetch, "costguard", "api", endpoint)
        if predicate(doc):
            return doc
        await asyncio.sleep(0.1)
    raise AssertionError(f"condition not met within {timeout}s; last {endpoint}: {doc}")


async def start_session(jp_fetch: Fetch, path: str, kernel: str = "python3") -> dict[str, Any]:
    body = json.dumps({"path": path, "type": "notebook", "name": "",
                       "kernel": {"name": kernel}})
    return await get_json(jp_fetch, "api", "sessions", method="POST", body=body)
