"""JupyterLab and Notebook 7 in a real Chromium (Debian's, driven by Playwright) against a
real server with costguard playing a replay trace. Screenshots land in docs/ when
COSTGUARD_SCREENSHOTS=1 (that is how README's pictures are made)."""

from __future__ import annotations

import datetime as dt
import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from jupyter_costguard.cost.catalog import Catalog
from tests.support.browser import (
    checked_page,
    chromium,
    lab_server,
    need_browser,
    notebook,
    shot,
    widen_right_sidebar,
)
from tests.support.server_proc import ServerProcess
from tests.support.traces import write_trace
from tests.support.units import GiB

pytestmark = pytest.mark.timeout(300)

MONEY = re.compile(r"USD\s*([0-9]+(?:\.[0-9]+)?)")


def shipped_price_age(instance_type: str, stale_after_days: int = 90) -> tuple[str, bool]:
    """The shipped catalog's date for the type, and whether it is past the threshold today."""
    row = Catalog.load().get(instance_type, "aws")
    assert row is not None and row.retrieved
    age = (dt.datetime.now(dt.timezone.utc).date() - dt.date.fromisoformat(row.retrieved)).days
    return row.retrieved, age > stale_after_days


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    need_browser()
    tmp = tmp_path_factory.mktemp("lab")
    # kernel 0 holds 6 GiB on GPU 0 at 2%: it spends, and most of it is waste
    frame = {"t": 0, "gpus": [
        {"utilization_percent": 2, "power_watts": 70,
         "processes": [{"kernel": 0, "used_memory_bytes": 6 * GiB}]},
        {"utilization_percent": 0, "power_watts": 50, "processes": []}]}
    trace = write_trace(tmp / "trace.json", [frame], gpus=2, instance_type="p4de.24xlarge")
    root = tmp / "srv" / "root"
    root.mkdir(parents=True)
    (root / "explore.ipynb").write_text(notebook(
        ["%load_ext jupyter_costguard", "import time\ntime.sleep(10)\nprint('done')"]))
    (root / "quiet.ipynb").write_text(notebook(["1 + 1"]))
    (root / "nb7.ipynb").write_text(notebook(["%load_ext jupyter_costguard"]))
    with lab_server(tmp, trace) as server:
        yield server


@pytest.fixture(scope="module")
def browser(lab: ServerProcess) -> Iterator[Any]:
    with chromium() as b:
        yield b


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    with checked_page(browser) as pg:
        yield pg


def open_lab(page: Any, lab: ServerProcess, path: str, app: str = "lab") -> None:
    url = f"{lab.url}{app}/tree/{path}?token={lab.token}" if app == "lab" \
        else f"{lab.url}notebooks/{path}?token={lab.token}"
    page.goto(url)
    page.wait_for_selector(".jp-Notebook", timeout=60_000)


def money(text: str) -> float:
    m = MONEY.search(text)
    assert m, f"no amount in {text!r}"
    return float(m.group(1))


def kernel_for(lab: ServerProcess, path: str) -> str:
    doc = lab.wait_for("api/sessions", lambda d: any(s["path"] == path for s in d))
    return str(next(s for s in doc if s["path"] == path)["kernel"]["id"])


def wait_kernel_ready(lab: ServerProcess, path: str) -> str:
    """The page's kernel for `path` has started and answered (idle), so a run goes through."""
    kid = kernel_for(lab, path)
    lab.wait_for(f"api/kernels/{kid}", lambda d: d["execution_state"] == "idle", timeout=90)
    return kid


def test_status_bar_shows_a_growing_spend(lab: ServerProcess, page: Any):
    open_lab(page, lab, "explore.ipynb")
    status = page.locator('#jp-costguard-status[data-costguard-notebook="explore.ipynb"]')
    status.locator(".jp-costguard-notebook").wait_for(timeout=60_000)
    assert page.locator("#jp-costguard-simulated").is_visible()
    assert "p4de.24xlarge" in status.inner_text()
    first = money(status.locator(".jp-costguard-notebook").inner_text())
    deadline = time.monotonic() + 30
    later = first
    while later <= first and time.monotonic() < deadline:
        page.wait_for_timeout(500)
        later = money(status.locator(".jp-costguard-notebook").inner_text())
    assert later > first, "the notebook's spend grows while its kernel holds a GPU"

    # server sample -> pixels: how far behind the server the status bar is
    page.evaluate("""() => {
        const node = document.getElementById('jp-costguard-status');
        window.__lags = [];
        let shown = null;
        new MutationObserver(() => {
            const value = node.dataset.costguardSampleTime;
            if (value && value !== shown) {  // a new sample reached the page
                shown = value;
                window.__lags.push(Date.now() / 1000 - parseFloat(value));
            }
        }).observe(node, {attributes: true, attributeFilter: ['data-costguard-sample-time']});
    }""")
    # ten updates (or what 40 s brings): enough for a median and a worst case
    deadline = time.monotonic() + 40
    while page.evaluate("window.__lags.length") < 10 and time.monotonic() < deadline:
        page.wait_for_timeout(500)
    lags = sorted(page.evaluate("window.__lags"))
    assert len(lags) >= 5, "the status bar keeps updating"
    median, worst = lags[len(lags) // 2], lags[-1]
    print(f"\nsample->pixels latency over {len(lags)} updates: median {median:.2f} s, "
          f"max {worst:.2f} s")
    shot(page, "status-bar.png", "#jp-main-statusbar")
    # the price says how old it is (the shipped p4de row's date), and warns exactly when that
    # date is past the 90-day threshold: an honest warning, not a permanent one
    retrieved, stale = shipped_price_age("p4de.24xlarge")
    tooltip = page.locator("#jp-costguard-status").get_attribute("title") or ""
    assert f"price of {retrieved}" in tooltip, tooltip
    assert ("may be out of date" in tooltip) == stale, tooltip
    assert ("jupyter costguard catalog update" in tooltip) == stale, tooltip
    assert ("jp-costguard-price-stale" in (
        page.locator("#jp-costguard-status").get_attribute("class") or "")) == stale


def test_panel_lists_the_open_notebook(lab: ServerProcess, page: Any):
    open_lab(page, lab, "explore.ipynb")
    page.locator("#jp-costguard-status .jp-costguard-notebook").wait_for(timeout=60_000)
    page.locator("#jp-costguard-status").click()
    panel = page.locator("#jp-costguard-panel")
    panel.wait_for(state="visible", timeout=10_000)
    widen_right_sidebar(page)
    row = panel.locator('.jp-costguard-notebook-row[data-path="explore.ipynb"]')
    row.wait_for(timeout=30_000)
    assert money(row.inner_text()) > 0
    panel.locator(".jp-costguard-kernel-row").first.wait_for(timeout=30_000)
    assert panel.locator("svg.jp-costguard-sparkline").count() >= 1
    assert "p4de.24xlarge" in panel.inner_text()
    date = panel.locator('dd[data-field="price-date"]')
    retrieved, stale = shipped_price_age("p4de.24xlarge")
    assert retrieved in date.inner_text()
    assert ("jp-costguard-warn" in (date.get_attribute("class") or "")) == stale
    assert panel.locator("details.jp-costguard-price-tried li").count() >= 1


def test_widget_keeps_updating_while_a_long_cell_runs(lab: ServerProcess, page: Any):
    open_lab(page, lab, "explore.ipynb")
    wait_kernel_ready(lab, "explore.ipynb")
    page.locator(".jp-Cell").first.click()
    page.keyboard.press("Shift+Enter")  # %load_ext jupyter_costguard
    widget = page.locator(".jp-costguard-widget[data-state=ok]")
    widget.wait_for(timeout=60_000)
    page.keyboard.press("Shift+Enter")  # time.sleep(10)
    page.locator(".jp-Cell").nth(1).locator(".jp-InputPrompt:has-text('[*]')").wait_for(
        timeout=30_000)
    seen: set[str] = set()
    deadline = time.monotonic() + 9
    while time.monotonic() < deadline:
        seen.add(widget.locator(".jp-costguard-widget-spend").inner_text())
        page.wait_for_timeout(300)
    # the cell is still running: everything above was measured during it
    assert page.locator(".jp-Cell").nth(1).locator(".jp-InputPrompt").inner_text() \
        .strip().startswith("[*]")
    assert len(seen) >= 3, f"the widget showed only {seen} during the cell"
    assert widget.locator(".jp-costguard-widget-simulated").count() == 1
    shot(page, "widget.png", ".jp-Cell >> nth=0")
    page.locator(".jp-Cell").nth(1).locator(".jp-OutputArea:has-text('done')").wait_for(
        timeout=30_000)


def test_alert_notifies_once_and_its_action_works(lab: ServerProcess, page: Any):
    open_lab(page, lab, "explore.ipynb")
    page.locator("#jp-costguard-status .jp-costguard-notebook").wait_for(timeout=60_000)
    title = "Training-sized instance used interactively"
    code, body = lab.request("costguard/api/alerts", "POST", {
        "kind": "test", "key": "explore", "severity": "warning", "notebook": "explore.ipynb",
        "title": title,
        "message": "8x A100 80GB at USD 40.97/h, GPUs idle 96% of the last 30 min.",
        "actions": [{"id": "open-panel", "label": "Open cost panel"},
                    {"id": "dismiss", "label": "Dismiss"}]})
    assert code == 201, body
    alert_id = json.loads(body)["id"]
    toast = page.locator(".Toastify__toast", has_text=title)
    toast.first.wait_for(timeout=30_000)
    page.locator("#jp-costguard-status.jp-costguard-alert").wait_for(timeout=10_000)
    page.wait_for_timeout(5000)  # ≥ 2 more polls of the alerts endpoint
    assert toast.count() == 1, "one notification per alert, not one per poll"
    toast.get_by_role("button", name="Open cost panel").click()
    page.locator("#jp-costguard-panel").wait_for(state="visible", timeout=10_000)
    page.locator(".Toastify__toast", has_text=title).first.wait_for(timeout=10_000)
    # Dismiss goes to the server: the alert is no longer active
    page.locator(".Toastify__toast", has_text=title).get_by_role(
        "button", name="Dismiss").click()
    lab.wait_for("costguard/api/alerts",
                 lambda d: all(a["id"] != alert_id for a in d["alerts"]), timeout=15)


def test_ui_polling_never_touches_kernel_activity(lab: ServerProcess, page: Any):
    open_lab(page, lab, "quiet.ipynb")
    kid = kernel_for(lab, "quiet.ipynb")
    page.locator('#jp-costguard-status[data-costguard-notebook="quiet.ipynb"]').wait_for(
        timeout=60_000)
    page.locator("#jp-costguard-status").click()
    page.locator("#jp-costguard-panel").wait_for(state="visible", timeout=10_000)
    # let the kernel's start-up traffic with the page settle
    before = None
    for _ in range(40):
        now = lab.get(f"api/kernels/{kid}")["last_activity"]
        if now == before:
            break
        before = now
        time.sleep(3)
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))

    def polls() -> int:
        return sum("costguard/api" in u for u in requests)

    # 30 polls of the UI, panel open (about half a minute), rather than a fixed minute
    deadline = time.monotonic() + 120
    while polls() < 30 and time.monotonic() < deadline:
        page.wait_for_timeout(500)
    after = lab.get(f"api/kernels/{kid}")["last_activity"]
    assert polls() >= 30, "the UI really polled"
    assert after == before


def test_widget_renders_in_notebook_7(lab: ServerProcess, page: Any):
    open_lab(page, lab, "nb7.ipynb", app="notebook")
    wait_kernel_ready(lab, "nb7.ipynb")
    page.locator(".jp-Cell").first.click()
    page.keyboard.press("Shift+Enter")
    page.locator(".jp-costguard-widget").wait_for(timeout=60_000)
    page.locator(".jp-costguard-widget[data-state=ok]").wait_for(timeout=30_000)
