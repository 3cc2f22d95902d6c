"""The JupyterHub example as shipped (examples/jupyterhub/jupyterhub_config.py), as a newcomer
meets it in a real Chromium: each demo login of docs/getting-started/hub.md through the Hub's
own login form, alice with her GPU server and the example notebooks in her home, carol with
no server yet, and the admin. Nobody's page waits forever, every amount says its currency,
and what no kernel spent is its own band of the chart, never "active"."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.browser import chromium, hub_form_login, need_browser
from tests.support.examplehub import NOTEBOOKS, ExampleHub
from tests.support.hub import wait_for

pytestmark = pytest.mark.timeout(300)
#: an amount the page shows (two decimals) that no currency code precedes
BARE_AMOUNT = re.compile(r"(?<![A-Z]{3} )(?<![\d.,])\d[\d,]*\.\d{2}(?![\d%])")
#: where the page shows money (the chart's axis says its currency in its title)
MONEY = ("#cg-kpis .kpi.spend .value, #cg-kpis .kpi.waste .value, #cg-kpis .kpi.rate .value, "
         "td.spend, td.waste, td.rate, #cg-budget-list, #cg-chart-foot")


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExampleHub]:
    need_browser()
    h = ExampleHub(tmp_path_factory.mktemp("exampleui"), [])
    try:
        h.start()
        h.start_server("alice", {"profile": "gpu"})
        h.wait_ready("alice")
        yield h
    finally:
        h.stop()


@pytest.fixture(scope="module")
def browser(hub: ExampleHub) -> Iterator[Any]:
    with chromium() as b:
        yield b


@contextlib.contextmanager
def logged_in(browser: Any, hub: ExampleHub, user: str) -> Iterator[Any]:
    """`user` logs in with the documented password through the Hub's form on the way to the
    service's page; an uncaught error on the page fails the test."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    try:
        hub_form_login(pg, hub, user, "#cg-kpis .kpi")
        yield pg
    finally:
        context.close()
    assert not errors, errors


def bare_amounts(pg: Any) -> list[str]:
    """Every amount shown without its currency."""
    return [m.group(0) + " in " + repr(text) for text in pg.locator(MONEY).all_inner_texts()
            for m in BARE_AMOUNT.finditer(text)]


def legend(pg: Any) -> dict[str, str]:
    return {item.get_attribute("data-band"): item.inner_text()
            for item in pg.locator("#cg-legend [data-band]").all()}


def poll_line(pg: Any) -> str:
    return str(pg.locator("#cg-poll").inner_text())


def test_alice_has_the_notebooks_and_sees_her_unattributed_spend_apart(
        hub: ExampleHub, browser: Any) -> None:
    home = hub.home("alice")
    assert sorted(p.name for p in home.glob("*.ipynb")) == sorted(NOTEBOOKS)
    with logged_in(browser, hub, "alice") as pg:
        wait_for(lambda: "1 server running" in poll_line(pg), 30, "alice's page leaves waiting")
        assert "waiting" not in poll_line(pg)
        assert not pg.locator("#cg-key-field").is_visible()
        assert bare_amounts(pg) == []
        # her server runs no kernel: what it spent is unattributed, drawn as such; the
        # service reports every 10 s and the page asks again every 30 s
        bands = legend(pg)
        assert "Unattributed" in bands["unattributed"] and "Active" in bands["active"]

        def unattributed_bar() -> bool:
            pg.reload()
            pg.wait_for_selector("#cg-chart svg", timeout=15_000)
            return bool(pg.locator("#cg-chart rect.cg-bar.unattributed").count())
        wait_for(unattributed_bar, 90, "an unattributed band in alice's chart")
        title = pg.locator("#cg-chart rect.cg-bar.unattributed title").first.text_content()
        assert re.search(r"unattributed USD [0-9.,]+", title or ""), title
        assert "unattributed" in pg.locator("#cg-chart-foot").inner_text()
        assert bare_amounts(pg) == []


def test_carol_without_a_server_sees_zeros_in_the_currency_not_waiting(
        hub: ExampleHub, browser: Any) -> None:
    with logged_in(browser, hub, "carol") as pg:
        wait_for(lambda: "no server running yet" in poll_line(pg), 30,
                 "carol's page says she has no server")
        assert "USD 0.00" in pg.locator("#cg-kpis .kpi.spend .value").inner_text()
        assert "No server of yours has been seen yet." in pg.inner_text("#cg-user")
        assert bare_amounts(pg) == []
        # her own budget, the site's default (her group's shows once a server of hers has
        # been seen: the service learns groups from the Hub's running servers)
        assert "USD 500.00 left of USD 500.00" in pg.inner_text("#cg-budget-list")


def test_the_admin_logs_in_with_the_admin_password_and_sees_everyone(
        hub: ExampleHub, browser: Any) -> None:
    with logged_in(browser, hub, "admin") as pg:
        pg.wait_for_selector('#cg-table tbody tr[data-key="alice"]', timeout=30_000)
        assert pg.locator("#cg-admin").is_visible() and pg.locator("#cg-by").is_visible()
        wait_for(lambda: "Last poll" in poll_line(pg), 30, "the admin's poll line")
        assert "Unattributed" in legend(pg)["unattributed"]
        # the chart's picker offers the hub, the users and the groups seen
        options = pg.locator("#cg-key option").all_inner_texts()
        assert options[0] == "the whole hub" and "alice" in options
        assert bare_amounts(pg) == []


def test_the_spawn_form_shows_its_profile_choice_as_a_drop_down(
        hub: ExampleHub, browser: Any) -> None:
    """The example's spawn form offers GPU or CPU in a select that looks like one: with
    Bootstrap 5 (JupyterHub 5's pages) a select styled as a text field (`form-control`) has no
    arrow, and a newcomer does not see that there is a choice."""
    with logged_in(browser, hub, "carol") as pg:
        pg.goto(hub.url + "/hub/spawn")
        select = pg.locator("select#profile")
        select.wait_for(timeout=30_000)
        assert select.locator("option").all_inner_texts() == [
            "GPU: p4d.24xlarge, 8 x A100 (simulated)", "CPU only"]
        style = select.evaluate("e => { const s = getComputedStyle(e); "
                                "return {appearance: s.appearance, image: s.backgroundImage}; }")
        assert style["appearance"] != "none" or "url(" in style["image"], style
        assert not (hub.api("GET", "/users/carol").get("servers") or {})  # nothing started
