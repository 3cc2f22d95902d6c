"""Budgets at spawn, as the user meets them: on a real hub, a user whose budget is spent picks
the GPU profile on the Hub's spawn form and reads why it is refused; the CPU profile starts;
JupyterLab's status bar then says what is left."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.browser import DOCS, SHOTS, launch, need_browser
from tests.support.hub import Hub, HubUser, gpu_trace, wait_for

pytestmark = pytest.mark.timeout(400)

FORM = '''
c.Spawner.options_form = """<select name="profile" id="profile">
  <option value="gpu">GPU</option><option value="cpu">CPU</option></select>"""
c.Spawner.options_from_form = lambda form: {"profile": form.get("profile", ["gpu"])[0]}
from jupyter_costguard.hub.spawn import budget_hook
c.Spawner.pre_spawn_hook = budget_hook(spec["service_config"])
'''


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    need_browser()
    d = tmp_path_factory.mktemp("hubspawn")
    h = Hub(d / "hub", [HubUser("dave", gpu_trace(d / "dave.json", 0), ["lab"])],
            service_settings={"gpu_profiles": {"gpu"}, "user_budgets": {"dave": 0.002},
                              "budget_period": "week"},
            extra_config=FORM).start()
    try:
        yield h
    finally:
        h.stop()


def test_a_spent_budget_refuses_the_gpu_profile_on_the_spawn_page(hub: Hub,
                                                                  tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    # spend the week's budget on a CPU server first (36/h: a fraction of a second)
    hub.start_server("dave", {"profile": "cpu"})
    hub.wait_ready("dave")
    token = hub.token_for("dave")
    wait_for(lambda: (lambda s: s[0] == 200 and s[1]["budgets"]
                      and s[1]["budgets"][0]["remaining"] == 0)(hub.service("api/me", token)),
             30, "dave's budget spent")
    hub.stop_server("dave")
    wait_for(lambda: not (hub.api("GET", "/users/dave").get("servers") or {}), 30,
             "dave stopped")
    with sync_playwright() as p:
        browser = launch(p)
        pg = browser.new_page(viewport={"width": 1400, "height": 900})
        try:
            pg.goto(hub.url + "/hub/login")
            pg.fill("#username_input", "dave")
            pg.fill("#password_input", hub.password)
            pg.click("#login_submit")
            pg.goto(hub.url + "/hub/spawn")
            pg.select_option("#profile", "gpu")
            pg.click("input[type=submit], button[type=submit]")
            pg.wait_for_selector("text=GPU servers are refused", timeout=30_000)
            text = pg.inner_text("body")
            assert "weekly budget of 0.00 USD is spent" in text
            assert "a CPU profile can still be started" in text
            if SHOTS:
                pg.screenshot(path=str(DOCS / "hub-spawn-refused.png"))
            assert not (hub.api("GET", "/users/dave").get("servers") or {})
            # the CPU profile starts, and its JupyterLab shows the budget
            pg.goto(hub.url + "/hub/spawn")
            pg.select_option("#profile", "cpu")
            pg.click("input[type=submit], button[type=submit]")
            pg.wait_for_url("**/user/dave/lab**", timeout=90_000)
            item = pg.wait_for_selector(".jp-costguard-budget-spent", timeout=60_000)
            deadline = time.monotonic() + 30
            title = ""
            while time.monotonic() < deadline and "Budget (you, weekly)" not in title:
                title = item.get_attribute("title") or ""
                time.sleep(0.5)
            assert "Budget (you, weekly): USD 0.00 left of 0.00" in title, title
        finally:
            browser.close()
