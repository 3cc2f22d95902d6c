"""The spend chart ("Spend over time") in a real Chromium against a real server: in the cost
panel at JupyterLab's default layout, and in the cost widget's expanded view.

The server starts on a ledger holding three hours of minute history (seeded through the
ledger's own writer, tests/support/history.py: nobody waits hours), and keeps sampling a real
kernel of explore.ipynb that holds a GPU (replayed trace). The panel's chart fits its window
to those hours, whatever maximum is chosen, and follows the totals above it. Screenshots
land in docs/ when COSTGUARD_SCREENSHOTS=1."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.browser import (
    checked_page,
    chromium,
    lab_server,
    need_browser,
    notebook,
    open_notebook,
    shot,
)
from tests.support.history import seed_history
from tests.support.server_proc import ServerProcess
from tests.support.traces import write_trace
from tests.support.units import GiB

pytestmark = pytest.mark.timeout(300)

RATE = 32.0
SECTION = ".jp-costguard-spend-chart-section"
#: the first seeded minute's start (epoch seconds), set by the `lab` fixture
SEEDED: dict[str, float] = {}
#: documents round money to 1e-6; the page writes what the server sent
ROUNDING = 1e-5


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    need_browser()
    tmp = tmp_path_factory.mktemp("chart")
    # kernel 0 (explore.ipynb's) holds 6 GiB on GPU 0 at 2%: it spends, mostly waste
    frame = {"t": 0, "gpus": [
        {"utilization_percent": 2, "power_watts": 70,
         "processes": [{"kernel": 0, "used_memory_bytes": 6 * GiB}]},
        {"utilization_percent": 0, "power_watts": 50, "processes": []}]}
    trace = write_trace(tmp / "trace.json", [frame], gpus=2)
    root = tmp / "srv" / "root"
    root.mkdir(parents=True)
    (root / "explore.ipynb").write_text(notebook(["%load_ext jupyter_costguard"]))
    (root / "train.ipynb").write_text(notebook(["1 + 1"]))
    seeded = seed_history(tmp / "ledger.sqlite", now=time.time(), minutes=180,
                          rate_per_hour=RATE)
    SEEDED["first"] = float(min(bucket for bucket, _ in seeded) * 60)
    with lab_server(tmp, trace, hourly_rate=RATE) as server:
        yield server


@pytest.fixture(scope="module")
def browser(lab: ServerProcess) -> Iterator[Any]:
    with chromium() as b:
        yield b


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    with checked_page(browser) as pg:
        yield pg


def live_kernel_spends(lab: ServerProcess) -> None:
    """explore.ipynb's kernel (the page's) holds the GPU and has spent since the seed."""
    lab.wait_for("costguard/api/kernels", lambda d: any(
        k["notebook"] == "explore.ipynb" and k["spend"] > 0 for k in d["kernels"]), timeout=90)


def totals(doc: dict[str, Any]) -> dict[str | None, float]:
    return {s["path"]: s["total_spend"] for s in doc["series"]}


def drawn(root: Any) -> dict[str, float]:
    """The notebook areas a chart draws: path -> the spend it carries (`data-spend`)."""
    areas = root.locator("path.jp-costguard-spend-chart-area[data-notebook]")
    return {areas.nth(i).get_attribute("data-notebook"):
            float(areas.nth(i).get_attribute("data-spend")) for i in range(areas.count())}


def test_panel_chart_stacks_every_notebook_and_switches_to_one(lab: ServerProcess, page: Any):
    open_notebook(lab, page, "explore.ipynb")
    live_kernel_spends(lab)
    before = lab.get("costguard/api/history?minutes=360")
    page.locator("#jp-costguard-status").click()
    panel = page.locator("#jp-costguard-panel")
    panel.wait_for(state="visible", timeout=10_000)
    section = panel.locator(SECTION)
    chart = section.locator(".jp-costguard-spend-chart[data-state=ok]")
    chart.wait_for(timeout=30_000)
    after = lab.get("costguard/api/history?minutes=360")

    # placed after Totals, titled, six hours of minute buckets
    assert section.locator("h3").inner_text().lower() == "spend over time"
    assert page.evaluate("""() => {
        const panel = document.getElementById('jp-costguard-panel');
        const totals = panel.querySelector('.jp-costguard-totals-section');
        const chart = panel.querySelector('.jp-costguard-spend-chart-section');
        return !!(totals && chart &&
                  totals.compareDocumentPosition(chart) & Node.DOCUMENT_POSITION_FOLLOWING);
    }""")
    assert chart.get_attribute("data-minutes") == "360"
    assert chart.get_attribute("data-bucket-seconds") == "60"

    # one area per notebook, carrying what the REST API says it spent
    areas = drawn(section)
    assert set(areas) == {"train.ipynb", "explore.ipynb"} == set(after["notebooks"])
    assert areas["train.ipynb"] == pytest.approx(totals(after)["train.ipynb"], abs=ROUNDING)
    live = areas["explore.ipynb"]
    assert totals(before)["explore.ipynb"] - ROUNDING <= live \
        <= totals(after)["explore.ipynb"] + ROUNDING
    # one unattributed area (its waste, when it has some, is a second path with that band)
    unattributed = "path.jp-costguard-spend-chart-area[data-band=unattributed]"
    assert section.locator(unattributed).count() == 1
    assert section.locator("path.jp-costguard-spend-chart-waste[data-series=waste]").count() >= 2
    legend = section.locator(".jp-costguard-spend-chart-legend")
    assert legend.locator("li[data-notebook='train.ipynb']").count() == 1
    assert legend.locator("li[data-series=waste]").count() == 1
    assert "USD" in section.locator(".jp-costguard-spend-chart-summary").inner_text()

    # it fits the right sidebar as JupyterLab opens it: nothing wider than the panel
    section.scroll_into_view_if_needed()
    svg = section.locator("svg.jp-costguard-spend-chart-svg")
    box, side = svg.bounding_box(), panel.bounding_box()
    assert box and side and box["width"] > 150
    assert side["x"] - 1 <= box["x"] and box["x"] + box["width"] <= side["x"] + side["width"] + 1
    assert section.evaluate("s => s.scrollWidth <= s.clientWidth + 1")

    # hovering a bucket reads out its figures
    # the seeded train.ipynb spent in the middle of the window
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + box["height"] * 0.5)
    readout = section.locator(".jp-costguard-spend-chart-readout")
    readout.wait_for(state="visible", timeout=5_000)
    assert "train.ipynb: USD" in readout.inner_text()
    assert "Total USD" in readout.inner_text()
    shot(page, "spend-chart.png", SECTION)
    page.mouse.move(10, 10)

    # one notebook: its area only, with the figure the filtered API gives
    section.locator("select.jp-costguard-spend-chart-notebook").select_option("train.ipynb")
    one = section.locator(".jp-costguard-spend-chart[data-notebook='train.ipynb'][data-state=ok]")
    one.wait_for(timeout=30_000)
    filtered = lab.get("costguard/api/history?minutes=360&notebook=train.ipynb")
    assert drawn(section) == {"train.ipynb": pytest.approx(totals(filtered)["train.ipynb"],
                                                           abs=ROUNDING)}
    assert section.locator("path[data-band=unattributed]").count() == 0
    assert section.locator("path[data-series=waste][data-notebook='train.ipynb']").count() == 1

    # a week at most: the ledger's three hours still, in minutes (not a week of hours)
    section.locator("button[data-minutes='10080']").click()
    section.locator(".jp-costguard-spend-chart[data-minutes='10080'][data-state=ok]").wait_for(
        timeout=30_000)
    week = section.locator(".jp-costguard-spend-chart")
    assert week.get_attribute("data-bucket-seconds") == "60"
    assert float(week.get_attribute("data-since") or "nan") == SEEDED["first"]
    assert section.locator("button[data-minutes='10080']").get_attribute("aria-pressed") == "true"


def open_chart(lab: ServerProcess, page: Any) -> Any:
    open_notebook(lab, page, "explore.ipynb")
    live_kernel_spends(lab)
    page.locator("#jp-costguard-status").click()
    panel = page.locator("#jp-costguard-panel")
    panel.wait_for(state="visible", timeout=10_000)
    section = panel.locator(SECTION)
    section.locator(".jp-costguard-spend-chart[data-state=ok]").wait_for(timeout=30_000)
    section.scroll_into_view_if_needed()
    return section


def test_panel_chart_fits_the_ledgers_hours_and_keeps_up_with_the_totals(
        lab: ServerProcess, page: Any):
    """6 h at most, but the ledger has 3: the chart starts at its first minute, so its left
    edge is the seeded train.ipynb's spend, not three empty hours; and its figure keeps up
    with the totals above it (it asks again with their samples, not once a minute)."""
    section = open_chart(lab, page)
    chart = section.locator(".jp-costguard-spend-chart")
    assert chart.get_attribute("data-minutes") == "360"
    assert float(chart.get_attribute("data-since") or "nan") == SEEDED["first"]
    assert 180 < int(chart.get_attribute("data-buckets") or 0) <= 185
    assert " since " in section.locator(".jp-costguard-spend-chart-summary").inner_text()

    # the leftmost bucket, under the pointer at the plot's left edge, is train.ipynb's
    box = section.locator("svg.jp-costguard-spend-chart-svg").bounding_box()
    assert box
    left = box["x"] + box["width"] * (47 / 300)  # the plot starts at 46 of 300 user units
    page.mouse.move(left, box["y"] + box["height"] * 0.5)
    readout = section.locator(".jp-costguard-spend-chart-readout")
    readout.wait_for(state="visible", timeout=5_000)
    assert readout.get_attribute("data-index") == "0"
    assert "train.ipynb: USD" in readout.inner_text()
    page.mouse.move(10, 10)

    # the window holds the ledger's whole life: the chart's stack is the Totals' spend, a
    # few samples apart at most, also well after it first drew (the server samples every
    # 2 s at 32/h: a chart a minute behind would be up to USD 0.53 short)
    page.wait_for_timeout(15_000)
    chart_total, totals = page.evaluate("""() => {
        const panel = document.getElementById('jp-costguard-panel');
        const areas = panel.querySelectorAll('path.jp-costguard-spend-chart-area');
        let sum = 0;
        areas.forEach(a => { sum += Number(a.getAttribute('data-spend')); });
        const dd = panel.querySelector(
            '.jp-costguard-totals dd[data-field=spend] .jp-costguard-detail-text') ||
            panel.querySelector('.jp-costguard-totals dd[data-field=spend]');
        return [sum, Number(dd.textContent.replace(/[^0-9.]/g, ''))];
    }""")
    assert totals > 0 and chart_total == pytest.approx(totals, abs=0.005 + RATE / 3600 * 8)


def test_widget_expanded_view_shows_the_notebooks_chart(lab: ServerProcess, page: Any):
    open_notebook(lab, page, "explore.ipynb")
    live_kernel_spends(lab)
    kid = next(s for s in lab.get("api/sessions") if s["path"] == "explore.ipynb")["kernel"]["id"]
    lab.wait_for(f"api/kernels/{kid}", lambda d: d["execution_state"] == "idle", timeout=90)
    page.locator(".jp-Cell").first.click()
    page.keyboard.press("Shift+Enter")  # %load_ext jupyter_costguard
    widget = page.locator(".jp-costguard-widget[data-state=ok]")
    widget.wait_for(timeout=60_000)
    assert widget.get_attribute("data-expanded") == "false"
    assert widget.locator(".jp-costguard-widget-chart").count() == 0
    before = lab.get("costguard/api/history?minutes=360&notebook=explore.ipynb")

    toggle = widget.locator(".jp-costguard-widget-expand")
    toggle.click()
    assert widget.locator(".jp-costguard-widget-expand").get_attribute("aria-expanded") == "true"
    chart = widget.locator(".jp-costguard-widget-chart .jp-costguard-spend-chart[data-state=ok]")
    chart.wait_for(timeout=30_000)
    after = lab.get("costguard/api/history?minutes=360&notebook=explore.ipynb")
    assert widget.get_attribute("data-expanded") == "true"
    assert chart.get_attribute("data-notebook") == "explore.ipynb"
    areas = drawn(widget)
    assert list(areas) == ["explore.ipynb"]
    assert totals(before)["explore.ipynb"] - ROUNDING <= areas["explore.ipynb"] \
        <= totals(after)["explore.ipynb"] + ROUNDING
    assert widget.locator("select").count() == 0, "the widget's chart is of its notebook"
    # the line keeps refreshing under an open chart, which stays
    first = widget.get_attribute("data-updated")
    page.wait_for_function(
        "u => document.querySelector('.jp-costguard-widget').dataset.updated !== u", arg=first,
        timeout=30_000)
    assert widget.locator(".jp-costguard-widget-chart svg").count() == 1
    page.wait_for_timeout(500)
    shot(page, "widget-chart.png", ".jp-costguard-widget")

    widget.locator(".jp-costguard-widget-expand").click()
    assert widget.get_attribute("data-expanded") == "false"
    assert widget.locator(".jp-costguard-widget-chart").count() == 0
