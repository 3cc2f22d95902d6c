"""What a client may send to raise or snooze an alert: parsed, bounded and checked, with a
message that says what is wrong (the handlers turn `AlertError` into a 4xx)."""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import urlparse

from jupyter_costguard.alerts.store import (
    ACTION_IDS,
    KIND_PATTERN,
    MAX_ACTIONS,
    MAX_KERNEL_ID,
    MAX_KEY,
    MAX_LABEL,
    MAX_MESSAGE,
    MAX_NOTEBOOK,
    MAX_TITLE,
    MAX_URL,
    SEVERITIES,
    SNOOZE_MAX_SECONDS,
    SNOOZE_MIN_SECONDS,
    AlertError,
)


def _string(body: dict[str, Any], name: str, limit: int, required: bool = False,
            nullable: bool = True, empty: bool = False) -> str | None:
    if name not in body or (body[name] is None and nullable and not required):
        if required:
            raise AlertError(f"{name} is required")
        return None
    v = body[name]
    if not isinstance(v, str):
        raise AlertError(f"{name} must be a string")
    if not v and not empty:
        raise AlertError(f"{name} must not be empty")
    if len(v) > limit:
        raise AlertError(f"{name} must be at most {limit} characters")
    return v


def _http_url(url: Any, where: str) -> str:
    if not isinstance(url, str) or not url:
        raise AlertError(f"{where} must be a non-empty string")
    if len(url) > MAX_URL:
        raise AlertError(f"{where} must be at most {MAX_URL} characters")
    try:
        parsed = urlparse(url)
    except ValueError:
        raise AlertError(f"{where} is not a valid URL") from None
    if parsed.scheme.lower() not in ("http", "https") or not parsed.netloc:
        raise AlertError(f"{where} must be an absolute http or https URL")
    return url


def parse_actions(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise AlertError("actions must be a list")
    if len(value) > MAX_ACTIONS:
        raise AlertError(f"actions must hold at most {MAX_ACTIONS} items")
    out = []
    for i, action in enumerate(value):
        where = f"actions[{i}]"
        if not isinstance(action, dict):
            raise AlertError(f"{where} must be an object")
        unknown = sorted(set(action) - {"id", "label", "args"})
        if unknown:
            raise AlertError(f"{where} has unknown field(s): {', '.join(unknown)}")
        aid = action.get("id")
        if aid not in ACTION_IDS:
            raise AlertError(f"{where}.id must be one of {', '.join(ACTION_IDS)}")
        label = action.get("label")
        if not isinstance(label, str) or not label:
            raise AlertError(f"{where}.label must be a non-empty string")
        if len(label) > MAX_LABEL:
            raise AlertError(f"{where}.label must be at most {MAX_LABEL} characters")
        doc: dict[str, Any] = {"id": aid, "label": label}
        if "args" in action:
            args = action["args"]
            if not isinstance(args, dict):
                raise AlertError(f"{where}.args must be an object")
            doc["args"] = args
        if aid == "open-url":
            args = doc.get("args") or {}
            _http_url(args.get("url"), f"{where}.args.url")
        out.append(doc)
    return out


RAISE_FIELDS = ("kind", "severity", "title", "message", "notebook", "kernel_id", "actions",
                "details", "key")


def parse_raise_request(body: Any) -> dict[str, Any]:
    """Check a `POST alerts` body; returns keyword arguments for `AlertStore.upsert`."""
    if not isinstance(body, dict):
        raise AlertError("request body must be a JSON object")
    unknown = sorted(set(body) - set(RAISE_FIELDS))
    if unknown:
        raise AlertError(f"unknown field(s): {', '.join(unknown)}")
    kind = _string(body, "kind", 64, required=True)
    assert kind is not None
    if not KIND_PATTERN.match(kind):
        raise AlertError("kind must be lower-case letters, digits, '.', '_' or '-' "
                         "(at most 64, starting with a letter or digit)")
    severity = body.get("severity")
    if severity is None:
        raise AlertError("severity is required")
    if severity not in SEVERITIES:
        raise AlertError(f"severity must be one of {', '.join(SEVERITIES)}")
    title = _string(body, "title", MAX_TITLE, required=True)
    message = _string(body, "message", MAX_MESSAGE, required=True, empty=True)
    notebook = _string(body, "notebook", MAX_NOTEBOOK)
    if notebook is not None:  # server-relative, as sessions and the notebooks documents have it
        notebook = notebook.strip("/")
        if not notebook:
            raise AlertError("notebook must be a notebook path")
    kernel_id = _string(body, "kernel_id", MAX_KERNEL_ID)
    key = _string(body, "key", MAX_KEY)
    details = body.get("details")
    if details is None:
        details = {}
    elif not isinstance(details, dict):
        raise AlertError("details must be an object")
    return {
        "kind": kind,
        # without a key every POST is its own alert
        "key": key if key is not None else "api:" + uuid.uuid4().hex,
        "severity": severity,
        "title": title,
        "message": message,
        "notebook": notebook,
        "kernel_id": kernel_id,
        "actions": parse_actions(body.get("actions")),
        "details": details,
        "source": "api",
    }


def parse_snooze_request(body: Any) -> int:
    if not isinstance(body, dict):
        raise AlertError("request body must be a JSON object with seconds")
    unknown = sorted(set(body) - {"seconds"})
    if unknown:
        raise AlertError(f"unknown field(s): {', '.join(unknown)}")
    if "seconds" not in body:
        raise AlertError("seconds is required")
    seconds = body["seconds"]
    if isinstance(seconds, float) and seconds.is_integer():  # JSON's 60.0 is an integer
        seconds = int(seconds)
    if isinstance(seconds, bool) or not isinstance(seconds, int):
        raise AlertError("seconds must be an integer")
    if not SNOOZE_MIN_SECONDS <= seconds <= SNOOZE_MAX_SECONDS:
        raise AlertError(
            f"seconds must be between {SNOOZE_MIN_SECONDS} and {SNOOZE_MAX_SECONDS}")
    return seconds

