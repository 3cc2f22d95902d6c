"""Batch jobs through the in-process server's REST API: submit, poll, read the log; every
document is held to the OpenAPI document on the way."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from tests.support.openapi_check import validate
from tests.support.rest import Fetch, get_json


async def post(jp_fetch: Fetch, *parts: str, body: Any = None, code: int = 200) -> Any:
    resp = await jp_fetch("costguard", "api", *parts, method="POST",
                          body=json.dumps(body) if body is not None else "")
    assert resp.code == code
    doc = json.loads(resp.body)
    validate("/" + "/".join(parts), code, doc, method="post")
    return doc


async def submit(jp_fetch: Fetch, notebook: str, selected: list[str], **extra: Any) -> Any:
    return await post(jp_fetch, "jobs", body={"notebook": notebook, "selected": selected,
                                              **extra}, code=201)


async def job(jp_fetch: Fetch, job_id: int) -> Any:
    doc = await get_json(jp_fetch, "costguard", "api", "jobs", str(job_id))
    validate(f"/jobs/{job_id}", 200, doc)
    return doc


async def wait_job(jp_fetch: Fetch, job_id: int, predicate: Any = None,
                   timeout: float = 90.0) -> Any:
    predicate = predicate or (lambda d: d["state"] in ("succeeded", "failed", "cancelled",
                                                        "lost"))
    deadline = time.monotonic() + timeout
    doc: Any = None
    while time.monotonic() < deadline:
        doc = await job(jp_fetch, job_id)
        if predicate(doc):
            return doc
        await asyncio.sleep(0.1)
    raise AssertionError(f"job {job_id}: condition not met in {timeout}s; last: {doc}")


async def full_log(jp_fetch: Fetch, job_id: int) -> str:
    text, offset = "", 0
    while True:
        chunk = await get_json(jp_fetch, "costguard", "api", "jobs", str(job_id), "log",
                               params={"offset": str(offset), "limit": "7"})
        validate(f"/jobs/{job_id}/log", 200, chunk)
        text += chunk["text"]
        if chunk["next_offset"] == offset:
            return text
        offset = chunk["next_offset"]
