"""Alerts: the store's rules (dedupe, dismiss, snooze, persistence, pruning), the REST API on
an in-process server, Prometheus families, and dismiss/snooze surviving a real restart."""

from __future__ import annotations

import json
import logging
import sqlite3
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from jsonschema import ValidationError
from tornado.httpclient import HTTPClientError

from jupyter_costguard.alerts.requests import parse_raise_request
from jupyter_costguard.alerts.store import (
    MAX_BODY_BYTES,
    RETENTION_SECONDS,
    AlertError,
    AlertStore,
)
from jupyter_costguard.cost.ledger import Ledger
from tests.support.costguard_config import server_sections
from tests.support.exposition import costguard_lines, samples
from tests.support.openapi_check import validate, validate_request
from tests.support.rest import get_json, start_session, wait_for
from tests.support.server_proc import ServerProcess
from tests.support.services import require_binary

DAY = 86400.0


class Clock:
    def __init__(self, t: float = 1_700_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "ledger.sqlite"


def warn(store: AlertStore, key: str = "a.ipynb", kind: str = "idle-gpu-kernel",
         message: str = "GPU idle", severity: str = "warning", **kw: Any):
    return store.raise_alert(kind, key, severity, "Idle GPU", message,
                             notebook=kw.pop("notebook", key), **kw)


def ids(alerts: list[Any]) -> list[str]:
    return [a.id for a in alerts]


# --- the store ---------------------------------------------------------------------------


def test_raising_again_updates_the_same_alert(db: Path, clock: Clock):
    store = AlertStore(db, clock=clock)
    first = warn(store, details={"waste_per_hour": 1.5})
    clock.advance(30)
    again = warn(store, message="GPU idle for 30 min", details={"waste_per_hour": 2.0})
    assert again.id == first.id
    assert again.message == "GPU idle for 30 min"
    assert again.details == {"waste_per_hour": 2.0}
    assert again.created == first.created
    assert again.updated == first.updated + 30
    assert ids(store.active()) == [first.id]
    assert store.raised() == {"idle-gpu-kernel": 1}

    other_key = warn(store, key="b.ipynb")
    other_kind = store.raise_alert("budget", "a.ipynb", "critical", "Budget", "over budget",
                                   notebook="a.ipynb")
    assert len({first.id, other_key.id, other_kind.id}) == 3
    # most severe first; one notebook's filter
    assert ids(store.active())[0] == other_kind.id
    assert set(ids(store.active(notebook="a.ipynb"))) == {first.id, other_kind.id}
    assert store.summary() == {
        "a.ipynb": {"ids": [other_kind.id, first.id], "highest_severity": "critical"},
        "b.ipynb": {"ids": [other_key.id], "highest_severity": "warning"},
    }
    assert store.counts() == {("idle-gpu-kernel", "warning"): 2, ("budget", "critical"): 1}


def test_dismissed_stays_dismissed_until_the_condition_is_resolved(db: Path, clock: Clock):
    store = AlertStore(db, clock=clock)
    alert = warn(store)
    assert store.dismiss(alert.id).state == "dismissed"
    assert store.dismiss(alert.id).state == "dismissed"  # idempotent
    clock.advance(60)
    again = warn(store, message="still idle")
    assert again.id == alert.id and again.state == "dismissed"
    assert store.active() == []
    assert store.summary() == {}

    resolved = store.resolve("idle-gpu-kernel", "a.ipynb")
    assert resolved is not None and resolved.resolved == clock.t
    assert store.resolve("idle-gpu-kernel", "a.ipynb") is None
    clock.advance(60)
    fresh = warn(store, message="idle again")
    assert fresh.id != alert.id and fresh.state == "active"
    assert ids(store.active()) == [fresh.id]
    assert store.raised() == {"idle-gpu-kernel": 2}
    # the retired one is still remembered, and never active again
    everything = {d["id"]: d for d in store.documents(include_all=True)}
    assert everything[alert.id]["resolved"] is not None
    assert everything[alert.id]["state"] == "dismissed"


@pytest.mark.parametrize("hide", ["dismiss", "snooze"])
def test_an_escalation_shows_again_what_the_user_hid(db: Path, clock: Clock, hide: str):
    """A budget at 80% dismissed must still warn at 100%; a dismissed idle-kernel warning must
    not hide that the kernel is about to be culled."""
    store = AlertStore(db, clock=clock)
    alert = warn(store)
    store.dismiss(alert.id) if hide == "dismiss" else store.snooze(alert.id, 3600)
    clock.advance(60)
    assert warn(store, message="same").state != "active"  # same severity: stays hidden
    critical = warn(store, severity="critical", message="will be culled at 12:00")
    assert critical.id == alert.id and critical.state == "active"
    assert critical.snoozed_until is None
    assert ids(store.active()) == [alert.id]
    store.dismiss(alert.id)
    clock.advance(60)
    # hidden again: a step back down and up to the same level is not news
    assert warn(store, severity="critical").state == "dismissed"
    assert warn(store, severity="info").state == "dismissed"


def test_snoozed_alert_comes_back_when_the_snooze_runs_out(db: Path, clock: Clock):
    store = AlertStore(db, clock=clock)
    alert = warn(store)
    snoozed = store.snooze(alert.id, 600)
    assert snoozed.state == "snoozed" and snoozed.snoozed_until == clock.t + 600
    assert store.active() == []
    clock.advance(599)
    warn(store, message="re-raised while snoozed")
    assert store.active() == [], "a re-raise does not end a snooze"
    doc, = store.documents(include_all=True)
    assert doc["state"] == "snoozed" and doc["snoozed_until"] == clock.t + 1
    clock.advance(1)
    back, = store.active()
    assert back.id == alert.id
    doc, = store.documents()
    assert doc["state"] == "active" and doc["snoozed_until"] is None
    assert doc["message"] == "re-raised while snoozed"
    # a later snooze replaces the earlier; snoozing a dismissed alert brings it back later
    store.dismiss(alert.id)
    store.snooze(alert.id, 60)
    clock.advance(60)
    assert ids(store.active()) == [alert.id]
    with pytest.raises(AlertError):
        store.snooze(alert.id, 0)
    assert store.dismiss("nope") is None and store.snooze("nope", 60) is None


def test_state_survives_reopening_the_store(db: Path, clock: Clock):
    ledger = Ledger(db, now=clock.t)  # the alert table lives in the ledger's file
    store = AlertStore(db, clock=clock)
    dismissed = warn(store, key="d.ipynb", actions=[{"id": "dismiss", "label": "Dismiss"}])
    snoozed = warn(store, key="s.ipynb")
    active = warn(store, key="a.ipynb", details={"waste_per_hour": 3.25})
    resolved = warn(store, key="r.ipynb")
    store.dismiss(dismissed.id)
    store.snooze(snoozed.id, 3600)
    store.resolve("idle-gpu-kernel", "r.ipynb")
    store.close()
    ledger.close()

    again = AlertStore(db, clock=clock)
    docs = {d["id"]: d for d in again.documents(include_all=True)}
    assert set(docs) == {dismissed.id, snoozed.id, active.id, resolved.id}
    assert docs[dismissed.id]["state"] == "dismissed"
    assert docs[dismissed.id]["actions"] == [{"id": "dismiss", "label": "Dismiss"}]
    assert docs[snoozed.id]["snoozed_until"] == clock.t + 3600
    assert docs[active.id]["details"] == {"waste_per_hour": 3.25}
    assert docs[resolved.id]["resolved"] is not None
    assert ids(again.active()) == [active.id]
    # the dedupe index is rebuilt: still the same conditions
    assert warn(again, key="d.ipynb").id == dismissed.id
    assert warn(again, key="d.ipynb").state == "dismissed"
    assert warn(again, key="r.ipynb").id not in docs
    clock.advance(3600)
    assert set(ids(again.active())) == {active.id, snoozed.id,
                                        again.find("idle-gpu-kernel", "r.ipynb").id}
    again.close()
    assert Ledger(db, now=clock.t).server.since > 0, "the ledger still opens its file"


def test_writes_go_through_the_schedule_hook(db: Path, clock: Clock):
    """In the server, `schedule` submits to the sampler's worker: nothing is written on the
    caller's thread, several changes are written in one go, and an explicit flush is a no-op
    once they are."""
    queued: list[Callable[[], None]] = []
    store = AlertStore(db, clock=clock, schedule=queued.append)

    def on_disk() -> dict[str, str]:
        with sqlite3.connect(db) as c:
            return dict(c.execute("SELECT id, state FROM alert").fetchall())

    a = warn(store)
    b = warn(store, key="b.ipynb")
    store.dismiss(a.id)
    assert on_disk() == {} and len(queued) == 1
    queued.pop()()
    assert on_disk() == {a.id: "dismissed", b.id: "active"}
    store.flush()
    clock.advance(5)
    warn(store, key="b.ipynb")  # only `updated` moved: not worth a write yet
    assert queued == []
    warn(store, key="b.ipynb", message="changed")
    assert len(queued) == 1


def test_old_resolved_and_dismissed_alerts_are_pruned(db: Path, clock: Clock):
    store = AlertStore(db, clock=clock, max_retired=3)
    old_resolved = warn(store, key="old-r")
    store.resolve("idle-gpu-kernel", "old-r")
    old_dismissed = warn(store, key="old-d")
    store.dismiss(old_dismissed.id)
    kept_dismissed = warn(store, key="kept-d")  # dismissed, but its condition persists
    store.dismiss(kept_dismissed.id)
    old_active = warn(store, key="old-a")
    clock.advance(RETENTION_SECONDS + DAY)
    warn(store, key="kept-d")
    assert store.prune() == 2
    remaining = {d["id"] for d in store.documents(include_all=True)}
    assert remaining == {kept_dismissed.id, old_active.id}
    # a pruned dismissed alert's condition is free again
    assert warn(store, key="old-d").id != old_dismissed.id

    # however many alerts come and go, only `max_retired` resolved ones are kept
    for i in range(10):
        warn(store, key=f"flap-{i}")
        store.resolve("idle-gpu-kernel", f"flap-{i}")
        clock.advance(1)
    store.prune()
    store.close()
    with sqlite3.connect(db) as c:
        rows = dict(c.execute("SELECT key, resolved IS NOT NULL FROM alert").fetchall())
    assert old_resolved.key not in rows
    assert sorted(k for k, r in rows.items() if r) == ["flap-7", "flap-8", "flap-9"]
    assert {"kept-d", "old-a", "old-d"} <= set(rows)


def test_concurrent_raises_make_one_alert_per_condition(db: Path):
    store = AlertStore(db)
    keys = [f"k{i}" for i in range(5)]

    def raise_many() -> None:
        for n in range(200):
            key = keys[n % len(keys)]
            warn(store, key=key, message=f"n={n}")
            if n % 7 == 0:
                store.documents()

    threads = [threading.Thread(target=raise_many) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(store.active()) == 5
    assert store.raised() == {"idle-gpu-kernel": 5}


def test_each_new_alert_is_logged_once(db: Path, caplog: pytest.LogCaptureFixture):
    store = AlertStore(db)
    with caplog.at_level(logging.INFO, logger="jupyter_costguard"):
        a = warn(store, message="wastes $30/h")
        warn(store, message="wastes $31/h")
        store.raise_alert("test", "t", "info", "Hello", "just so you know", notebook="n.ipynb")
    logged = [r for r in caplog.records if "costguard alert" in r.getMessage()]
    assert [r.levelno for r in logged] == [logging.WARNING, logging.INFO]
    assert a.id in logged[0].getMessage()
    assert "a.ipynb" in logged[0].getMessage() and "wastes $30/h" in logged[0].getMessage()
    assert "n.ipynb" in logged[1].getMessage()


GOOD = {"kind": "test", "severity": "warning", "title": "T", "message": "M"}


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"kind": None}, "kind"),
        ({"kind": "Has Spaces"}, "kind"),
        ({"severity": "fatal"}, "severity"),
        ({"title": ""}, "title"),
        ({"title": "x" * 201}, "title"),
        ({"message": "x" * 2001}, "message"),
        ({"message": 3}, "message"),
        ({"notebook": 3}, "notebook"),
        ({"kernel_id": ["k"]}, "kernel_id"),
        ({"key": ""}, "key"),
        ({"details": [1]}, "details"),
        ({"actions": {"id": "dismiss"}}, "actions"),
        ({"actions": [{"id": "rm-rf", "label": "x"}]}, "actions[0].id"),
        ({"actions": [{"id": "dismiss"}]}, "actions[0].label"),
        ({"actions": [{"id": "dismiss", "label": "x", "extra": 1}]}, "extra"),
        ({"actions": [{"id": "dismiss", "label": "x", "args": 1}]}, "actions[0].args"),
        ({"actions": [{"id": "open-url", "label": "x"}]}, "actions[0].args.url"),
        ({"actions": [{"id": "open-url", "label": "x", "args": {"url": "javascript:alert(1)"}}]},
         "actions[0].args.url"),
        ({"actions": [{"id": "open-url", "label": "x", "args": {"url": "file:///etc/passwd"}}]},
         "actions[0].args.url"),
        ({"actions": [{"id": "dismiss", "label": "x"}] * 9}, "actions"),
        ({"bogus": 1}, "bogus"),
    ],
)
def test_raise_requests_are_validated_like_the_document_says(change, needle):
    body = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    with pytest.raises(AlertError, match=needle.replace("[", r"\[").replace("]", r"\]")
                       .replace(".", r"\.")):
        parse_raise_request(body)
    with pytest.raises(ValidationError):
        validate_request("/alerts", body)


def test_valid_raise_request():
    body = {**GOOD, "notebook": "n.ipynb", "kernel_id": "k", "key": "n.ipynb",
            "details": {"waste_per_hour": 1.0},
            "actions": [{"id": "open-url", "label": "Docs",
                         "args": {"url": "https://example.org/x"}},
                        {"id": "snooze", "label": "Later", "args": {"seconds": 3600}}]}
    validate_request("/alerts", body)
    parsed = parse_raise_request(body)
    assert parsed["key"] == "n.ipynb" and parsed["source"] == "api"
    assert parsed["actions"] == body["actions"]
    # without a key, every request is its own alert
    assert parse_raise_request(GOOD)["key"] != parse_raise_request(GOOD)["key"]


# --- the REST API on an in-process server ------------------------------------------------


async def post(jp_fetch, *parts: str, body: Any = None, raw: str | None = None, **kw: Any):
    resp = await jp_fetch("costguard", "api", *parts, method="POST",
                          body=raw if raw is not None else json.dumps(body), **kw)
    return resp.code, json.loads(resp.body)


async def raise_one(jp_fetch, **fields: Any) -> dict[str, Any]:
    body = {**GOOD, **fields}
    validate_request("/alerts", body)
    code, alert = await post(jp_fetch, "alerts", body=body)
    assert code == 201
    validate("/alerts", 201, alert, method="post")
    return alert


async def alert_list(jp_fetch, **params: str) -> list[dict[str, Any]]:
    doc = await get_json(jp_fetch, "costguard", "api", "alerts", params=params or None)
    validate("/alerts", 200, doc)
    return doc["alerts"]


async def notebook_alerts(jp_fetch, path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    listing = await get_json(jp_fetch, "costguard", "api", "notebooks")
    validate("/notebooks", 200, listing)
    detail = await get_json(jp_fetch, "costguard", "api", "notebooks", path)
    validate(f"/notebooks/{path}", 200, detail)
    in_list = next(n for n in listing["notebooks"] if n["path"] == path)["alerts"]
    return in_list, detail["alerts"]


async def test_raise_list_show_on_notebook_dismiss(jp_fetch, service):
    await start_session(jp_fetch, "alerted.ipynb")
    await wait_for(jp_fetch, lambda d: any(n["path"] == "alerted.ipynb" for n in d["notebooks"]),
                   endpoint="notebooks")
    assert await notebook_alerts(jp_fetch, "alerted.ipynb") == (
        {"ids": [], "highest_severity": None},) * 2

    actions = [{"id": "offload", "label": "Run as batch job"},
               {"id": "open-url", "label": "Why?", "args": {"url": "https://example.org/why"}}]
    warning = await raise_one(jp_fetch, kind="training-sized-interactive", key="alerted.ipynb",
                              notebook="alerted.ipynb", actions=actions,
                              details={"waste_per_hour": 31.5})
    assert warning["source"] == "api" and warning["state"] == "active"
    assert warning["actions"] == actions and warning["details"] == {"waste_per_hour": 31.5}
    assert [a["id"] for a in await alert_list(jp_fetch)] == [warning["id"]]
    assert [a["id"] for a in await alert_list(jp_fetch, notebook="alerted.ipynb")] == \
        [warning["id"]]
    assert await alert_list(jp_fetch, notebook="other.ipynb") == []
    # the notebook documents carry it at once, without waiting for a sample
    expected = {"ids": [warning["id"]], "highest_severity": "warning"}
    assert await notebook_alerts(jp_fetch, "alerted.ipynb") == (expected, expected)

    critical = await raise_one(jp_fetch, severity="critical", kind="budget",
                               notebook="alerted.ipynb", title="Over budget")
    expected = {"ids": [critical["id"], warning["id"]], "highest_severity": "critical"}
    assert await notebook_alerts(jp_fetch, "alerted.ipynb") == (expected, expected)

    # the same kind and key again: the same alert, refreshed (200, not 201)
    code, refreshed = await post(jp_fetch, "alerts", body={
        **GOOD, "kind": "training-sized-interactive", "key": "alerted.ipynb",
        "notebook": "alerted.ipynb", "message": "now $40/h"})
    assert code == 200 and refreshed["id"] == warning["id"]
    assert refreshed["message"] == "now $40/h" and refreshed["created"] == warning["created"]
    validate("/alerts", 200, refreshed, method="post")

    for raw in ("", "{}"):  # idempotent, with or without a body
        code, dismissed = await post(jp_fetch, "alerts", warning["id"], "dismiss", raw=raw)
        assert code == 200 and dismissed["state"] == "dismissed"
        validate(f"/alerts/{warning['id']}/dismiss", 200, dismissed, method="post")
    assert [a["id"] for a in await alert_list(jp_fetch)] == [critical["id"]]
    expected = {"ids": [critical["id"]], "highest_severity": "critical"}
    assert await notebook_alerts(jp_fetch, "alerted.ipynb") == (expected, expected)
    everything = {a["id"]: a for a in await alert_list(jp_fetch, include="all")}
    assert everything[warning["id"]]["state"] == "dismissed"

    # the condition persists: raising it again does not bring it back
    code, again = await post(jp_fetch, "alerts", body={
        **GOOD, "kind": "training-sized-interactive", "key": "alerted.ipynb",
        "notebook": "alerted.ipynb"})
    assert code == 200 and again["id"] == warning["id"] and again["state"] == "dismissed"
    assert [a["id"] for a in await alert_list(jp_fetch)] == [critical["id"]]

    # once the condition ends (the guard resolves it), the next raise is a new alert
    service.alerts.resolve("training-sized-interactive", "alerted.ipynb")
    fresh = await raise_one(jp_fetch, kind="training-sized-interactive", key="alerted.ipynb",
                            notebook="alerted.ipynb")
    assert fresh["id"] != warning["id"] and fresh["state"] == "active"
    assert {a["id"] for a in await alert_list(jp_fetch)} == {fresh["id"], critical["id"]}


@pytest.fixture
def service(jp_serverapp):
    return jp_serverapp.web_app.settings["costguard_service"]


async def test_snooze_hides_until_it_runs_out(jp_fetch, service):
    alert = await raise_one(jp_fetch, notebook="s.ipynb")
    body = {"seconds": 600}
    validate_request(f"/alerts/{alert['id']}/snooze", body)
    code, snoozed = await post(jp_fetch, "alerts", alert["id"], "snooze", body=body)
    assert code == 200
    validate(f"/alerts/{alert['id']}/snooze", 200, snoozed, method="post")
    assert snoozed["state"] == "snoozed" and snoozed["snoozed_until"] >= alert["created"] + 600
    code, again = await post(jp_fetch, "alerts", alert["id"], "snooze", body=body)
    assert code == 200 and again["state"] == "snoozed"
    assert await alert_list(jp_fetch) == []
    (listed,) = await alert_list(jp_fetch, include="all")
    assert listed["state"] == "snoozed"

    # move the store's clock past the snooze instead of waiting for it
    real = service.alerts.clock
    until = again["snoozed_until"]
    service.alerts.clock = lambda: max(real(), until + 1)
    try:
        (back,) = await alert_list(jp_fetch)
        assert back["id"] == alert["id"] and back["state"] == "active"
    finally:
        service.alerts.clock = real


async def test_alert_metrics(jp_fetch):
    await wait_for(jp_fetch, lambda d: d["last_sample_time"] is not None)
    a = await raise_one(jp_fetch, kind="test", severity="warning")
    await raise_one(jp_fetch, kind="test", severity="warning")
    await raise_one(jp_fetch, kind="idle-gpu-kernel", severity="critical", key="k1")
    await post(jp_fetch, "alerts", a["id"], "dismiss", body={})

    text = (await jp_fetch("metrics")).body.decode()
    got = samples(text)
    gauge = {(lb["kind"], lb["severity"]): v for lb, v in got["costguard_alerts"]}
    assert gauge == {("test", "warning"): 1.0, ("idle-gpu-kernel", "critical"): 1.0}
    raised = {lb["kind"]: v for lb, v in got["costguard_alerts_raised_total"]}
    assert raised == {"test": 2.0, "idle-gpu-kernel": 1.0}

    promtool = require_binary("promtool")
    ours = costguard_lines(text)
    done = subprocess.run([promtool, "check", "metrics"], input=ours, capture_output=True,
                          text=True, timeout=30)
    complaints = (done.stdout + done.stderr).strip()
    assert done.returncode == 0 and complaints == "", f"{complaints}\n{ours}"


BAD_REQUESTS = [
    # (method, route, params, raw body, code, needle in message)
    ("POST", "alerts", None, "{not json", 400, "JSON"),
    ("POST", "alerts", None, "", 400, "object"),
    ("POST", "alerts", None, "[]", 400, "object"),
    ("POST", "alerts", None, json.dumps({**GOOD, "severity": "fatal"}), 400, "severity"),
    ("POST", "alerts", None, json.dumps({k: v for k, v in GOOD.items() if k != "title"}), 400,
     "title"),
    ("POST", "alerts", None, json.dumps({**GOOD, "title": "t" * 201}), 400, "title"),
    ("POST", "alerts", None, json.dumps({**GOOD, "message": "m" * 2001}), 400, "message"),
    ("POST", "alerts", None, json.dumps({**GOOD, "colour": "red"}), 400, "colour"),
    ("POST", "alerts", None,
     json.dumps({**GOOD, "actions": [{"id": "open-url", "label": "x",
                                      "args": {"url": "javascript:alert(1)"}}]}),
     400, "actions[0].args.url"),
    ("POST", "alerts", None, json.dumps({**GOOD, "actions": [{"id": "eval", "label": "x"}]}),
     400, "actions[0].id"),
    ("POST", "alerts", None,
     json.dumps({**GOOD, "details": {"pad": "x" * MAX_BODY_BYTES}}), 400, "larger"),
    ("POST", "alerts", {"x": "1"}, json.dumps(GOOD), 400, "x"),
    ("GET", "alerts", {"bogus": "1"}, None, 400, "bogus"),
    ("GET", "alerts", {"include": "some"}, None, 400, "include"),
    ("POST", "alerts/nope/dismiss", None, "{}", 404, "nope"),
    ("POST", "alerts/nope/snooze", None, '{"seconds": 600}', 404, "nope"),
    ("POST", "alerts/{id}/dismiss", None, '{"why": 1}', 400, "why"),
    ("POST", "alerts/{id}/dismiss", None, "[1]", 400, "object"),
    ("POST", "alerts/{id}/snooze", None, "", 400, "seconds"),
    ("POST", "alerts/{id}/snooze", None, "{}", 400, "seconds"),
    ("POST", "alerts/{id}/snooze", None, '{"seconds": "600"}', 400, "seconds"),
    ("POST", "alerts/{id}/snooze", None, '{"seconds": 600.5}', 400, "seconds"),
    ("POST", "alerts/{id}/snooze", None, '{"seconds": true}', 400, "seconds"),
    ("POST", "alerts/{id}/snooze", None, '{"seconds": 59}', 400, "seconds"),
    ("POST", "alerts/{id}/snooze", None, '{"seconds": 604801}', 400, "seconds"),
    ("POST", "alerts/{id}/snooze", None, '{"seconds": 600, "until": 1}', 400, "until"),
]


@pytest.mark.parametrize(("method", "route", "params", "raw", "code", "needle"), BAD_REQUESTS)
async def test_bad_alert_requests_get_json_4xx_with_message(jp_fetch, method, route, params,
                                                            raw, code, needle):
    alert = await raise_one(jp_fetch)
    route = route.replace("{id}", alert["id"])
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("costguard", "api", *route.split("/"), method=method, body=raw,
                       params=params)
    assert e.value.code == code
    body = json.loads(e.value.response.body)
    assert needle in body["message"], body
    validate("/" + route, code, body, method=method.lower())
    # nothing changed
    assert [a["id"] for a in await alert_list(jp_fetch, include="all")] == [alert["id"]]
    assert (await alert_list(jp_fetch))[0]["state"] == "active"


@pytest.mark.parametrize(
    ("method", "parts", "code"),
    [
        ("POST", ("status",), 405),  # a GET-only route
        ("POST", ("notebooks",), 405),
        ("GET", ("alerts", "{id}", "dismiss"), 405),  # a POST-only route
        ("DELETE", ("alerts",), 405),
        ("POST", ("alerts", "{id}", "explode"), 404),
        ("POST", ("alerts", "{id}"), 404),
        ("GET", ("nothing", "here"), 404),
    ],
)
async def test_wrong_method_or_path_is_json_too(jp_fetch, method, parts, code):
    alert = await raise_one(jp_fetch)
    parts = tuple(p.replace("{id}", alert["id"]) for p in parts)
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("costguard", "api", *parts, method=method,
                       body=None if method in ("GET", "DELETE") else "{}")
    assert e.value.code == code
    assert e.value.response.headers["Content-Type"].startswith("application/json")
    body = json.loads(e.value.response.body)
    assert body["status"] == code and body["message"]


ALERT_ROUTES = [("GET", "alerts", None), ("POST", "alerts", json.dumps(GOOD)),
                ("POST", "alerts/{id}/dismiss", "{}"),
                ("POST", "alerts/{id}/snooze", '{"seconds": 600}')]


@pytest.mark.parametrize(("method", "route", "raw"), ALERT_ROUTES)
async def test_alert_routes_refuse_requests_without_a_token(jp_fetch, method, route, raw):
    alert = await raise_one(jp_fetch)
    route = route.replace("{id}", alert["id"])
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("costguard", "api", *route.split("/"), method=method, body=raw,
                       headers={"Authorization": ""})
    assert e.value.code == 403
    (still,) = await alert_list(jp_fetch, include="all")
    assert still["state"] == "active", "nothing changed"


@pytest.fixture
def jp_server_config(costguard_config, request):
    """With `indirect=True` and a param: an authorizer that lets costguard be read only."""
    from jupyter_server.auth.authorizer import Authorizer

    class _ReadOnly(Authorizer):
        def is_authorized(self, handler, user, action, resource):
            return resource != "costguard" or action == "read"

    server: dict[str, Any] = {
        "jpserver_extensions": {"jupyter_costguard": True},
        "allow_unauthenticated_access": False,
    }
    if getattr(request, "param", False):
        server["authorizer_class"] = _ReadOnly
    return {"ServerApp": server, **server_sections(costguard_config)}


@pytest.mark.parametrize("jp_server_config", [True], indirect=True)
async def test_changing_alerts_is_a_write_action(jp_fetch, service):
    alert = service.alerts.raise_alert("test", "t", "info", "T", "M")
    assert [a["id"] for a in await alert_list(jp_fetch)] == [alert.id]  # reading is allowed
    for route, raw in [("alerts", json.dumps(GOOD)), (f"alerts/{alert.id}/dismiss", "{}"),
                       (f"alerts/{alert.id}/snooze", '{"seconds": 600}')]:
        with pytest.raises(HTTPClientError) as e:
            await jp_fetch("costguard", "api", *route.split("/"), method="POST", body=raw)
        assert e.value.code == 403, route
    assert [a["state"] for a in await alert_list(jp_fetch, include="all")] == ["active"]


# --- a real server, restarted ------------------------------------------------------------


@pytest.mark.timeout(180)
def test_dismiss_and_snooze_survive_a_restart(tmp_path: Path, trace_file: Path):
    config = {"db_path": str(tmp_path / "ledger.sqlite"), "sample_interval": 0.25,
              "hourly_rate": 36.0, "replay_trace": str(trace_file), "replay_mode": "always"}

    def raise_(server: ServerProcess, key: str) -> tuple[int, dict[str, Any]]:
        code, body = server.request("costguard/api/alerts", "POST", {
            "kind": "idle-gpu-kernel", "key": key, "severity": "warning", "title": "Idle GPU",
            "message": "GPU idle", "notebook": key})
        return code, json.loads(body)

    first = ServerProcess(tmp_path / "s1", config).start()
    try:
        code, dismissed = raise_(first, "d.ipynb")
        assert code == 201
        code, snoozed = raise_(first, "s.ipynb")
        assert code == 201
        code, active = raise_(first, "a.ipynb")
        assert code == 201
        code, _ = first.request(f"costguard/api/alerts/{dismissed['id']}/dismiss", "POST", {})
        assert code == 200
        code, body = first.request(f"costguard/api/alerts/{snoozed['id']}/snooze", "POST",
                                   {"seconds": 604800})
        assert code == 200
        until = json.loads(body)["snoozed_until"]
        # each new alert is logged once, with its notebook and message
        logged = [line for line in first.log().splitlines() if "costguard alert" in line]
        assert len(logged) == 3 and all("GPU idle" in line for line in logged), logged
        assert dismissed["id"] in logged[0] and "d.ipynb" in logged[0]
        # an answered request is on disk: even a crash right after keeps it
        first.kill9()
    finally:
        first.stop()

    second = ServerProcess(tmp_path / "s2", config).start()
    try:
        listed = second.get("costguard/api/alerts")
        assert [a["id"] for a in listed["alerts"]] == [active["id"]]
        validate("/alerts", 200, listed)
        everything = {a["id"]: a for a in second.get("costguard/api/alerts?include=all")["alerts"]}
        assert everything[dismissed["id"]]["state"] == "dismissed"
        assert everything[snoozed["id"]]["state"] == "snoozed"
        assert everything[snoozed["id"]]["snoozed_until"] == until
        # the condition is still there: raising it again does not resurrect it
        code, again = raise_(second, "d.ipynb")
        assert code == 200 and again["id"] == dismissed["id"] and again["state"] == "dismissed"
        code, again = raise_(second, "s.ipynb")
        assert code == 200 and again["state"] == "snoozed"
        assert [a["id"] for a in second.get("costguard/api/alerts")["alerts"]] == [active["id"]]
    finally:
        second.stop()
