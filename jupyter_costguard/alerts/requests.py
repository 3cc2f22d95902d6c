"""What a client may send to raise, dismiss or snooze an alert: checked against the API
document's request schemas (`common/apischema`), then read; only the rule that spans fields
(an `open-url` action's URL) is written here. A refusal is an `AlertError` that names the
field (the handlers turn it into a 4xx)."""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import urlparse

from jupyter_costguard.alerts.store import AlertError
from jupyter_costguard.common.apischema import RequestSchema, SchemaError

#: the document's request schemas: fields, types and limits are written there only
RAISE_REQUEST = RequestSchema("AlertRequest")
SNOOZE_REQUEST = RequestSchema("SnoozeRequest")
DISMISS_REQUEST = RequestSchema("DismissRequest", required=False)


def check(schema: RequestSchema, body: Any) -> None:
    """AlertError naming the field unless `schema` accepts `body`."""
    try:
        schema.check(body)
    except SchemaError as e:
        raise AlertError(str(e)) from None


def _http_url(url: str, where: str) -> None:
    """An `open-url` action's URL (the schema has checked its type, length and scheme) must
    also parse with a host: a rule on `args` that only `id` turns on."""
    try:
        parsed = urlparse(url)
    except ValueError:
        raise AlertError(f"{where} is not a valid URL") from None
    if parsed.scheme.lower() not in ("http", "https") or not parsed.netloc:
        raise AlertError(f"{where} must be an absolute http or https URL")


def parse_actions(value: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """A checked request's actions, with the open-url rule applied."""
    out = []
    for i, action in enumerate(value or ()):
        doc: dict[str, Any] = {"id": action["id"], "label": action["label"]}
        if "args" in action:
            doc["args"] = action["args"]
        if doc["id"] == "open-url":
            _http_url(doc["args"]["url"], f"actions[{i}].args.url")
        out.append(doc)
    return out


RAISE_FIELDS = ("kind", "severity", "title", "message", "notebook", "kernel_id", "actions",
                "details", "key")


def parse_raise_request(body: Any) -> dict[str, Any]:
    """Check a `POST alerts` body; returns keyword arguments for `AlertStore.upsert`."""
    check(RAISE_REQUEST, body)
    notebook = body.get("notebook")
    key = body.get("key")
    return {
        "kind": body["kind"],
        # without a key every POST is its own alert
        "key": key if key is not None else "api:" + uuid.uuid4().hex,
        "severity": body["severity"],
        "title": body["title"],
        "message": body["message"],
        # server-relative, as sessions and the notebooks documents have it
        "notebook": notebook.strip("/") if notebook is not None else None,
        "kernel_id": body.get("kernel_id"),
        "actions": parse_actions(body.get("actions")),
        "details": body.get("details") or {},
        "source": "api",
    }


def parse_snooze_request(body: Any) -> int:
    """Check a snooze body; the seconds (JSON's 60.0 is the integer 60)."""
    check(SNOOZE_REQUEST, body)
    return int(body["seconds"])
