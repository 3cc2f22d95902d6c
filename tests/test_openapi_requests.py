"""Issue 24 item 2: request bodies are checked against web/openapi.yaml's schemas
(common/apischema.py), the limits are written there once, and a refusal names the field:
never a 500, whatever the body."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jupyter_costguard.alerts import requests as alert_requests
from jupyter_costguard.alerts.store import ACTION_IDS, SEVERITIES, AlertError
from jupyter_costguard.common.apischema import DOCUMENT, RequestSchema, SchemaError
from jupyter_costguard.hibernate import requests as hibernate_requests
from jupyter_costguard.offload import requests as job_requests
from jupyter_costguard.offload.errors import JobError
from jupyter_costguard.offload.spec import (
    MAX_RETRIES,
    MAX_TIME_LIMIT_SECONDS,
    Resources,
    SpecError,
    parse_names,
    parse_retries,
)
from tests.support.openapi_check import validate_request

SCHEMAS = DOCUMENT["components"]["schemas"]
GOOD_ALERT = {"kind": "test", "severity": "info", "title": "T", "message": "M"}
GOOD_JOB = {"notebook": "n.ipynb", "selected": ["b"]}


def test_every_request_body_the_document_declares_is_checked_by_the_code() -> None:
    declared = set()
    for ops in DOCUMENT["paths"].values():
        for op in ops.values():
            body = op.get("requestBody")
            if body:
                declared.add(body["content"]["application/json"]["schema"]["$ref"]
                             .rsplit("/", 1)[1])
    checked = {v.name for m in (alert_requests, job_requests, hibernate_requests)
               for v in vars(m).values() if isinstance(v, RequestSchema)}
    assert declared == checked


def test_the_alert_enums_the_store_knows_are_the_documents() -> None:
    assert list(SEVERITIES) == SCHEMAS["Severity"]["enum"]
    assert list(ACTION_IDS) == SCHEMAS["AlertAction"]["properties"]["id"]["enum"]


@pytest.mark.parametrize(("field", "limit"), [
    ("title", SCHEMAS["AlertRequest"]["properties"]["title"]["maxLength"]),
    ("message", SCHEMAS["AlertRequest"]["properties"]["message"]["maxLength"]),
    ("key", SCHEMAS["AlertRequest"]["properties"]["key"]["maxLength"]),
    ("notebook", SCHEMAS["AlertRequest"]["properties"]["notebook"]["maxLength"]),
    ("kernel_id", SCHEMAS["AlertRequest"]["properties"]["kernel_id"]["maxLength"]),
])
def test_an_alert_field_at_the_documents_limit_passes_and_one_over_is_refused(
        field: str, limit: int) -> None:
    assert alert_requests.parse_raise_request({**GOOD_ALERT, field: "x" * limit})[field]
    with pytest.raises(AlertError, match=f"{field} must be at most {limit} characters"):
        alert_requests.parse_raise_request({**GOOD_ALERT, field: "x" * (limit + 1)})


def test_the_snooze_bounds_are_the_documents() -> None:
    s = SCHEMAS["SnoozeRequest"]["properties"]["seconds"]
    for ok in (s["minimum"], s["maximum"]):
        assert alert_requests.parse_snooze_request({"seconds": ok}) == ok
    for bad in (s["minimum"] - 1, s["maximum"] + 1):
        with pytest.raises(AlertError, match=f"between {s['minimum']} and {s['maximum']}"):
            alert_requests.parse_snooze_request({"seconds": bad})


def test_the_job_specs_own_limits_are_the_documents() -> None:
    """The spec parser checks a spec read back from disk too, so it keeps its limits; they
    must be the ones the document states for a request."""
    props = SCHEMAS["SubmitRequest"]["properties"]
    assert props["retries"]["maximum"] == MAX_RETRIES
    assert parse_retries(MAX_RETRIES) == MAX_RETRIES
    with pytest.raises(SpecError):
        parse_retries(MAX_RETRIES + 1)
    send = props["send"]["maxItems"]
    assert len(parse_names([f"v{i}" for i in range(send)], "send")) == send
    with pytest.raises(SpecError):
        parse_names([f"v{i}" for i in range(send + 1)], "send")
    assert job_requests.MAX_BRING_BACK == props["bring_back"]["maxItems"]
    res = SCHEMAS["Resources"]["properties"]
    assert res["time_limit_seconds"]["maximum"] == MAX_TIME_LIMIT_SECONDS
    for name, over in (("gpus", 1), ("cpus", 0.5), ("time_limit_seconds", 1)):
        top = res[name]["maximum"]
        assert getattr(Resources.parse({name: top}), name) == top
        with pytest.raises(SpecError):
            Resources.parse({name: top + over})


def test_a_submit_may_send_null_for_any_optional_field() -> None:
    """The server always read null as "absent" (the saved cells, the default resources, no
    kernel...); the document said a string or object only, so a client that followed it
    could not tell. Failed before: the document refused these bodies."""
    body = {**GOOD_JOB, **dict.fromkeys(
        ("cells", "kernel_id", "kernel_name", "resources", "retries", "send", "bring_back",
         "inputs", "backend"))}
    validate_request("/jobs", body)
    assert job_requests.check_request(body) is body


@pytest.mark.parametrize(("body", "message"), [
    ([1, 2], "request body must be a JSON object with notebook, selected"),
    ({**GOOD_JOB, "bogus": 1}, "unknown field(s): bogus"),
    ({**GOOD_JOB, "inputs": ["a"] * 101}, "inputs must hold at most 100 items"),
    ({**GOOD_JOB, "inputs": [3]}, "inputs[0] must be a string"),
    ({**GOOD_JOB, "kernel_id": 3}, "kernel_id must be a string"),
    ({**GOOD_JOB, "resources": {"gpus": 65}}, "resources.gpus must be between 0 and 64"),
    ({"notebook": "n.ipynb"}, "selected is required"),
])
def test_a_refused_submit_names_the_field(body: Any, message: str) -> None:
    with pytest.raises(JobError) as e:
        job_requests.check_request(body)
    assert str(e.value) == message and e.value.status == 400


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20)
ALL = [RequestSchema(name, required=name != "DismissRequest")
       for name in ("AlertRequest", "SnoozeRequest", "DismissRequest", "SubmitRequest")]
FIELDS = st.sampled_from(sorted(set(SCHEMAS["AlertRequest"]["properties"]) |
                                set(SCHEMAS["SubmitRequest"]["properties"]) | {"seconds"}))


@settings(max_examples=300, deadline=None)
@given(st.one_of(JSON, st.dictionaries(FIELDS, JSON, max_size=6)))
def test_any_body_is_accepted_or_refused_with_a_sentence(body: Any) -> None:
    for schema in ALL:
        try:
            schema.check(body)
        except SchemaError as e:
            assert str(e) and "Traceback" not in str(e)
