"""Requests that reach costguard while (or after) the server shuts it down are told so: a
503 with a message, never a 500 ("cannot schedule new futures after shutdown" came back from
`GET history` when the demo's server was stopped). The server is real (pytest-jupyter); its
services are stopped as `stop_extension` stops them, and the server's own stop then finds
them stopped already."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from tests.support.openapi_check import validate
from tests.support.rest import get_json

pytestmark = pytest.mark.usefixtures("no_leftover_jobs")


async def refused(jp_fetch: Any, *parts: str, **kw: Any) -> dict[str, Any]:
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("costguard", "api", *parts, **kw)
    assert caught.value.code == 503, caught.value.response.body if caught.value.response \
        else caught.value
    assert caught.value.response is not None
    doc: dict[str, Any] = json.loads(caught.value.response.body)
    assert "shutting down" in doc["message"]
    return doc


async def test_history_after_the_service_stopped_is_a_503(jp_fetch, jp_serverapp):
    await get_json(jp_fetch, "costguard", "api", "history")  # answers while it runs
    service = jp_serverapp.web_app.settings["costguard_service"]
    await service.stop()
    doc = await refused(jp_fetch, "history")
    assert doc["status"] == 503
    validate("/history", 503, doc)
    await refused(jp_fetch, "history", params={"minutes": "60", "fit": "true"})
    await service.stop()  # the server's own stop, after this one: nothing left to do


async def test_jobs_after_the_job_service_stopped_are_a_503(jp_fetch, jp_serverapp):
    await get_json(jp_fetch, "costguard", "api", "jobs")
    jobs = jp_serverapp.web_app.settings["costguard_jobs"]
    await jobs.stop()
    await refused(jp_fetch, "jobs")
    await jobs.stop()
