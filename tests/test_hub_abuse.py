"""An abuse suite on the real hub: a hostile member (mallory, group ml, a GPU profile) whose
own server configuration records every request her server receives, and who reports to the
costguard service by hand with her server's own token, as code in her server could.

Every hostile report is refused with a 4xx that names the reason, never a 5xx; the service
stays responsive; her tokens read nothing of anyone else's; the honest members' figures keep
updating and another member's GPU spawn still goes through; the admin API stays valid JSON
(no NaN, no Infinity); the service's SQLite stays small; her claim of a busy GPU neither keeps
nor stops her server where the policy does not trust reports; and no user's server ever
receives a token but its own (the service never calls into a user's server at all).

One test is an expected failure, pinned until the service bounds a run's spend by the run's
own time: today a server's valid-looking reports can claim many times what the site's
dearest rate allows (see its reason)."""

from __future__ import annotations

import csv
import http.client
import io
import json
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from jupyter_costguard.common.hubprotocol import MAX_BODY_BYTES, report_doc
from jupyter_costguard.hub.cull import DEFER, cull_arbiter_hook, decide, policies_from, read_row
from jupyter_costguard.hub.spawn import load_settings, states_for
from tests.support.hub import BIN, Hub, HubUser, gpu_trace, wait_for

pytestmark = pytest.mark.timeout(600)

#: the site's dearest server costs this much per hour (every member here runs at 36/h)
MAX_RATE = 40.0
#: GPU servers are judged by this policy, which does not take a server's word for a busy GPU
#: (the default); 60 min: the service itself stops nobody during the suite
POLICY = {"name": "gpu", "profiles": ["gpu"], "idle_minutes": 60, "warn_minutes": 1}
GROUP_BUDGET = 50.0
HONEST = ("alice", "bob")
REPORT_PATH = "/services/costguard/api/report"

#: every user's own server configuration here records each request it receives, with its
#: headers and the server's pid (so each line is checked against that server's own token)
RECORDER = r'''
import json, os, time
from jupyter_server.log import log_request
c = get_config()  # noqa

def record(handler):
    r = handler.request
    with open({path!r}, "a") as f:
        f.write(json.dumps({{"time": time.time(), "pid": os.getpid(), "method": r.method,
                            "path": r.path, "status": handler.get_status(),
                            "headers": list(r.headers.get_all())}}) + "\n")
    log_request(handler)

c.ServerApp.tornado_settings = {{"log_function": record}}
'''
#: mallory's server reports nothing itself: she reports by hand, with its token
HOSTILE = "c.HubReport.url = ''\n"


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    d = tmp_path_factory.mktemp("hubabuse")
    heard = d / "heard"
    heard.mkdir()

    def member(name: str, extra: str = "") -> HubUser:
        return HubUser(name, gpu_trace(d / f"{name}.json", 0), ["ml"], server_config=RECORDER
                       .format(path=str(heard / f"{name}.jsonl")) + extra)

    users = [member("alice"), member("bob"), member("mallory", HOSTILE),
             HubUser("admin", gpu_trace(d / "admin.json", 0), [])]
    h = Hub(d / "hub", users, service_settings={
        "max_rate_per_hour": MAX_RATE, "group_budgets": {"ml": GROUP_BUDGET},
        "gpu_profiles": {"gpu"}, "cull_policies": [POLICY]},
        extra_config="from jupyter_costguard.hub.spawn import budget_hook\n"
                     "c.Spawner.pre_spawn_hook = budget_hook(spec['service_config'])\n")
    h.start()
    try:
        h.admin_token = h.token_for("admin")  # type: ignore[attr-defined]
        h.heard = heard  # type: ignore[attr-defined]
        #: pid of each server that ran -> its own token (read from its environment)
        h.own = {}  # type: ignore[attr-defined]
        # the spawn hook reads the service's database: let the service write it first
        wait_for(lambda: h.service("api/spend", h.admin_token)[0] == 200,  # type: ignore
                 60, "the service")
        h.start_server("alice")
        h.start_server("bob")
        h.start_server("mallory", {"profile": "gpu"})
        for name in (*HONEST, "mallory"):
            h.wait_ready(name)
            token = note_server(h, name)
            # the recorder hears an Authorization header: each server's own token, once
            status, _, _ = h.request("GET", f"/user/{name}/api/status", token)
            assert status == 200, name
        yield h
    finally:
        h.stop()


# --- helpers ------------------------------------------------------------------------------

def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(e.decode(errors="replace").partition("=")[::2] for e in raw.split(b"\0") if e)


def server_model(hub: Hub, user: str) -> dict[str, Any]:
    return (hub.api("GET", f"/users/{user}").get("servers") or {}).get("") or {}


def note_server(hub: Hub, user: str) -> str:
    """The running server's own token, from its process's environment (we are its parent's
    owner, as root in CI); kept by pid for the header check."""
    pid = int(server_model(hub, user)["state"]["pid"])
    token = environ_of(pid)["JUPYTERHUB_API_TOKEN"]
    hub.own[pid] = token  # type: ignore[attr-defined]
    return token


def own_token(hub: Hub, user: str) -> str:
    pid = int(server_model(hub, user)["state"]["pid"])
    return str(hub.own[pid])  # type: ignore[attr-defined]


def started_at(hub: Hub, user: str) -> float:
    """When the Hub says the user's server started."""
    return datetime.fromisoformat(server_model(hub, user)["started"]).timestamp()


def running(hub: Hub, user: str) -> bool:
    return bool(server_model(hub, user).get("ready"))


def post(hub: Hub, token: str, body: bytes) -> tuple[int, Any]:
    """POST a report body as is, straight to the service (not through the proxy)."""
    conn = http.client.HTTPConnection("127.0.0.1", hub.service_port, timeout=30)
    try:
        conn.request("POST", REPORT_PATH, body=body, headers={
            "Authorization": f"token {token}", "Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, _doc(resp.read())
    finally:
        conn.close()


def _doc(data: bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return data


def post_huge(hub: Hub, token: str, size: int, chunked: bool = False,
              ) -> tuple[int | None, Any]:
    """A report body of `size` bytes, announced by Content-Length (or sent in chunks, its
    size unannounced) as fast as the service takes it, the answer read while it is still
    being sent. (None, b""): the service ended the connection without an answer."""
    sock = socket.create_connection(("127.0.0.1", hub.service_port), timeout=30)
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {size}"
    try:
        sock.sendall((f"POST {REPORT_PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      f"Authorization: token {token}\r\nContent-Type: application/json\r\n"
                      f"{framing}\r\n\r\n").encode())

        def send() -> None:
            left = size
            try:
                while left > 0:
                    n = min(left, 1 << 20)
                    piece = b" " * n
                    sock.sendall(b"%x\r\n%s\r\n" % (n, piece) if chunked else piece)
                    left -= n
                if chunked:
                    sock.sendall(b"0\r\n\r\n")
            except OSError:  # the service answered and closed: the rest is not taken
                pass

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        resp = http.client.HTTPResponse(sock)
        try:
            resp.begin()
        except (ConnectionError, http.client.HTTPException):
            return None, b""
        try:
            data = resp.read()
        except (ConnectionError, http.client.HTTPException):  # an answer without a length
            data = b""
        sender.join(30)
        return resp.status, _doc(data)
    finally:
        sock.close()


def valid(hub: Hub, **fields: Any) -> dict[str, Any]:
    """A report of mallory's server as the protocol would accept it, with `fields` changed."""
    now = time.time()
    doc = report_doc(server="", time=now, since=started_at(hub, "mallory"), spend=0.0,
                     waste=0.0, currency="USD", simulated=True, rate_per_hour=36.0,
                     gpu_count=2, gpus_held=1, gpus_busy=1, gpu_idle_since=None)
    doc.update(fields)
    return doc


def dumps(doc: Any) -> bytes:
    return json.dumps(doc).encode()  # NaN and Infinity as the JSON literals Python writes


def admin_get(hub: Hub, path: str) -> tuple[int, str]:
    status, _, data = hub.request("GET", "/services/costguard/" + path,
                                  hub.admin_token)  # type: ignore[attr-defined]
    return status, data.decode()


def strict_json(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise AssertionError(f"{name} in the service's JSON")
    return json.loads(text, parse_constant=refuse)


def server_rows(hub: Hub) -> dict[str, dict[str, Any]]:
    status, text = admin_get(hub, "api/spend?by=server")
    assert status == 200, text
    return {r["key"]: r for r in strict_json(text)["rows"]}


def responsive(hub: Hub) -> None:
    """The service answers an admin's read at once."""
    t0 = time.monotonic()
    status, text = admin_get(hub, "api/spend?by=user")
    assert status == 200, text
    assert time.monotonic() - t0 < 5.0


# --- the tests ----------------------------------------------------------------------------

def test_every_hostile_report_is_refused_with_its_reason_and_the_service_stays_up(
        hub: Hub) -> None:
    token = own_token(hub, "mallory")
    # her server is known to the service (listed by the Hub) before she starts
    wait_for(lambda: "mallory/" in server_rows(hub), 30, "mallory's server listed")
    before = server_rows(hub)["mallory/"]["spend"]
    year_2100 = datetime(2100, 1, 1, tzinfo=timezone.utc).timestamp()
    nested = b"[" * 100_000
    cases: list[tuple[str, bytes, int, str]] = [
        ("NaN", dumps(valid(hub, spend=float("nan"))), 400, "NaN"),
        ("+Infinity", dumps(valid(hub, spend=float("inf"))), 400, "Infinity"),
        ("-Infinity", dumps(valid(hub, waste=float("-inf"))), 400, "-Infinity"),
        ("NaN time", dumps(valid(hub, time=float("nan"))), 400, "NaN"),
        ("a literal beyond a double", dumps(valid(hub, spend=0.5)).replace(
            b'"spend": 0.5', b'"spend": 1e999'), 400, "finite"),
        ("1e308 spend", dumps(valid(hub, spend=1e308)), 400, "spend"),
        ("a 400-digit integer time", dumps(valid(hub, time=10**400)), 400, "time"),
        ("a 400-digit integer spend", dumps(valid(hub, spend=10**400)), 400, "spend"),
        ("a currency with a trailing newline", dumps(valid(hub, currency="USD\n")), 400,
         "currency"),
        ("negative spend", dumps(valid(hub, spend=-5.0)), 400, "spend"),
        ("spend far above the dearest rate for the run",
         dumps(valid(hub, spend=MAX_RATE * 100)), 400, "spend"),
        ("rate above the site's dearest", dumps(valid(hub, rate_per_hour=MAX_RATE * 10)),
         400, "rate_per_hour"),
        ("waste above spend", dumps(valid(hub, waste=1.0)), 400, "waste"),
        ("unattributed above spend", dumps(valid(hub, unattributed=1.0)), 400,
         "unattributed"),
        ("negative unattributed", dumps(valid(hub, unattributed=-1.0)), 400, "unattributed"),
        ("NaN unattributed", dumps(valid(hub, unattributed=float("nan"))), 400, "NaN"),
        ("time in 2100", dumps(valid(hub, time=year_2100)), 400, "time"),
        ("since 0", dumps(valid(hub, since=0)), 400, "since"),
        ("since 1e308", dumps(valid(hub, since=1e308)), 400, "since"),
        ("since after time", dumps(valid(hub, since=time.time() + 60)), 400, "since"),
        ("a formula as currency",
         dumps(valid(hub, currency='=HYPERLINK("http://x","y")')), 400, "currency"),
        ("gpu_count 10**30", dumps(valid(hub, gpu_count=10**30)), 400, "gpu_count"),
        ("gpus_busy above gpu_count", dumps(valid(hub, gpus_busy=3)), 400, "gpus_busy"),
        ("active_jobs 10**30", dumps(valid(hub, active_jobs=10**30)), 400, "active_jobs"),
        ("a string as a number", dumps(valid(hub, spend="1")), 400, "spend"),
        ("NaN waste removed", dumps(valid(hub, waste_removed=float("nan"))), 400, "NaN"),
        ("negative waste removed", dumps(valid(hub, waste_removed=-1.0)), 400,
         "waste_removed"),
        ("waste removed beyond a year of the dearest rate",
         dumps(valid(hub, waste_removed=MAX_RATE * 24 * 366 + 1)), 400, "waste_removed"),
        ("waste removed as a string", dumps(valid(hub, waste_removed="5")), 400,
         "waste_removed"),
        ("true as a number", dumps(valid(hub, gpu_count=True)), 400, "gpu_count"),
        ("kept of 10000 keys", dumps(valid(hub, kept=["k"] * 10_000)), 400, "kept"),
        ("kept holding an object", dumps(valid(hub, kept=[{"a": 1}])), 400, "kept"),
        ("100000 [", nested, 400, "JSON"),
        ("100000 { in a field", dumps(valid(hub)).replace(
            b'"kept": []', b'"kept": ' + b'{"a":' * 50_000), 400, "JSON"),
        ("not an object", b"[1, 2, 3]", 400, "object"),
        ("no body", b"", 400, "JSON"),
        ("bytes that are not UTF-8", b"\xff\xfe\x00\xd8" * 64, 400, "JSON"),
        ("another protocol version", dumps(valid(hub, version=2)), 400, "version"),
        ("claiming to be alice", dumps({**valid(hub), "user": "alice"}), 400, "user"),
        ("a server mallory's token does not speak for", dumps(valid(hub, server="other")),
         403, "speak"),
        ("alice's server by name", dumps(valid(hub, server="alice/")), 403, "speak"),
    ]
    for what, body, expected, word in cases:
        status, doc = post(hub, token, body)
        assert status == expected, (what, status, doc)
        assert isinstance(doc, dict) and word in doc["message"], (what, doc)
        responsive(hub)
    # over the limit, and 50 MB: refused after the headers, unread
    for size in (MAX_BODY_BYTES + 1, 50 * 1024 * 1024):
        status, doc = post_huge(hub, token, size)
        assert status == 413 and f"{size} bytes" in doc["message"], (size, status, doc)
        responsive(hub)
    # the same in chunks, the size unannounced: the connection ends at the limit (tornado's
    # bare 400, or the connection closed on the sender), never a 5xx or an accepted report
    for size in (MAX_BODY_BYTES + 1, 50 * 1024 * 1024):
        status, doc = post_huge(hub, token, size, chunked=True)
        assert status in (None, 400, 413), (size, status, doc)
        responsive(hub)
    # her server shows its last refusal and the reason to the admins; nothing was counted
    status, doc = post(hub, token, dumps(valid(hub, spend=float("nan"))))
    assert status == 400
    row = server_rows(hub)["mallory/"]
    assert row["state"] == "refused", row
    assert row["detail"].startswith("report refused:") and "NaN" in row["detail"], row
    assert row["spend"] == before
    # and the same checks let an honest report of hers through
    status, doc = post(hub, token, dumps(valid(hub, spend=0.0)))
    assert status == 200 and doc["accepted"] is True, doc
    assert server_rows(hub)["mallory/"]["state"] == "ok"


def test_a_flood_of_400_digit_reports_leaves_every_other_users_figures_counting(
        hub: Hub) -> None:
    """Mallory's reports share a batch (one trip to the worker) with alice's and bob's: a
    `time` of 400 digits raised OverflowError in the checks, which failed every report of
    its batch with a 500 while she kept sending. Each is now her own 400, and the others'
    reports of the same seconds are recorded."""
    token = own_token(hub, "mallory")
    body = dumps(valid(hub, time=10**400))
    answers: list[int] = []
    lock = threading.Lock()
    stop = time.monotonic() + 8.0  # eight of the honest servers' report intervals

    def flood() -> None:
        while time.monotonic() < stop:
            status, _ = post(hub, token, body)
            with lock:
                answers.append(status)

    t0 = time.time()
    senders = [threading.Thread(target=flood, daemon=True) for _ in range(6)]
    for sender in senders:
        sender.start()
    seen: dict[str, list[float]] = {u: [] for u in HONEST}
    while time.monotonic() < stop:
        rows = server_rows(hub)
        for u in HONEST:
            row = rows[f"{u}/"]
            if row["state"] == "ok" and row["last_ok"] > t0:
                seen[u].append(row["last_ok"])
        time.sleep(0.5)
    for sender in senders:
        sender.join(30)
    assert len(answers) > 50, len(answers)
    assert set(answers) == {400}, sorted(set(answers))
    for u in HONEST:  # their reports kept being taken all through the flood
        assert len(set(seen[u])) >= 3, (u, seen[u])
        assert server_rows(hub)[f"{u}/"]["detail"] in ("", None)
    responsive(hub)


def test_mallorys_tokens_read_nobody_elses_figures(hub: Hub) -> None:
    for token in (own_token(hub, "mallory"), hub.token_for("mallory")):
        for path in ("api/spend?user=alice", "api/spend?by=user&user=bob",
                     "api/spend.csv?user=alice", "api/spend?by=group", "api/series?user=alice",
                     "api/series?by=group", "api/events", "metrics"):
            status, doc = hub.service(path, token)
            assert status == 403, (path, status, doc)
            assert isinstance(doc, dict) and doc["message"], (path, doc)
        status, doc = hub.service("api/spend?by=user", token)
        assert status == 200 and [r["key"] for r in doc["rows"]] == ["mallory"], doc
        status, doc = hub.service("api/spend?by=server", token)
        assert status == 200 and [r["key"] for r in doc["rows"]] == ["mallory/"], doc
        status, doc = hub.service("api/me", token)
        assert status == 200 and doc["user"] == "mallory" and doc["admin"] is False, doc


def test_the_others_kept_updating_and_the_service_stayed_sound(hub: Hub) -> None:
    attacked = time.time()
    rows = wait_for(lambda: (lambda r: r if all(
        r[f"{u}/"]["state"] == "ok" and r[f"{u}/"]["last_ok"] > attacked
        and r[f"{u}/"]["spend"] > 0 for u in HONEST) else None)(server_rows(hub)), 30,
        "alice and bob reporting after the attack")
    assert all(rows[f"{u}/"]["detail"] in ("", None) for u in HONEST), rows
    # what the admin page reads: valid JSON, no NaN or Infinity anywhere
    for path in ("api/spend?by=user", "api/spend?by=group", "api/spend?by=server",
                 "api/spend?by=user&since=0", "api/series?by=user", "api/series?by=group",
                 "api/series?by=server", "api/series?by=user&step=day", "api/events",
                 "api/me"):
        status, text = admin_get(hub, path)
        assert status == 200, (path, text[:300])
        assert "Infinity" not in text and "NaN" not in text, path
        strict_json(text)
    status, text = admin_get(hub, "api/spend.csv?by=server")
    assert status == 200 and "HYPERLINK" not in text
    cells = {c.strip().lower() for line in csv.reader(io.StringIO(text)) for c in line}
    assert not cells & {"nan", "inf", "-inf", "infinity", "-infinity"}, text
    groups = {r["key"]: r for r in strict_json(admin_get(hub, "api/spend?by=group")[1])["rows"]}
    assert 0 < groups["ml"]["spend"] < GROUP_BUDGET
    # the service's SQLite stayed small
    size = sum(p.stat().st_size for p in hub.service_db.parent.glob(hub.service_db.name + "*"))
    assert size < 2 * 1024 * 1024, size
    db = sqlite3.connect(f"file:{hub.service_db}?mode=ro", uri=True)
    try:
        assert db.execute("SELECT COUNT(*) FROM hours").fetchone()[0] < 300
        assert db.execute("SELECT COUNT(*) FROM epochs").fetchone()[0] < 20
        assert db.execute("SELECT COUNT(*) FROM events").fetchone()[0] < 300
        # nothing hostile was kept
        assert not db.execute("SELECT COUNT(*) FROM servers WHERE currency IS NOT NULL "
                              "AND currency != 'USD'").fetchone()[0]
    finally:
        db.close()


def test_another_members_gpu_spawn_is_not_refused_because_of_mallory(hub: Hub) -> None:
    hub.stop_server("bob")
    wait_for(lambda: not running(hub, "bob") and not server_model(hub, "bob"), 30,
             "bob stopped")
    states = states_for(load_settings(hub.service_config), "bob", ["ml"], time.time())
    assert states and not any(s.exhausted for s in states), states
    status, _, body = hub.request("POST", "/hub/api/users/bob/server", hub.tester_token,
                                  {"profile": "gpu"})
    assert status in (201, 202), body
    hub.wait_ready("bob")
    note_server(hub, "bob")
    t0 = time.time()
    wait_for(lambda: (lambda r: r["state"] == "ok" and r["last_ok"] > t0)(
        server_rows(hub)["bob/"]), 30, "bob's GPU server reporting")


def test_her_claimed_waste_removed_is_hers_alone_and_decides_no_money(hub: Hub) -> None:
    """`waste_removed` is the server's own figure, shown as such: mallory's inflated claim
    (within the bounds) shows on her row only, moves no spend or budget of hers or anyone's,
    and her next report replaces it (a gauge she cannot pump report over report)."""
    token = own_token(hub, "mallory")
    wait_for(lambda: "alice/" in server_rows(hub), 30, "alice's server listed")
    t0, before = time.monotonic(), server_rows(hub)
    claim = MAX_RATE * 24 * 300  # large, but within a year of the dearest rate: accepted
    for _ in range(3):
        status, doc = post(hub, token, dumps(valid(hub, spend=0.0, waste_removed=claim)))
        assert status == 200 and doc["accepted"] is True, doc
    after = server_rows(hub)
    assert after["mallory/"]["waste_removed"] == pytest.approx(claim)  # not 3x the claim
    # her spend moved by no more than the meter's time passing at the dearest rate
    moved = MAX_RATE * (time.monotonic() - t0) / 3600 + 0.01
    assert abs(after["mallory/"]["spend"] - before["mallory/"]["spend"]) <= moved, (
        before["mallory/"], after["mallory/"])
    assert after["alice/"]["waste_removed"] == before["alice/"]["waste_removed"]
    states = states_for(load_settings(hub.service_config), "mallory", ["ml"], time.time())
    assert not any(s.exhausted for s in states), states
    status, doc = post(hub, token, dumps(valid(hub, spend=0.0, waste_removed=0.0)))
    assert status == 200 and doc["accepted"] is True, doc
    assert server_rows(hub)["mallory/"]["waste_removed"] == 0.0


def test_a_run_cannot_claim_more_than_the_dearest_rate_for_its_time(hub: Hub) -> None:
    token = own_token(hub, "mallory")
    started = started_at(hub, "mallory")
    answers = []
    for i in range(8):  # as early and as late as the skew allows, each a run of its own
        now = time.time()
        t, since = now + 290, started - 290 + i
        doc = valid(hub, time=t, since=since, spend=MAX_RATE * (t - since) / 3600,
                    gpus_busy=0, gpus_held=0)
        answers.append(post(hub, token, dumps(doc))[0])
    assert all(status < 500 for status in answers), answers
    spend = server_rows(hub)["mallory/"]["spend"]
    most = MAX_RATE * (time.time() - started) / 3600 * 1.01
    states = states_for(load_settings(hub.service_config), "bob", ["ml"], time.time())
    assert spend <= most and not any(s.exhausted for s in states), (
        f"mallory's server ran {time.time() - started:.0f} s (at most {most:.2f} USD at the "
        f"dearest rate) and is counted {spend:.2f} USD (answers {answers}); bob's budgets: "
        f"{states}")


def test_a_claimed_busy_gpu_neither_keeps_nor_stops_her_server(hub: Hub,
                                                                tmp_path: Path) -> None:
    """Policy `gpu` does not trust reports (the default): mallory's word that her GPU is busy
    defers to the usual culler's own rule, both ways."""
    token = own_token(hub, "mallory")
    claiming = threading.Event()
    claiming.set()

    def claim() -> None:  # a valid report of a busy GPU, every half second, as her code could
        while claiming.is_set():
            try:
                post(hub, token, dumps(valid(hub, gpus_busy=1, gpus_held=1)))
            except (OSError, KeyError, RuntimeError):
                pass
            time.sleep(0.5)

    claimer = threading.Thread(target=claim, daemon=True)
    claimer.start()
    try:
        wait_for(lambda: (lambda r: r["state"] == "ok" and r["gpus_busy"] == 1)(
            server_rows(hub)["mallory/"]), 30, "mallory's claim recorded")
        settings = load_settings(hub.service_config)
        row, groups, kept = read_row(settings.db_path, "mallory", "")
        assert row is not None and row.gpus_busy == 1 and row.profile == "gpu"
        d = decide(row, groups, policies_from([POLICY]), time.time(), kept)
        assert d.action == DEFER and "does not take a server's word" in d.reason, d
        # the arbiter leaves the call to the culler's rule: not idle long enough, kept...
        arbiter = cull_arbiter_hook(hub.service_config)
        server = {"full_name": "mallory/"}
        assert arbiter(inactive=timedelta(seconds=10), inactive_limit=3600,
                       server=server) is False
        # ...idle past it, culled, whatever she says of her GPU
        assert arbiter(inactive=timedelta(hours=2), inactive_limit=3600,
                       server=server) is True
        # the real jupyterhub-idle-culler with the arbiter hook: her server culled by its
        # rule (1 s); the hook judges only hers here, the others are not this test's
        log = tmp_path / "decisions.jsonl"
        config = tmp_path / "culler_config.py"
        config.write_text(
            "import json\n"
            "from jupyter_costguard.hub.cull import cull_arbiter_hook\n"
            f"arbiter = cull_arbiter_hook({str(hub.service_config)!r})\n"
            "def judged(**kw):\n"
            "    if kw['server']['full_name'] != 'mallory/':\n"
            "        return False\n"
            "    result = arbiter(**kw)\n"
            f"    with open({str(log)!r}, 'a') as f:\n"
            "        f.write(json.dumps({'inactive': kw['inactive'].total_seconds(),"
            " 'cull': result}) + '\\n')\n"
            "    return result\n"
            "c = get_config()  # noqa\n"
            "c.IdleCuller.cull_arbiter_hook = judged\n")
        culler = subprocess.Popen(
            [sys.executable, "-m", "jupyterhub_idle_culler", f"--config={config}",
             f"--url={hub.url}/hub/api", "--timeout=1", "--cull-every=2"],
            env={"JUPYTERHUB_API_TOKEN": hub.tester_token, "PATH": str(BIN)},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: not running(hub, "mallory"), 40, "mallory culled by the rule")
        finally:
            culler.terminate()
            out = culler.communicate(timeout=10)[0].decode(errors="replace")
    finally:
        claiming.clear()
        claimer.join(10)
    decisions = [json.loads(line) for line in log.read_text().splitlines()]
    assert decisions and all(d["cull"] for d in decisions), out
    assert all(d["inactive"] >= 1 for d in decisions), decisions
    # the service's own culler neither warned nor stopped her, nor kept her on her word
    status, text = admin_get(hub, "api/events")
    assert status == 200
    assert not [e for e in strict_json(text)["events"] if e["user"] == "mallory"], text
    assert all(running(hub, u) for u in HONEST)


def test_no_server_ever_received_a_token_but_its_own(hub: Hub) -> None:
    """Last: everything every server heard through the suite, against its own token."""
    pids = hub.service_pids()
    assert pids, "the costguard service's process"
    service_token = environ_of(pids[0])["JUPYTERHUB_API_TOKEN"]
    others = {"the costguard service": service_token,
              "the tester": hub.tester_token,
              "the admin": hub.admin_token}  # type: ignore[attr-defined]
    own: dict[int, str] = hub.own  # type: ignore[attr-defined]
    assert service_token not in own.values()
    for user in (*HONEST, "mallory"):
        lines = (hub.heard / f"{user}.jsonl").read_text().splitlines()  # type: ignore
        heard = [json.loads(line) for line in lines]
        assert heard, user
        authorized = 0
        for request in heard:
            mine = own[request["pid"]]
            for name, value in request["headers"]:
                for who, secret in others.items():
                    assert secret not in value, (user, who, request["path"], name)
                if name.lower() == "authorization":
                    scheme, _, presented = value.partition(" ")
                    assert scheme.lower() in ("token", "bearer"), (user, value[:10])
                    assert presented.strip() == mine, (user, request["path"])
                    authorized += 1
        # the recorder did hear headers: the one request each server got with its token
        assert authorized >= 1, (user, heard[:3])
