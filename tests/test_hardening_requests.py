"""Issue 11, items 1 and 2: what a request may do, and no input breaks the extension.

Real servers throughout (pytest-jupyter's in-process server, or a `jupyter server` process
that is restarted), real SQLite files, real kernels where a job runs.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from jupyter_server.auth.authorizer import Authorizer
from tornado.httpclient import HTTPClientError

from jupyter_costguard.alerts.store import AlertStore
from jupyter_costguard.common.jsonlimits import JSONLimitError, parse_json
from jupyter_costguard.offload import record
from tests.support.jobs import post, submit, wait_job
from tests.support.notebooks import code, write_notebook
from tests.support.openapi_check import spec, validate
from tests.support.rest import Fetch, get_json, start_session
from tests.support.server_proc import ServerProcess
from tests.support.traces import write_trace

pytestmark = pytest.mark.usefixtures("no_leftover_jobs")

CELLS = [code("a", "a = 6"), code("b", "b = a * 7")]


class NoExecuteAuthorizer(Authorizer):
    """A collaborator who may look (and use costguard) but not run code in kernels."""

    def is_authorized(self, handler: Any, user: Any, action: str, resource: str) -> bool:
        return not (action == "execute" and resource == "kernels")


@pytest.fixture
def costguard_config(costguard_config: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    return {**costguard_config, "Offload.jobs_dir": str(tmp_path / "jobs"),
            "Offload.poll_interval": 0.1}


async def refused(jp_fetch: Fetch, *parts: str, method: str = "GET", body: Any = None,
                  raw: str | None = None, params: dict[str, str] | None = None
                  ) -> tuple[int, dict[str, Any]]:
    """The status and JSON error document of a request that must fail."""
    data = raw if raw is not None else (json.dumps(body) if body is not None else
                                        ("" if method == "POST" else None))
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("costguard", "api", *parts, method=method, body=data,
                       params=params or {})
    assert e.value.response is not None
    text = e.value.response.body.decode()
    assert "Traceback" not in text
    doc: dict[str, Any] = json.loads(text)
    assert doc["status"] == e.value.code
    return e.value.code, doc


# --- 1. authorisation by what a request does ------------------------------------------------


class TestWithoutExecuteOnKernels:
    @pytest.fixture
    def jp_server_config(self, jp_server_config: dict[str, Any]) -> dict[str, Any]:
        app = {**jp_server_config["ServerApp"],
               "authorizer_class": f"{__name__}.NoExecuteAuthorizer"}
        return {**jp_server_config, "ServerApp": app}

    @pytest.mark.parametrize(("parts", "body"), [
        (("jobs",), {"notebook": "n.ipynb", "selected": ["b"]}),
        (("jobs",), {"notebook": "n.ipynb", "selected": ["b"], "send": ["a"],
                     "kernel_id": "k"}),
        (("jobs", "1", "rerun"), None),
        (("jobs", "1", "cancel"), None),
    ])
    async def test_running_or_stopping_code_needs_execute_on_kernels(self, jp_fetch,
                                                                    jp_root_dir, parts, body):
        write_notebook(jp_root_dir, "n.ipynb", CELLS)
        status, doc = await refused(jp_fetch, *parts, method="POST", body=body)
        assert status == 403
        assert "execute" in doc["message"] and "kernels" in doc["message"], doc
        validate("/" + "/".join(parts), 403, doc, method="post")
        listed = await get_json(jp_fetch, "costguard", "api", "jobs")
        assert listed["jobs"] == []

    async def test_hibernate_and_restore_need_execute_on_kernels(self, jp_fetch, jp_root_dir):
        session = await start_session(jp_fetch, "n.ipynb")
        kernel_id = session["kernel"]["id"]
        for parts, body in ((("kernels", kernel_id, "hibernate"), None),
                            (("snapshots", "0" * 32, "restore"), {"kernel_id": kernel_id})):
            status, doc = await refused(jp_fetch, *parts, method="POST", body=body)
            assert status == 403 and "execute" in doc["message"], doc
            validate("/" + "/".join(parts), 403, doc, method="post")
        await jp_fetch("api", "kernels", kernel_id)  # not hibernated: still running
        assert (await get_json(jp_fetch, "costguard", "api", "snapshots"))["snapshots"] == []

    async def test_reading_and_previewing_still_work(self, jp_fetch, jp_root_dir):
        write_notebook(jp_root_dir, "n.ipynb", CELLS)
        for endpoint in ("jobs", "alerts", "status", "openapi.json"):
            resp = await jp_fetch("costguard", "api", endpoint)
            assert resp.code == 200
        doc = await post(jp_fetch, "jobs", "slice",
                         body={"notebook": "n.ipynb", "selected": ["b"]})
        assert [c["cell_id"] for c in doc["slice"]["cells"]] == ["a", "b"]


async def test_with_the_default_authorizer_jobs_run_rerun_and_cancel(jp_fetch, jp_root_dir):
    write_notebook(jp_root_dir, "n.ipynb", CELLS)
    doc = await submit(jp_fetch, "n.ipynb", ["b"])
    assert (await wait_job(jp_fetch, doc["id"]))["state"] == "succeeded"
    again = await post(jp_fetch, "jobs", str(doc["id"]), "rerun", code=201)
    await wait_job(jp_fetch, again["id"])
    status, _ = await refused(jp_fetch, "jobs", str(again["id"]), "cancel", method="POST")
    assert status == 409  # authorised; it has already ended


def test_the_openapi_document_states_each_routes_permissions():
    for template, ops in spec()["paths"].items():
        for method, op in ops.items():
            perms = op.get("x-costguard-permissions")
            assert perms, f"{method.upper()} {template} states no permissions"
            assert {"action": "read" if method == "get" else "write",
                    "resource": "costguard"} in perms
    runs = {("post", "/jobs"), ("post", "/jobs/{id}/rerun"), ("post", "/jobs/{id}/cancel"),
            ("post", "/kernels/{kernel_id}/hibernate"), ("post", "/snapshots/{id}/restore")}
    for method, template in runs:
        assert {"action": "execute", "resource": "kernels"} in \
            spec()["paths"][template][method]["x-costguard-permissions"]


# --- 2. input limits --------------------------------------------------------------------------


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(("parts", "raw"), [
    (("alerts",), '{"kind": "x", "severity": "info", "title": "t", "message": "m", '
                  '"details": {"d": ' + nested(500) + "}}"),
    (("alerts",), '{"kind": "x", "severity": "info", "title": "t", "message": "m", '
                  '"details": {"d": ' + nested(30000) + "}}"),
    (("jobs", "1", "rerun"), nested(30000)),
    (("jobs", "1", "cancel"), nested(30000)),
    (("jobs", "slice"), '{"notebook": "n.ipynb", "selected": ' + nested(100000) + "}"),
    (("jobs",), '{"notebook": "n.ipynb", "selected": ' + nested(100) + "}"),
])
async def test_deep_json_is_refused_naming_the_limit(jp_fetch, jp_root_dir, parts, raw):
    write_notebook(jp_root_dir, "n.ipynb", CELLS)
    status, doc = await refused(jp_fetch, *parts, method="POST", raw=raw)
    assert status == 400 and "32 levels" in doc["message"], doc
    alerts = await get_json(jp_fetch, "costguard", "api", "alerts", params={"include": "all"})
    assert alerts["alerts"] == []


@pytest.mark.parametrize(("parts", "raw", "needle"), [
    (("alerts",), '{"kind": "x", "severity": "info", "title": "\\ud800", "message": "m"}',
     "surrogate"),
    (("alerts",), '{"kind": "x", "severity": "info", "title": "t", "message": "m", '
                  '"details": {"\\udfff": 1}}', "surrogate"),
    (("alerts",), '{"kind": "x", "severity": "info", "title": "t\\u0000", "message": "m"}',
     "NUL"),
    (("jobs",), '{"notebook": "n\\u0000.ipynb", "selected": ["b"]}', "NUL"),
    (("jobs",), '{"notebook": "n.ipynb", "selected": ["b"], "inputs": ["a\\u0000"]}', "NUL"),
    (("jobs",), '{"notebook": "\\ud800.ipynb", "selected": ["b"]}', "surrogate"),
    (("jobs", "slice"), '{"notebook": "n.ipynb", "selected": ["b"], "cells": '
                        '[{"id": "b", "cell_type": "code", "source": "x = \'\\ud800\'"}]}',
     "surrogate"),
])
async def test_nul_and_lone_surrogates_are_refused(jp_fetch, jp_root_dir, parts, raw, needle):
    write_notebook(jp_root_dir, "n.ipynb", CELLS)
    status, doc = await refused(jp_fetch, *parts, method="POST", raw=raw)
    assert status == 400 and needle in doc["message"], doc
    alerts = await get_json(jp_fetch, "costguard", "api", "alerts", params={"include": "all"})
    assert alerts["alerts"] == []


async def test_snooze_body_is_checked_too(jp_fetch):
    resp = await jp_fetch("costguard", "api", "alerts", method="POST", body=json.dumps(
        {"kind": "x", "severity": "info", "title": "t", "message": "m"}))
    alert_id = json.loads(resp.body)["id"]
    status, doc = await refused(jp_fetch, "alerts", alert_id, "snooze", method="POST",
                                raw='{"seconds": 60, "x": ' + nested(50) + "}")
    assert status == 400 and "32 levels" in doc["message"]


@pytest.mark.parametrize(("parts", "params"), [
    (("alerts",), {"notebook": "a\x00b"}),
    (("jobs",), {"notebook": "a\x00b"}),
    (("notebooks", "a\x00b.ipynb"), {}),
    (("jobs", "1\x00", "log"), {}),
])
async def test_nul_in_query_or_path_is_a_400(jp_fetch, parts, params):
    status, doc = await refused(jp_fetch, *parts, params=params)
    assert status == 400 and "NUL" in doc["message"], doc


@pytest.mark.parametrize("tail", [
    "notebooks/%ED%A0%80.ipynb",        # U+D800, as UTF-8 would spell it (it cannot)
    "alerts?notebook=%ED%A0%80",
    "jobs?notebook=a%ED%B2%80",
    "alerts/%ED%A0%80/dismiss",
])
async def test_lone_surrogates_in_the_url_are_a_400(http_server_client, jp_base_url,
                                                   jp_auth_header, tail):
    method = "POST" if tail.endswith("dismiss") else "GET"
    with pytest.raises(HTTPClientError) as e:
        await http_server_client.fetch(f"{jp_base_url}costguard/api/{tail}", method=method,
                                       headers=jp_auth_header,
                                       body="" if method == "POST" else None)
    assert e.value.code == 400
    assert e.value.response is not None
    doc = json.loads(e.value.response.body)
    assert "unicode" in doc["message"].lower() or "UTF-8" in doc["message"], doc


def test_json_limits_hold_at_any_depth_and_name_the_limit():
    for text in (nested(33), nested(10**6), '{"a": ' * 40 + "1" + "}" * 40):
        with pytest.raises(JSONLimitError, match="32 levels"):
            parse_json(text)
    assert parse_json(nested(32)) == json.loads(nested(32))
    with pytest.raises(JSONLimitError, match="lone surrogates"):
        parse_json(rb'{"ok": ["\\", "\udfff"]}')
    with pytest.raises(JSONLimitError, match="NUL"):
        parse_json(r'{"\u0000": 1}')
    assert parse_json(r'["\\u0000", "\u00e9"]') == ["\\u0000", "\u00e9"]


@pytest.mark.parametrize("endpoint", [("jobs",), ("jobs", "slice")])
async def test_code_over_one_mib_is_a_413(jp_fetch, jp_root_dir, endpoint):
    write_notebook(jp_root_dir, "n.ipynb", CELLS)
    big = [code("a", "a = 1\n" + "#" * (600 << 10)), code("b", "b = a\n" + "#" * (600 << 10))]
    status, doc = await refused(jp_fetch, *endpoint, method="POST",
                                body={"notebook": "n.ipynb", "selected": ["b"], "cells": big})
    assert status == 413 and "1 MiB" in doc["message"], doc


@pytest.mark.parametrize("source", [
    "lambda: " * 3000 + "0",
    "x = 0" + "+1" * 100000,
    "x = " + "a." * 100000 + "b",
    "x = " + "[" * 5000 + "]" * 5000,
    "def f():\n" + "".join("    " * i + "if x:\n" for i in range(1, 120)) + "    " * 120 + "y\n",
])
async def test_pathological_code_is_a_400_naming_the_cell(jp_fetch, jp_root_dir, source):
    write_notebook(jp_root_dir, "n.ipynb", CELLS)
    cells = [code("a", "a = 6"), code("b", source)]
    for endpoint in (("jobs", "slice"), ("jobs",)):
        status, doc = await refused(jp_fetch, *endpoint, method="POST", body={
            "notebook": "n.ipynb", "selected": ["b"], "cells": cells})
        assert status == 400 and "cell 1" in doc["message"], doc
    # the server still slices ordinary code afterwards
    doc = await post(jp_fetch, "jobs", "slice", body={"notebook": "n.ipynb", "selected": ["b"]})
    assert [c["cell_id"] for c in doc["slice"]["cells"]] == ["a", "b"]


async def test_inputs_linking_out_of_the_root_are_refused(jp_fetch, jp_root_dir, tmp_path):
    write_notebook(jp_root_dir, "n.ipynb", CELLS)
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours")
    data = jp_root_dir / "data"
    data.mkdir()
    (data / "ok.csv").write_text("1,2\n")
    (data / "leak.csv").symlink_to(secret)
    (jp_root_dir / "direct.csv").symlink_to(secret)
    for inputs in (["data"], ["direct.csv"]):
        status, doc = await refused(jp_fetch, "jobs", method="POST", body={
            "notebook": "n.ipynb", "selected": ["a"], "inputs": inputs})
        assert status == 400 and "outside the server's root" in doc["message"], doc
    assert (await get_json(jp_fetch, "costguard", "api", "jobs"))["jobs"] == []
    # links that stay inside the root are fine
    (data / "leak.csv").unlink()
    (data / "alias.csv").symlink_to(data / "ok.csv")
    doc = await submit(jp_fetch, "n.ipynb", ["a"], inputs=["data"])
    paths = sorted(e["path"] for e in doc_record(await wait_job(jp_fetch, doc["id"])))
    assert paths == ["data/alias.csv", "data/ok.csv"]


def doc_record(job_doc: dict[str, Any]) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = job_doc["record"]["inputs"]
    return entries


async def test_inputs_over_the_file_limit_are_a_413(jp_fetch, jp_root_dir, monkeypatch):
    monkeypatch.setattr(record, "MAX_INPUT_FILES", 5)
    write_notebook(jp_root_dir, "n.ipynb", CELLS)
    data = jp_root_dir / "data"
    data.mkdir()
    for i in range(4):
        (data / f"{i}.csv").write_text(str(i))
    # the same directory named twice is examined twice: 8 files
    status, doc = await refused(jp_fetch, "jobs", method="POST", body={
        "notebook": "n.ipynb", "selected": ["a"], "inputs": ["data", "data"]})
    assert status == 413 and "5 files" in doc["message"], doc
    assert (await get_json(jp_fetch, "costguard", "api", "jobs"))["jobs"] == []


def test_manifest_hashes_at_most_the_byte_budget(tmp_path, monkeypatch):
    monkeypatch.setattr(record, "MAX_HASH_TOTAL_BYTES", 10)
    for name in ("a", "b", "c"):
        (tmp_path / name).write_text("123456")
    entries = record.manifest(tmp_path, tmp_path, ["a", "b", "c"])
    hashed = [e for e in entries if e["sha256"]]
    assert len(hashed) == 1 and all(e["size_bytes"] == 6 for e in entries)
    assert all("hash budget" in e["sha256_skipped"] for e in entries if not e["sha256"])


# --- nothing stored stops the alerts from loading ---------------------------------------------

def _insert(db: Path, aid: str, **over: Any) -> None:
    row = {"id": aid, "kind": "x", "key": aid, "severity": "info", "notebook": None,
           "kernel_id": None, "title": "t", "message": "m", "actions": "[]", "details": "{}",
           "created": 1.0, "updated": 1.0, "state": "active", "snoozed_until": None,
           "source": "api", "resolved": None, **over}
    with sqlite3.connect(db) as c:
        c.execute(f"INSERT INTO alert ({', '.join(row)}) VALUES "
                  f"({', '.join('?' * len(row))})", tuple(row.values()))


def test_bad_rows_are_skipped_and_good_ones_load(tmp_path, caplog):
    db = tmp_path / "ledger.sqlite"
    AlertStore(db).close()
    _insert(db, "good1")
    _insert(db, "deep", details='{"d": ' + nested(100000) + "}")
    _insert(db, "tooDeep", details='{"d": ' + nested(40) + "}")
    _insert(db, "badjson", details="{nope")
    _insert(db, "badactions", actions='{"not": "a list"}', details="[1]")
    _insert(db, "badtitle", title="t\x00")
    _insert(db, "badtime", created="yesterday")
    _insert(db, "surrogate", title="\udcff".encode("utf-8", "surrogatepass"))
    _insert(db, "good2", created=2.0)
    store = AlertStore(db)
    try:
        assert sorted(a["id"] for a in store.documents(10.0, include_all=True)) == \
            ["good1", "good2"]
        skipped = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
        assert len(skipped) == 7, skipped
        json.dumps(store.documents(10.0, include_all=True))  # serialisable
    finally:
        store.close()


def test_stored_input_attacks_do_not_stop_costguard_loading(tmp_path):
    trace = write_trace(tmp_path / "trace.json", [{"t": 0, "gpus": [
        {"utilization_percent": 0, "processes": []}]}], gpus=1)
    config = {"db_path": str(tmp_path / "ledger.sqlite"), "sample_interval": 0.5,
              "hourly_rate": 1.0, "replay_trace": str(trace), "replay_mode": "always",
              "Offload.enabled": False}
    base = {"kind": "x", "severity": "info", "title": "t", "message": "m"}
    attacks: list[Any] = [
        {**base, "details": {"d": json.loads(nested(500))}},
        {**base, "title": "\ud800"},
        {**base, "details": {"k\x00": "v\udc80"}},
        {**base, "key": "k", "details": {"ok": [1]}},
    ]
    for i, attack in enumerate(attacks):
        server = ServerProcess(tmp_path / f"s{i}", config).start()
        try:
            code, body = server.request("costguard/api/alerts", "POST", attack)
        finally:
            server.stop()
        again = ServerProcess(tmp_path / f"r{i}", config).start()
        try:
            for route in ("costguard/api/status", "costguard/api/openapi.json"):
                again.wait_for(route, lambda d: isinstance(d, dict), timeout=30)
            listed = again.wait_for("costguard/api/alerts?include=all",
                                    lambda d: isinstance(d, dict), timeout=30)
            assert [a["key"] for a in listed["alerts"]] == (["k"] if attack.get("key") else [])
            assert code == (201 if attack.get("key") else 400), body
        finally:
            again.stop()
    # a row an older version stored (it took the deep details), planted in the file itself
    _insert(tmp_path / "ledger.sqlite", "planted", details='{"d": ' + nested(5000) + "}")
    again = ServerProcess(tmp_path / "planted", config).start()
    try:
        listed = again.wait_for("costguard/api/alerts?include=all",
                                lambda d: isinstance(d, dict), timeout=30)
        assert [a["key"] for a in listed["alerts"]] == ["k"]
        assert "alert row 'planted' skipped" in again.log()
    finally:
        again.stop()


def test_an_alert_that_cannot_be_stored_as_is_does_not_stop_other_saves(tmp_path):
    """What the API refuses can still come from inside (a guard rule naming a notebook whose
    file name is not UTF-8): it is saved with U+FFFD, and every other change still lands."""
    db = tmp_path / "ledger.sqlite"
    store = AlertStore(db)
    odd = store.raise_alert("idle", "k1", "warning", "idle in \udcff.ipynb", "m",
                            notebook="\udcff.ipynb", details={"path": "\udcff"})
    plain = store.raise_alert("idle", "k2", "warning", "plain", "m")
    store.flush()
    store.dismiss(plain.id)
    store.close()
    again = AlertStore(db)
    try:
        docs = {d["id"]: d for d in again.documents(again.clock(), include_all=True)}
        assert docs[plain.id]["state"] == "dismissed"
        assert docs[odd.id]["title"] == "idle in \ufffd.ipynb"
        assert docs[odd.id]["notebook"] == "\ufffd.ipynb"
        assert docs[odd.id]["details"] == {"path": "\ufffd"}
    finally:
        again.close()


# --- 7. what schemathesis found (tests/test_fuzz_api.py), each failing before its fix -------


@pytest.mark.parametrize("route", ["jobs/slice", "jobs"])
async def test_a_send_name_that_is_not_python_is_400_on_slice_and_submit(jp_fetch, jp_root_dir,
                                                                         route):
    write_notebook(jp_root_dir, "n.ipynb", CELLS)
    code_, doc = await refused(jp_fetch, *route.split("/"), method="POST", body={
        "notebook": "n.ipynb", "selected": ["b"], "send": ["not a name"], "kernel_id": "k"})
    assert code_ == 400 and "not a Python name" in doc["message"], doc


async def test_a_notebook_name_too_long_for_the_filesystem_is_400(jp_fetch):
    code_, doc = await refused(jp_fetch, "jobs", "slice", method="POST", body={
        "notebook": "n" * 5000 + ".ipynb", "selected": ["b"]})
    assert code_ == 400 and "cannot be used" in doc["message"], doc


async def raise_alert(jp_fetch: Fetch) -> dict[str, Any]:
    doc: dict[str, Any] = await post(jp_fetch, "alerts", body={
        "kind": "k", "severity": "info", "title": "t", "message": "m"}, code=201)
    return doc


@pytest.mark.parametrize(("raw", "needle"), [("null", "not null"), (" ", None)],
                         ids=["null", "whitespace"])
async def test_a_body_that_is_not_an_object_is_400_not_no_body(jp_fetch, raw, needle):
    """`null` and a body of whitespace are bodies, and not JSON objects: never "no body"."""
    raised = await raise_alert(jp_fetch)
    code_, doc = await refused(jp_fetch, "alerts", raised["id"], "dismiss", method="POST",
                               raw=raw)
    assert code_ == 400, doc
    if needle is not None:
        assert needle in doc["message"], doc


async def test_snooze_takes_a_whole_number_written_as_a_float(jp_fetch):
    raised = await raise_alert(jp_fetch)
    snoozed = await post(jp_fetch, "alerts", raised["id"], "snooze", body={"seconds": 600.0})
    assert snoozed["state"] == "snoozed"
    code_, doc = await refused(jp_fetch, "alerts", raised["id"], "snooze", method="POST",
                               body={"seconds": 600.5})
    assert code_ == 400 and "integer" in doc["message"]


async def test_a_method_a_route_lacks_is_405_with_allow(jp_fetch):
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("costguard", "api", "jobs", method="DELETE")
    assert e.value.code == 405
    assert e.value.response is not None
    assert e.value.response.headers["Allow"] == "GET, POST"
    assert json.loads(e.value.response.body)["status"] == 405


@pytest.mark.parametrize("backend", [[None, None], {"a": 1}, 3])
async def test_a_backend_that_is_not_a_string_is_400(jp_fetch, jp_root_dir, backend):
    write_notebook(jp_root_dir, "n.ipynb", CELLS)
    code_, doc = await refused(jp_fetch, "jobs", method="POST", body={
        "notebook": "n.ipynb", "selected": ["b"], "backend": backend})
    assert code_ == 400 and "backend must be a string" in doc["message"], doc
