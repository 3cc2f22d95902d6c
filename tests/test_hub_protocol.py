"""The server <-> service report contract (common/hubprotocol.py) and the store's bounds: every
check refuses with a reason that names it, a valid report passes unchanged, one report's
trouble never reaches another's figures."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from jupyter_costguard.common import hubprotocol as protocol
from jupyter_costguard.common.hubprotocol import Limits, ReportError, check_report, parse_body
from jupyter_costguard.hub.intake import reporter_of
from jupyter_costguard.hub.store import HubStore
from jupyter_costguard.hub.storerows import MAX_SPREAD_HOURS, spread

NOW = 1_800_000_000.0
STARTED = NOW - 7200


def doc(**kw: Any) -> dict[str, Any]:
    return {**protocol.report_doc(
        server="", time=NOW, since=STARTED + 5, spend=2.0, waste=0.5, currency="USD",
        simulated=False, rate_per_hour=3.6, gpu_count=2, gpus_held=1, gpus_busy=0,
        gpu_idle_since=NOW - 60, active_jobs=0), **kw}


LIMITS = Limits(now=NOW, started=STARTED, max_rate_per_hour=100.0)


def refused(d: Any, word: str, limits: Limits = LIMITS) -> ReportError:
    with pytest.raises(ReportError) as e:
        check_report(d, limits)
    assert word in str(e.value), str(e.value)
    assert 400 <= e.value.status < 500
    return e.value


def test_a_valid_report_passes_as_sent() -> None:
    r = check_report(doc(), LIMITS)
    assert (r.spend, r.waste, r.since, r.gpus_held, r.currency) == (2.0, 0.5, STARTED + 5, 1,
                                                                   "USD")


@pytest.mark.parametrize(("field", "value", "word"), [
    ("spend", math.nan, "finite"), ("spend", math.inf, "finite"), ("waste", -math.inf, "finite"),
    ("spend", 1e308, "spend"), ("spend", -1.0, "spend"), ("waste", 3.0, "waste"),
    ("rate_per_hour", 101.0, "rate_per_hour"), ("time", 4102444800.0, "time"),
    ("time", NOW - 3600, "time"), ("since", 0, "since"), ("since", 1e308, "since"),
    ("since", NOW + 1, "since"), ("gpu_count", 10**30, "gpu_count"),
    ("gpus_held", 3, "gpus_held"), ("gpus_busy", 3, "gpus_busy"), ("gpu_count", 1.5, "integer"),
    ("gpu_count", True, "integer"), ("currency", '=HYPERLINK("http://x","y")', "ISO 4217"),
    ("currency", "usd", "ISO 4217"), ("simulated", "yes", "simulated"),
    ("gpu_idle_since", NOW + 10, "gpu_idle_since"), ("kept", ["x"] * 17, "kept"),
    ("kept", [{"a": 1}], "kept"), ("version", 2, "version"), ("server", "a/b", "server"),
    ("spend", "1", "number"),
    # integers of 400 digits are valid JSON and have no float: refused, never OverflowError
    ("time", 10**400, "time"), ("since", 10**400, "since"), ("spend", 10**400, "spend"),
    ("waste", 10**400, "waste"), ("rate_per_hour", 10**400, "rate_per_hour"),
    ("unattributed", 10**400, "unattributed"), ("gpu_idle_since", -10**400, "gpu_idle_since"),
    ("gpus_busy", 10**400, "gpus_busy"),
    # `$` took a trailing newline as the end of the text
    ("currency", "USD\n", "ISO 4217"), ("server", "gpu\n", "server"),
], ids=lambda v: repr(v)[:20])
def test_each_bad_figure_is_refused_naming_it(field: str, value: Any, word: str) -> None:
    refused(doc(**{field: value}), word)


def test_a_busy_gpu_need_not_be_held_by_a_process_the_server_sees() -> None:
    """NVML lists no processes inside many containers (another PID namespace), and a server
    whose idle threshold is 0 counts every GPU busy: a GPU busy but not held is a figure
    the server may report, bounded by its GPUs (it was refused as `busy > held`)."""
    r = check_report(doc(gpus_held=0, gpus_busy=2, gpu_idle_since=None), LIMITS)
    assert (r.gpus_held, r.gpus_busy) == (0, 2)


def test_spend_cannot_outrun_the_dearest_rate_for_as_long_as_the_server_ran() -> None:
    # 5 s after the Hub started it, at most 100/h: 0.14
    young = Limits(now=NOW, started=NOW - 5, max_rate_per_hour=100.0)
    refused(doc(since=NOW - 5, spend=0.5, waste=0.0, gpu_idle_since=None), "spend", young)
    assert check_report(doc(since=NOW - 5, spend=0.1, waste=0.0, gpu_idle_since=None),
                        young).spend == 0.1
    # the skew allowed for `time` and `since` widens nothing: the run is the Hub's
    skewed = doc(since=NOW - 5 - 290, time=NOW + 290, spend=100.0 * 580 / 3600, waste=0.0,
                 gpu_idle_since=None)
    refused(skewed, "spend", young)


def test_unknown_fields_and_non_objects_are_refused() -> None:
    refused(doc(user="alice"), "unknown field")
    refused([doc()], "JSON object")


def test_the_body_is_bounded_and_strict_json() -> None:
    with pytest.raises(ReportError) as e:
        parse_body(b" " * (protocol.MAX_BODY_BYTES + 1))
    assert e.value.status == 413 and "at most" in str(e.value)
    for body, word in ((b'{"spend": NaN}', "NaN"), (b'{"spend": Infinity}', "Infinity"),
                       (b"[" * 100_000, "not JSON"), (b"\xff\xfe", "not JSON"),
                       (b"{", "not JSON")):
        with pytest.raises(ReportError) as e:
            parse_body(body)
        assert word in str(e.value)
    assert parse_body(json.dumps(doc()).encode()) == doc()


def test_a_token_speaks_for_its_own_server_only() -> None:
    server = reporter_of({"kind": "user", "name": "alice",
                          "scopes": ["access:servers!server=alice/", "users:activity!user=alice",
                                     "access:services!service=costguard"]})
    assert server.user == "alice" and server.servers == frozenset({""})
    own = reporter_of({"kind": "user", "name": "alice", "scopes": ["access:servers!user=alice"]})
    assert own.servers is None  # a user's own token: any of alice's servers, and only hers
    for model, word in (
            ({"kind": "service", "name": "costguard", "scopes": ["access:servers"]}, "user"),
            ({"kind": "user", "name": "alice", "scopes": ["access:servers!server=bob/"]},
             "no server"),
            ({"kind": "user", "name": "alice", "scopes": ["read:users:name!user=alice"]},
             "no server")):
        with pytest.raises(ReportError) as e:
            reporter_of(model)
        assert e.value.status == 403 and word in str(e.value)


def test_the_answer_is_read_within_bounds() -> None:
    answer = protocol.parse_answer({"interval": 0.001, "warnings": [
        protocol.warning_doc("hub-cull:1", "t", "m", "warning", {}), {"kind": "other"}]}, 30.0)
    assert answer.interval == 1.0 and [w["key"] for w in answer.warnings] == ["hub-cull:1"]
    assert protocol.parse_answer({"interval": math.inf}, 30.0).interval == 30.0
    with pytest.raises(ValueError):
        protocol.parse_answer([], 30.0)


def test_the_hourly_spread_is_bounded_whatever_the_times() -> None:
    hours = spread(0.0, 1e12, 1.0)
    assert len(hours) <= MAX_SPREAD_HOURS + 1
    assert sum(hours.values()) == pytest.approx(1.0)


def test_one_report_is_one_transaction(tmp_path: Path) -> None:
    """A report that fails in the store rolls back only itself."""
    store = HubStore(tmp_path / "hub.sqlite")
    store.record_report("alice", "/user/alice/", "gpu", check_report(doc(), LIMITS))
    broken = check_report(doc(spend=3.0), LIMITS)
    store.db.execute("CREATE TRIGGER no_bob BEFORE INSERT ON epochs WHEN NEW.user = 'bob' "
                     "BEGIN SELECT RAISE(ABORT, 'bob refused'); END")
    with pytest.raises(sqlite3.IntegrityError):
        store.record_report("bob", "/user/bob/", "gpu", broken)
    store.record_report("alice", "/user/alice/", "gpu",
                        check_report(doc(spend=3.0, time=NOW + 60), Limits(now=NOW + 60,
                                                                           started=STARTED)))
    rows = {r.user: r for r in store.servers()}
    assert set(rows) == {"alice"} and rows["alice"].spend == 3.0
    assert sum(s for s, _, _ in store.totals(0, None).values()) == pytest.approx(3.0)


def test_one_epoch_per_run_and_a_report_dated_ahead_counts_as_now(tmp_path: Path) -> None:
    """Reports of one run with different `since` move one epoch (the run's cap holds once),
    and a report dated ahead of the service's clock is seen as of that clock."""
    store = HubStore(tmp_path / "hub.sqlite")
    limits = Limits(now=NOW, started=STARTED)
    for i in range(5):
        r = check_report(doc(since=STARTED + i, spend=1.0 + i, time=NOW + 200), limits)
        store.record_report("mal", "/user/mal/", "gpu", r, run=STARTED, received=NOW)
    assert store.db.execute("SELECT COUNT(*) FROM epochs").fetchone() == (1,)
    row = store.servers()[0]
    assert row.spend == 5.0 and row.last_ok == NOW


def test_pages_are_answered_from_the_last_computation_while_a_fresh_one_runs(
        tmp_path: Path) -> None:
    """With thousands of servers the store changes hundreds of times a second: a page is
    answered from the cache while it is younger than page_max_age, then from it while the
    next one is computed in the background; past twice that age it is computed at once."""
    import asyncio
    import time as clock

    from jupyter_costguard.hub.app import CostGuardHub

    app = CostGuardHub()
    app.initialize([f"--db={tmp_path / 'hub.sqlite'}", "--CostGuardHub.page_max_age_seconds=0.3"])
    calls: list[int] = []

    def figures(tag: str) -> int:
        calls.append(1)
        return len(calls)

    async def scenario() -> None:
        assert await app.report(figures, "x") == 1
        app.store.version += 1  # a report changed the store
        assert await app.report(figures, "x") == 1  # young: from the cache
        clock.sleep(0.35)
        assert await app.report(figures, "x") == 1  # stale: answered, refreshed behind
        await asyncio.sleep(0.05)
        assert len(calls) == 2 and await app.report(figures, "x") == 2
        app.store.version += 1
        clock.sleep(0.65)  # older than twice the age: computed before the answer
        assert await app.report(figures, "x") == 3
        assert await app.report(figures, "y") == 4  # every argument is in the key

    asyncio.run(scenario())
    app.worker.shutdown()
    app.store.close()


def test_a_batch_of_reports_keeps_each_apart(tmp_path: Path) -> None:
    """Reports that share a commit each have a savepoint: one that fails is rolled back
    alone and said so; the others are kept."""
    store = HubStore(tmp_path / "hub.sqlite")
    store.db.execute("CREATE TRIGGER no_bob BEFORE INSERT ON epochs WHEN NEW.user = 'bob' "
                     "BEGIN SELECT RAISE(ABORT, 'bob refused'); END")
    r = check_report(doc(), LIMITS)
    errors = store.record_reports([("alice", "/user/alice/", "", r, STARTED, NOW),
                                   ("bob", "/user/bob/", "", r, STARTED, NOW),
                                   ("carol", "/user/carol/", "", r, STARTED, NOW)])
    assert errors[0] is None and errors[2] is None
    assert isinstance(errors[1], sqlite3.IntegrityError)
    assert sorted(s.user for s in store.servers()) == ["alice", "carol"]
    assert sum(s for s, _, _ in store.totals(0, None).values()) == pytest.approx(4.0)


def test_what_is_kept_ready_is_bounded_however_many_queries(tmp_path: Path) -> None:
    """A user sending thousands of different queries cannot make the service recompute
    thousands of answers after every look at the Hub."""
    import asyncio

    from jupyter_costguard.hub.app import CostGuardHub
    from jupyter_costguard.hub.pagecache import MAX_KEPT_READY

    app = CostGuardHub()
    app.initialize([f"--db={tmp_path / 'hub.sqlite'}"])

    async def scenario() -> None:
        for i in range(200):
            await app.report(lambda since: since, float(i))
        assert len(app.pages.asked) == MAX_KEPT_READY
        assert (("<lambda>", 199.0)) in app.pages.asked
        assert ("<lambda>", 0.0) not in app.pages.asked

    asyncio.run(scenario())
    app.worker.shutdown()
    app.store.close()


class _Ctx:
    """What Intake reads of the service, for its batch alone."""

    def __init__(self, store: HubStore) -> None:
        import logging
        self.store = store
        self.log = logging.getLogger("test")
        self.max_rate_per_hour = 100.0
        self.clock_skew_seconds = protocol.CLOCK_SKEW_SECONDS


def test_one_report_that_breaks_a_check_fails_alone_in_its_batch(tmp_path: Path) -> None:
    """A 400-digit `time` in one report of a batch is that report's refusal: the others in
    the same trip to the worker are recorded (before, its OverflowError failed them all)."""
    from jupyter_costguard.hub.hubapi import RunningServer
    from jupyter_costguard.hub.intake import Intake
    store = HubStore(tmp_path / "hub.sqlite")
    intake = Intake(_Ctx(store))
    now = NOW

    def item(user: str, **kw: Any) -> tuple[str, str, RunningServer, bytes, float]:
        body = json.dumps(doc(**kw)).encode()
        return (user, "", RunningServer(user, "", f"/user/{user}/", "gpu", STARTED), body, now)

    out = intake._take_batch([item("alice"), item("mallory", time=10**400), item("bob")])
    assert isinstance(out[1], ReportError) and 400 <= out[1].status < 500, out[1]
    assert "time" in str(out[1])
    assert not isinstance(out[0], ReportError) and not isinstance(out[2], ReportError)
    assert sorted(s.user for s in store.servers()) == ["alice", "bob"]


def test_a_check_that_raises_anything_refuses_that_report_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from jupyter_costguard.hub import intake as intake_module
    from jupyter_costguard.hub.hubapi import RunningServer
    store = HubStore(tmp_path / "hub.sqlite")
    intake = intake_module.Intake(_Ctx(store))
    real = protocol.check_report

    def flaky(d: Any, limits: Limits) -> Any:
        if d.get("spend") == 1.5:
            raise ZeroDivisionError("a bug in a check")
        return real(d, limits)

    monkeypatch.setattr(intake_module.protocol, "check_report", flaky)
    items = [(u, "", RunningServer(u, "", f"/user/{u}/", "gpu", STARTED),
              json.dumps(doc(spend=sp)).encode(), NOW)
             for u, sp in (("alice", 2.0), ("mallory", 1.5), ("bob", 2.0))]
    out = intake._take_batch(items)
    assert isinstance(out[1], ReportError) and out[1].status == 400
    assert "could not be checked" in str(out[1])
    assert sorted(s.user for s in store.servers()) == ["alice", "bob"]


async def test_a_token_the_hub_does_not_know_is_not_asked_about_again_at_once() -> None:
    """Each report with an unknown token cost a call to the Hub; now one per token per
    REFUSED_TOKEN_SECONDS (a flood of bad reports does not become a flood at the Hub)."""
    import re as _re

    from tornado import web

    from jupyter_costguard.hub.intake import Intake

    class Auth:  # the Hub's answer about a token: unknown
        auth_header_pat = _re.compile(r"token\s+(.+)", _re.IGNORECASE)
        calls = 0

        async def user_for_token(self, token: str, sync: bool = False) -> None:
            Auth.calls += 1
            return None

    intake = Intake(object())
    for _ in range(50):
        with pytest.raises(web.HTTPError) as e:
            await intake.identify(Auth(), "token not-a-token")
        assert e.value.status_code == 403
    assert Auth.calls == 1
    with pytest.raises(web.HTTPError):
        await intake.identify(Auth(), "token another-bad-one")
    assert Auth.calls == 2


def _any_json() -> Any:
    from hypothesis import strategies as st
    scalars = (st.none() | st.booleans() | st.floats(allow_nan=False, allow_infinity=False)
               | st.integers() | st.integers(min_value=10**300, max_value=10**400)
               | st.integers(min_value=-(10**400), max_value=-(10**300)) | st.text(max_size=8))
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                        | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=6)


def test_any_value_in_any_field_is_a_refusal_or_a_report_never_another_error() -> None:
    """Whatever JSON a server sends in each field (integers of hundreds of digits, nesting,
    wrong types), the checks answer with a Report or a ReportError: nothing else can escape
    into the batch the report shares with others."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=400, deadline=None)
    @given(st.dictionaries(st.sampled_from(sorted(protocol.FIELDS)), _any_json(),
                           max_size=len(protocol.FIELDS)))
    def check(fields: dict[str, Any]) -> None:
        body = json.dumps({**doc(), **fields}).encode()
        try:
            check_report(parse_body(body), LIMITS)
        except ReportError as e:
            assert 400 <= e.status < 500

    check()


def test_the_default_views_are_kept_ready_only_while_a_page_is_open() -> None:
    """After each look at the Hub the admin's default views were recomputed whether or not
    anyone looked (at 10,000 servers a second of work a cycle); now only while a page has
    asked for something in the last ASKED_SECONDS (an open page asks every 30 s)."""
    import asyncio

    from jupyter_costguard.hub import pagecache

    done: list[str] = []

    async def run(fn: Any, *args: Any) -> Any:
        done.append(fn(*args))
        return done[-1]

    def view(name: str) -> str:
        return name

    async def scenario() -> None:
        pages = pagecache.PageCache(lambda: 0, run, lambda: 30.0)
        pages.refresh([(view, ("default",))])
        await asyncio.sleep(0)
        assert done == []  # no page open: nothing computed
        assert await pages.answer(view, "asked") == "asked"
        pages.refresh([(view, ("default",))])
        await asyncio.sleep(0)
        assert done == ["asked", "default"]
        (key,) = [k for k in pages.asked]
        fn, args, _ = pages.asked[key]
        pages.asked[key] = (fn, args, -1e9)  # asked long ago: the page was closed
        pages.held.clear()
        pages.refresh([(view, ("default",))])
        await asyncio.sleep(0)
        assert done == ["asked", "default"] and not pages.asked

    asyncio.run(scenario())


def test_a_page_computed_in_the_pages_process_reads_the_same_figures(tmp_path: Path) -> None:
    """The pages' figures are computed in a process of their own (their Python would hold
    the GIL, and so the IO loop): the store goes there as a read-only view of its file, and
    the answer is the one computed here."""
    import asyncio
    import pickle

    from jupyter_costguard.hub import report
    from jupyter_costguard.hub.app import CostGuardHub

    app = CostGuardHub()
    app.initialize([f"--db={tmp_path / 'hub.sqlite'}"])
    app.store.record_report("alice", "/user/alice/", "", check_report(doc(), LIMITS), STARTED,
                            NOW)
    there = pickle.loads(pickle.dumps(app.store))
    assert there is not app.store and [s.user for s in there.servers()] == ["alice"]
    with pytest.raises(sqlite3.OperationalError):  # read-only
        there.db.execute("DELETE FROM servers")
    # with page_max_age 0 ("computed afresh whenever a report changed something") no read
    # is reused there: a report recorded a moment ago shows (a refusal's reason did not)
    app.store.pages_reuse_seconds = 0.0
    there = pickle.loads(pickle.dumps(app.store))
    assert there.budget_book(app.budgets, NOW).spent.get("bob", 0.0) == 0.0
    app.store.record_report("bob", "/user/bob/", "", check_report(doc(), LIMITS), STARTED, NOW)
    assert sorted(s.user for s in there.servers()) == ["alice", "bob"]
    # the budget book there too: the writes happen in the service's process, so the view's
    # own write count never moves and cannot say when a book it built is old
    here = app.store.budget_book(app.budgets, NOW).spent["bob"]
    assert here > 0 and there.budget_book(app.budgets, NOW).spent["bob"] == pytest.approx(here)
    args = (app.store, app.budgets, "user", NOW, None, None, None, "USD", app.reconcile)

    async def scenario() -> str:
        return await app.compute(report.rows_json, *args)

    try:
        assert json.loads(asyncio.run(scenario())) == json.loads(report.rows_json(*args))
        assert app._pages_process is not None  # it did go to the process
    finally:
        if app._pages_process is not None:
            app._pages_process.shutdown()
        app.worker.shutdown()
        app.store.close()
