"""The hub service's page in a real Chromium (Debian's, driven by Playwright) against a real
JupyterHub with its real proxy: three users in two groups, each with a single-user server
playing a replayed GPU trace at its own hourly rate, and the costguard service polling them
every second. Bob runs the "gpu" profile, which the site meters (`profile_prices`) above what
his server reports: his row is flagged. Users log in through the Hub's own login form.
Screenshots land in docs/ when COSTGUARD_SCREENSHOTS=1."""

from __future__ import annotations

import contextlib
import csv
import io
import os
import re
import signal
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from jupyter_costguard.hub import report
from tests.support.browser import DOCS, SHOTS, chromium, hub_form_login, need_browser
from tests.support.hub import Hub, HubUser, wait_for
from tests.support.traces import write_trace
from tests.support.units import GiB

pytestmark = pytest.mark.timeout(300)

#: name -> (groups, hourly rate, utilization of the GPUs the first kernel holds). The rates
#: make spend order (carol > bob > alice) the reverse of name order, so a sort that does
#: nothing shows; bob's kernel holds two idle GPUs (waste), alice's one busy one.
USERS = {"alice": (["ml"], 12.29, [90]), "bob": (["ml"], 32.77, [0, 0]),
         "carol": (["research"], 98.32, [40, 1])}
BUDGETS = {"user_budgets": {"alice": 2.0, "carol": 25.0},
           "group_budgets": {"ml": 10.0, "research": 40.0}}
#: the site's meter: bob's profile at 45/h, above the 32.77/h his server reports (flagged, and
#: what his spend counts); alice's and carol's profile is a GPU one the site lists without a
#: price (gpu_profiles), so they count their reports
PROFILES = {"bob": "gpu", "alice": "lab", "carol": "lab"}
METER = {"profile_prices": {"gpu": {"hourly_rate": 45.0, "gpus": 1}}, "gpu_profiles": {"lab"}}
MONEY = re.compile(r"([A-Z]{3})\s*([0-9][0-9,]*\.[0-9]{2})")
VIEWPORT = {"width": 1400, "height": 900}


def gpu_trace(path: Path, held: Sequence[float]) -> Path:
    """Two GPUs; kernel 0 (the first a server starts) holds the first len(held) of them."""
    frame = {"t": 0, "gpus": [
        {"utilization_percent": held[i] if i < len(held) else 0,
         "power_watts": 60 + 3 * (held[i] if i < len(held) else 0),
         "processes": [{"kernel": 0, "used_memory_bytes": 6 * GiB}] if i < len(held) else []}
        for i in range(2)]}
    return write_trace(path, [frame], gpus=2)


def spend(hub: Hub, by: str = "user", token: str | None = None) -> dict[str, dict[str, Any]]:
    status, doc = hub.service(f"api/spend?by={by}", token or hub.admin_token)  # type: ignore[attr-defined]
    assert status == 200, doc
    return {r["key"]: r for r in doc["rows"]}


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    need_browser()
    d = tmp_path_factory.mktemp("hubpage")
    users = [HubUser(name, gpu_trace(d / f"{name}.json", util), groups, rate)
             for name, (groups, rate, util) in USERS.items()]
    users.append(HubUser("admin", gpu_trace(d / "admin.json", []), []))
    h = Hub(d / "hub", users, service_settings={**BUDGETS, **METER}).start()
    try:
        for name in USERS:
            h.start_server(name, {"profile": PROFILES[name]} if name in PROFILES else None)
        for name in USERS:
            h.wait_ready(name)
        for name in USERS:  # the kernel the trace's processes belong to
            status, _, body = h.request("POST", f"/user/{name}/api/kernels", h.tester_token,
                                        {"name": "python3"})
            assert status == 201, (status, body[:300])
        h.admin_token = h.token_for("admin")  # type: ignore[attr-defined]
        # every user has spent at least a cent (so each shows as more than 0.00), and the
        # fastest spender has overtaken those who started first: an order that only firms up
        def settled() -> bool:
            rows = spend(h)
            return set(rows) == set(USERS) and all(
                r["spend"] >= 0.01 for r in rows.values()) and \
                rows["carol"]["spend"] > rows["bob"]["spend"] > rows["alice"]["spend"]
        wait_for(settled, 90, "every user's spend in the service")
        yield h
    finally:
        h.stop()


@pytest.fixture(scope="module")
def browser(hub: Hub) -> Iterator[Any]:
    with chromium() as b:
        yield b


@contextlib.contextmanager
def logged_in(browser: Any, hub: Hub, user: str) -> Iterator[Any]:
    """A fresh browser context where `user` logged in through the Hub's login form and
    landed on the service's page; any uncaught error on the page, or any API answer
    other than 200, fails the test."""
    context = browser.new_context(viewport=VIEWPORT, accept_downloads=True)
    pg = context.new_page()
    errors: list[str] = []
    bad: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.on("response", lambda r: bad.append(f"{r.status} {r.url}")
          if "/services/costguard/api/" in r.url and r.status != 200 else None)
    try:
        hub_form_login(pg, hub, user, "#cg-table tbody tr[data-key]")
        assert re.match(r".*/services/costguard/(\?.*)?$", pg.url), pg.url
        yield pg
    finally:
        context.close()
    assert not errors, errors
    assert not bad, bad


def shown(pg: Any) -> list[tuple[str, float]]:
    """(key, spend) of each row the table shows, in order, from the text a user reads."""
    out = []
    for tr in pg.locator("#cg-table tbody tr[data-key]").all():
        text = tr.locator("td.spend").inner_text()
        m = MONEY.search(text)
        assert m, f"no money in {text!r}"
        out.append((tr.get_attribute("data-key"), float(m.group(2).replace(",", ""))))
    return out


def keys(pg: Any) -> list[str]:
    return [k for k, _ in shown(pg)]


def wait_keys(pg: Any, expected: list[str] | set[str], what: str) -> None:
    want = expected if isinstance(expected, list) else sorted(expected)
    wait_for(lambda: (keys(pg) if isinstance(expected, list) else sorted(keys(pg))) == want,
             10, what)


def bars(pg: Any) -> int:
    pg.wait_for_selector("#cg-chart svg rect.cg-bar", timeout=15_000)
    return int(pg.locator("#cg-chart svg rect.cg-bar").count())


def test_admin_sees_every_user_and_group_sorts_filters_and_charts(
        hub: Hub, browser: Any) -> None:
    before = spend(hub)
    with logged_in(browser, hub, "admin") as pg:
        rows = shown(pg)
        after = spend(hub)
        assert {k for k, _ in rows} == set(USERS) == set(before) == set(after)
        currency = {r["currency"] for r in after.values()}
        assert len(currency) == 1 and currency.pop() in pg.locator(
            "#cg-table tbody td.spend").first.inner_text()
        for key, value in rows:
            # the figures move while we look: what the page shows lies between the
            # service's answers just before and just after, to the cent
            assert value > 0
            assert before[key]["spend"] - 0.005 <= value <= after[key]["spend"] + 0.005, \
                (key, value, before[key]["spend"], after[key]["spend"])
        # the CSV the service hands out names the same users
        status, text = hub.service("api/spend.csv?by=user", hub.admin_token)  # type: ignore[attr-defined]
        assert status == 200
        assert {r["key"] for r in csv.DictReader(io.StringIO(text))} == set(USERS)

        # the header: hub totals and the last poll, in UTC, with the simulated badge
        header = pg.locator("#cg-kpis").inner_text().lower()
        assert "hub spend" in header and "rate now" in header and "gpus paid for" in header
        assert "held by kernels" in header
        assert "Times in UTC" in pg.inner_text("body")
        assert "last poll" in pg.locator("#cg-poll").inner_text().lower()
        if any(r["simulated"] for r in after.values()):
            assert pg.locator(".cg-simulated").is_visible()
            assert "replayed GPU trace" in pg.locator(".cg-simulated").inner_text()
        # budgets: alice's own 2.00 shows as a bar with a percent, bob has none
        alice = pg.locator('#cg-table tbody tr[data-key="alice"] td.budget-cell')
        assert re.search(r"[0-9.]+%", alice.inner_text())
        assert pg.locator('#cg-table tbody tr[data-key="bob"] td.budget-cell'
                          ).inner_text().strip() == ""

        # the chart: stacked bars for the whole hub, then for one user
        assert bars(pg) >= 1
        title = pg.locator("#cg-chart svg rect.cg-bar title").first.text_content()
        assert "spend" in title and "UTC" in title
        pg.select_option("#cg-key", "user:carol")
        pg.wait_for_timeout(300)
        assert bars(pg) >= 1
        pg.click('#cg-step button[data-step="day"]')
        pg.wait_for_timeout(300)
        assert bars(pg) >= 1
        pg.click('#cg-step button[data-step="hour"]')
        pg.select_option("#cg-key", "")

        # sorting: by name first (alphabetical), spend on a click (largest first), toggled
        assert keys(pg) == ["alice", "bob", "carol"]
        pg.click('#cg-table th[data-sort="spend"] button')
        order = shown(pg)
        assert [k for k, _ in order] == ["carol", "bob", "alice"]
        assert [v for _, v in order] == sorted((v for _, v in order), reverse=True)
        assert pg.get_attribute('#cg-table th[data-sort="spend"]', "aria-sort") == "descending"
        pg.click('#cg-table th[data-sort="spend"] button')
        assert keys(pg) == ["alice", "bob", "carol"]
        pg.click('#cg-table th[data-sort="spend"] button')

        # the filter hides what does not match
        pg.fill("#cg-filter", "car")
        assert keys(pg) == ["carol"]
        pg.fill("#cg-filter", "nobody-by-this-name")
        assert keys(pg) == []
        assert pg.locator("#cg-table tbody tr.cg-empty").is_visible()
        pg.fill("#cg-filter", "")
        assert len(keys(pg)) == 3

        # groups: ml and research, each with its budget
        pg.click('#cg-by button[data-by="group"]')
        wait_keys(pg, {"ml", "research"}, "the groups")
        assert "group" in (pg.get_attribute("#cg-csv", "href") or "")
        # servers: one each, answering
        pg.click('#cg-by button[data-by="server"]')
        wait_keys(pg, {f"{u}/" for u in USERS}, "the servers")
        states = pg.locator("#cg-table tbody td.state").all_inner_texts()
        assert states == ["ok"] * 3, states

        # a period re-queries with since: the links follow it
        pg.click('#cg-by button[data-by="user"]')
        with pg.expect_response(lambda r: "api/spend" in r.url and "since=" in r.url):
            pg.select_option("#cg-period", "24h")
        wait_keys(pg, ["carol", "bob", "alice"], "the users in the last 24 hours")
        assert "since=" in (pg.get_attribute("#cg-csv", "href") or "")
        assert "since=" in (pg.get_attribute("#cg-json", "href") or "")
        # a custom period: today (UTC) only, until inclusive
        today = time.strftime("%Y-%m-%d", time.gmtime())
        with pg.expect_response(lambda r: "api/spend" in r.url and "until=" in r.url):
            pg.select_option("#cg-period", "custom")
        assert pg.locator("#cg-since").is_visible() and pg.locator("#cg-until").is_visible()
        with pg.expect_response(lambda r: "api/spend" in r.url and "until=" in r.url):
            pg.fill("#cg-since", today)
            pg.dispatch_event("#cg-since", "change")
        wait_keys(pg, ["carol", "bob", "alice"], "the users today")
        csv_href = pg.get_attribute("#cg-csv", "href") or ""
        since = float(re.search(r"since=([0-9.]+)", csv_href).group(1))  # type: ignore[union-attr]
        until = float(re.search(r"until=([0-9.]+)", csv_href).group(1))  # type: ignore[union-attr]
        assert until - since == 86400 and time.strftime(
            "%Y-%m-%d", time.gmtime(since)) == today
        pg.select_option("#cg-period", "all")
        # (predicates as functions: the page's CSP allows no string evaluated as script)
        pg.wait_for_function("() => !document.querySelector('#cg-csv').href.includes('since=')")
        # all time again: the chart is the hub's, from its first hour (minutes ago)
        pg.wait_for_function("() => (s => s && s.dataset.end - s.dataset.start <= 7200)"
                             "(document.querySelector('#cg-chart svg'))")

        if SHOTS:
            DOCS.mkdir(exist_ok=True)
            pg.wait_for_load_state("networkidle")
            pg.screenshot(path=str(DOCS / "hub-admin.png"))


def first_hour_recorded(hub: Hub, token: str, query: str = "by=user") -> float:
    """The first hour of the last 48 the service recorded anything in (for `query`'s keys):
    a hub minutes old, its first sample's."""
    end = (time.time() // 3600 + 1) * 3600
    status, doc = hub.service(f"api/series?{query}&step=hour&since={end - 48 * 3600:.0f}"
                              f"&until={end:.0f}", token)
    assert status == 200, doc
    return float(min(p["time"] for s in doc["series"] for p in s["points"]))


def test_the_typed_page_counts_the_same_gpus_side_by_side_and_charts_from_the_first_sample(
        hub: Hub, browser: Any) -> None:
    """Issue 46: the page is the script built from labextension/src/hub, served by the
    service as JavaScript; the GPUs column beside idle GPU hours counts the GPUs the servers
    pay for (what the hours count), with how many their kernels hold, and the headers say
    so; the chart spans what the hub recorded, from its first hour, not a fixed 48 h."""
    with logged_in(browser, hub, "admin") as pg:
        src = pg.get_attribute('script[type="module"]', "src") or ""
        assert re.fullmatch(r"/services/costguard/static/costguard-hub\.js\?v=[0-9a-f]{16}", src)
        status, headers, body = hub.request("GET", src)
        assert status == 200 and body
        assert {k.lower(): v for k, v in headers.items()}["content-type"].startswith(
            "text/javascript")
        assert not pg.locator("script:not([src]):not([type='application/json'])").count()
        rows = spend(hub)
        for key, r in rows.items():
            cell = pg.locator(f'#cg-table tbody tr[data-key="{key}"] td.gpus')

            def same(cell: Any = cell, key: str = key) -> bool:
                return bool(cell.inner_text().split(" ")[0] == str(spend(hub)[key]["gpus_paid"]))
            # the figures are the service's, counted over the same GPUs as idle GPU hours
            wait_for(same, 40, f"{key}'s GPUs paid for")
            text = cell.inner_text()
            assert re.fullmatch(r"\d+ \(\d+ held · \d+ busy\)", text), text
            assert "paid for" in (cell.get_attribute("title") or "")
            assert "paid for" in (pg.locator(f'#cg-table tbody tr[data-key="{key}"] td.idle'
                                             ).get_attribute("title") or "")
            assert r["gpus_paid"] >= r["gpus_held"]
        for column in ("gpus", "idle"):
            assert "pay for" in (pg.get_attribute(f'#cg-table th[data-sort="{column}"]',
                                                  "title") or "")
        # the chart starts at the hub's first hour recorded (minutes ago), ends this hour
        first = first_hour_recorded(hub, hub.admin_token)  # type: ignore[attr-defined]
        pg.wait_for_selector("#cg-chart svg rect.cg-bar", timeout=15_000)
        start = float(pg.get_attribute("#cg-chart svg", "data-start") or "nan")
        end = float(pg.get_attribute("#cg-chart svg", "data-end") or "nan")
        hour_end = (time.time() // 3600 + 1) * 3600
        assert start == first and end in (hour_end, hour_end - 3600), (start, end, first)
        assert (end - start) / 3600 <= 2, "a hub minutes old charts its hour or two, not 48"
        assert pg.locator("#cg-chart-foot").inner_text().startswith(
            time.strftime("%Y-%m-%d %H:%M", time.gmtime(first)))


def test_download_csv_has_the_columns_and_a_line_per_user(hub: Hub, browser: Any) -> None:
    with logged_in(browser, hub, "admin") as pg:
        pg.wait_for_function("() => document.querySelector('#cg-csv').href.includes('by=user')")
        with pg.expect_download() as info:
            pg.click("#cg-csv")
        download = info.value
        assert download.suggested_filename.endswith(".csv")
        text = Path(download.path()).read_text("utf-8")
    lines = text.strip().splitlines()
    assert lines[0].split(",") == list(report.CSV_COLUMNS)
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == len(lines) - 1 == len(USERS)
    assert sorted(r["key"] for r in rows) == sorted(USERS)
    assert all(float(r["spend"]) > 0 for r in rows)


def test_a_user_sees_only_their_own_figures_and_budgets(hub: Hub, browser: Any) -> None:
    token = hub.token_for("alice")
    status, me = hub.service("api/me", token)
    assert status == 200 and me["user"] == "alice" and not me["admin"]
    with logged_in(browser, hub, "alice") as pg:
        # her budgets: her own and her group's, each with what is left and when it resets
        pg.wait_for_selector("#cg-budgets .bcard")
        budgets = pg.locator("#cg-budgets .bcard")
        assert budgets.count() == len(me["budgets"]) == 2
        text = pg.locator("#cg-budgets").inner_text()
        assert "ml" in text and "resets" in text and "%" in text
        # her server and her spend, nobody else's
        assert keys(pg) == ["alice/"]
        (_, value), = shown(pg)
        status, later = hub.service("api/me", token)
        assert me["totals"]["spend"] - 0.005 <= value <= later["totals"]["spend"] + 0.005
        assert bars(pg) >= 1
        # her chart starts at her first hour recorded
        assert float(pg.get_attribute("#cg-chart svg", "data-start") or "nan") == \
            first_hour_recorded(hub, token, "by=user&key=alice")
        # her server's GPUs: those it pays for, with those her kernel holds
        gpus = pg.locator('#cg-table tbody tr[data-key="alice/"] td.gpus').inner_text()
        assert re.fullmatch(r"\d+ \(1 held · \d busy\)", gpus), gpus
        # when her figures are from and that her server runs, never "waiting" for a poll
        # whose counts are not hers to see
        wait_for(lambda: "1 server running" in pg.locator("#cg-poll").inner_text(), 10,
                 "alice's page leaves waiting")
        assert pg.locator("#cg-poll").inner_text().startswith("Figures as of ")
        # nothing of the admin's view is offered
        assert not pg.locator("#cg-by").is_visible()
        assert not pg.locator("#cg-key").is_visible()
        body = pg.inner_text("body")
        html = pg.content()
        assert "alice" in body
        for other in ("bob", "carol", "admin", "research"):
            assert not re.search(rf"\b{other}\b", body, re.I), other
        for other in ("bob", "carol", "research"):
            assert other not in html, other
        if SHOTS:
            DOCS.mkdir(exist_ok=True)
            pg.screenshot(path=str(DOCS / "hub-user.png"))


def test_a_server_reporting_below_its_meter_is_flagged_with_both_figures(
        hub: Hub, browser: Any) -> None:
    rows = wait_for(lambda: (lambda r: r if r["bob"]["flags"] else None)(spend(hub)), 60,
                    "bob flagged by the service")
    assert rows["alice"]["flags"] == [] == rows["carol"]["flags"]
    assert rows["bob"]["counted"] == "metered" and rows["carol"]["counted"] == "reported"
    rate_flag = re.compile(r"^bob/ reports a rate of [0-9.]+ USD/h; its profile gpu is "
                           r"metered at 45\.00/h$")
    with logged_in(browser, hub, "admin") as pg:
        bob = pg.locator('#cg-table tbody tr[data-key="bob"]')
        badge = bob.locator("td.name .flag")
        assert badge.count() == 1 and badge.is_visible()
        assert badge.inner_text().strip() == "check"
        # the title lists the flag sentences, one a line; screen readers get them too
        title = badge.get_attribute("title") or ""
        lines = title.split("\n")
        assert all(line.startswith("bob/ ") for line in lines), lines
        assert any(rate_flag.match(line) for line in lines), lines
        label = badge.get_attribute("aria-label") or ""
        assert badge.get_attribute("role") == "img" and "metered at 45.00/h" in label
        assert "is-flagged" in (bob.get_attribute("class") or "").split()
        # the rate cell: both figures; an unmetered server's says nothing of a meter
        assert re.fullmatch(r"reported USD [0-9.,]+/h, metered USD 45\.00/h",
                            bob.locator("td.rate").get_attribute("title") or ""), \
            bob.locator("td.rate").get_attribute("title")
        for other in ("alice", "carol"):
            tr = pg.locator(f'#cg-table tbody tr[data-key="{other}"]')
            assert tr.locator(".flag").count() == 0, other
            assert "is-flagged" not in (tr.get_attribute("class") or "").split(), other
            assert tr.locator("td.rate").get_attribute("title") is None, other
        background = "el => getComputedStyle(el).backgroundColor"
        assert bob.locator("td.name").evaluate(background) != pg.locator(
            '#cg-table tbody tr[data-key="carol"] td.name').evaluate(background)
        # the note under the table: what Spend counts, and how many servers are flagged
        note = pg.locator("#cg-counted")
        assert note.is_visible()
        text = note.inner_text()
        assert "Spend counts the service's meter (profile prices); servers of unpriced " \
               "profiles count what they report." in text, text
        assert "1 server flagged" in text, text
        # by server: the same marker on bob's server only
        pg.click('#cg-by button[data-by="server"]')
        wait_keys(pg, {f"{u}/" for u in USERS}, "the servers")
        assert pg.locator('#cg-table tbody tr[data-key="bob/"] td.name .flag').count() == 1
        assert pg.locator("#cg-table tbody .flag").count() == 1


def test_a_server_that_stops_answering_shows_stale_with_why(hub: Hub, browser: Any) -> None:
    pid = hub.api("GET", "/users/carol")["servers"][""]["state"]["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        detail = wait_for(lambda: (lambda r: r["carol/"]["detail"] if r["carol/"]["state"]
                                   == "stale" else None)(spend(hub, "server")), 30,
                          "carol marked stale")
        with logged_in(browser, hub, "admin") as pg:
            kpi = pg.locator("#cg-kpis .kpi.stale")
            assert "has" in (kpi.get_attribute("class") or "")
            assert kpi.locator(".value").inner_text().strip() == "1"
            pg.click('#cg-by button[data-by="server"]')
            wait_keys(pg, {f"{u}/" for u in USERS}, "the servers")
            pill = pg.locator('#cg-table tbody tr[data-key="carol/"] .pill')
            assert pill.inner_text() == "stale"
            assert pill.get_attribute("title") == detail
            ok = pg.locator('#cg-table tbody tr[data-key="alice/"] .pill')
            colour = "el => getComputedStyle(el).color"
            assert pill.evaluate(colour) != ok.evaluate(colour)
            # carol's figures so far are kept and shown
            assert dict(shown(pg))["carol/"] > 0
    finally:
        os.kill(pid, signal.SIGCONT)
