"""Hibernate through a real hub: a user's own token on a user's server, through the proxy
(the hostile-user tests of issue 44: one user's snapshots are not another's)."""

from __future__ import annotations

import json
import time
from typing import Any

from tests.support.hub import Hub, wait_for


def costguard(hub: Hub, method: str, user: str, path: str, token: str) -> tuple[int, Any]:
    """`method` on `user`'s server's costguard API with `token`: (status, JSON or None)."""
    status, _, body = hub.request(method, f"/user/{user}/costguard/api/{path}", token,
                                  {} if method == "POST" else None)
    try:
        return status, json.loads(body) if body else None
    except ValueError:
        return status, body.decode(errors="replace")


def hibernate_notebook(hub: Hub, user: str, token: str, notebook: str) -> dict[str, Any]:
    """A kernel of `notebook` started on `user`'s server and hibernated: the answer."""
    status, _, body = hub.request("POST", f"/user/{user}/api/sessions", token, {
        "path": notebook, "name": notebook, "type": "notebook", "kernel": {"name": "python3"}})
    assert status == 201, body
    kernel_id = json.loads(body)["kernel"]["id"]

    def hibernated() -> Any:  # a kernel just started is busy a moment (409 until idle)
        status, doc = costguard(hub, "POST", user, f"kernels/{kernel_id}/hibernate", token)
        if status == 409:
            time.sleep(0.5)
            return None
        assert status == 200, doc
        return doc

    doc: dict[str, Any] = wait_for(hibernated, 120, f"{user}'s kernel hibernated")
    return doc


def listed(hub: Hub, user: str, token: str) -> list[str]:
    """The ids `user`'s server lists to `token`."""
    status, doc = costguard(hub, "GET", user, "snapshots", token)
    assert status == 200, doc
    return [s["id"] for s in doc["snapshots"]]
