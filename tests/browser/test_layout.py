"""What a newcomer sees at JupyterLab's default layout (1400x860, the right sidebar at its
default width) in a real Chromium against a real server: the cost panel's tables fit the
sidebar, moving their other figures to a second line, and agree with each other; "Run as
job" is in the notebook toolbar even with the right sidebar open, where JupyterLab hides the
cell toolbar; the slice dialog names cells by prompt and first line, says what re-running the
earlier cells took, and offers to send a value from the kernel instead; it says why each cell
comes along (a module written into a directory put on sys.path) and warns about what the slicer
cannot decide. COSTGUARD_SCREENSHOTS=1 saves docs/panel-narrow.png, docs/panel-wide.png,
docs/offload-toolbar.png, docs/offload-send-instead.png and docs/offload-warnings.png."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import (
    chromium_page,
    lab_server,
    need_browser,
    notebook,
    open_notebook,
    shot,
    widen_right_sidebar,
)
from tests.support.notebooks import code, markdown, write_notebook
from tests.support.server_proc import ServerProcess
from tests.support.traces import write_trace
from tests.support.units import GiB

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("no_leftover_jobs")]

TOOLBAR_BUTTON = '.jp-NotebookPanel-toolbar [data-command="costguard:run-as-job"]'
# whether the notebook toolbar's button (a `jp-button`) is disabled
TOOLBAR_DISABLED = f"""() => {{
    const button = document.querySelector('{TOOLBAR_BUTTON}');
    return button ? button.getAttribute('aria-disabled') === 'true' : null;
}}"""
CELLS = [
    code("rate", "rate = 3"),
    markdown("about", "## The model"),
    code("base", "base = 14"),
    code("answer", "answer = rate * base\nprint('answer is', answer)"),
]

# the miss: a module the notebook writes, a directory put on sys.path, then an import
HELPER_CELLS = [
    code("mkdir", "import os\nos.makedirs('lib', exist_ok=True)"),
    code("write", "%%writefile lib/helper.py\ndef double(x):\n    return 2 * x"),
    code("path", "import sys\nsys.path.append('lib')"),
    code("dyn", "exec('extra = 1')"),
    code("use", "from helper import double\nprint('doubled', double(21))"),
]


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[ServerProcess]:
    need_browser()
    # the first kernel holds GPU 0 at 2%: it spends, and most of it is waste
    frame = {"t": 0, "gpus": [
        {"utilization_percent": 2, "power_watts": 70,
         "processes": [{"kernel": 0, "used_memory_bytes": 6 * GiB}]},
        {"utilization_percent": 0, "power_watts": 50, "processes": []}]}
    trace = write_trace(tmp_path / "trace.json", [frame], gpus=2, instance_type="p4de.24xlarge")
    root = tmp_path / "srv" / "root"
    write_notebook(root, "model.ipynb", CELLS)
    write_notebook(root, "helper.ipynb", HELPER_CELLS)
    (root / "a_notebook_with_a_rather_long_name.ipynb").write_text(notebook(["x = 1"]))
    # JupyterLab records each cell's timing (Settings > Notebook > Record timing)
    tracker = tmp_path / "lab-settings" / "@jupyterlab" / "notebook-extension"
    tracker.mkdir(parents=True)
    (tracker / "tracker.jupyterlab-settings").write_text('{"recordTiming": true}')
    with lab_server(tmp_path, trace, jobs_dir=str(tmp_path / "jobs"),
                    offload_poll_interval=0.2) as server:
        yield server


@pytest.fixture
def page(lab: ServerProcess) -> Iterator[Any]:
    with chromium_page(costguard_errors_only=False) as pg:
        yield pg


def open_panel(page: Any) -> Any:
    page.locator('.jp-SideBar.jp-mod-right [data-id="jp-costguard-panel"]').click()
    panel = page.locator("#jp-costguard-panel")
    panel.locator(".jp-costguard-kernel-row").first.wait_for(timeout=30_000)
    panel.locator(".jp-costguard-notebook-row").first.wait_for(timeout=30_000)
    return panel


def overflowing_tables(page: Any) -> list[list[Any]]:
    """Each panel table whose content is wider than its box: [class, clientWidth, scrollWidth]."""
    return page.evaluate("""() => Array.from(
        document.querySelectorAll('#jp-costguard-panel .jp-costguard-table-wrap'))
        .filter(w => w.scrollWidth > w.clientWidth + 1)
        .map(w => [w.firstElementChild.className, w.clientWidth, w.scrollWidth])""")


def shown_headers(page: Any, table: str) -> list[str]:
    return page.evaluate("""t => Array.from(
        document.querySelectorAll(`#jp-costguard-panel .jp-costguard-${t} thead th`))
        .filter(th => getComputedStyle(th).display !== 'none')
        .map(th => th.dataset.key || th.textContent.trim())""", table)


def test_the_panel_fits_the_default_sidebar_and_its_tables_agree(lab: ServerProcess, page: Any):
    open_notebook(lab, page, "model.ipynb")
    panel = open_panel(page)
    width = panel.bounding_box()["width"]
    assert width < 320, width  # JupyterLab's default sidebar, not one we widened
    assert overflowing_tables(page) == []
    assert shown_headers(page, "notebooks") == ["path", "spend", "spend_rate_per_hour"]
    assert shown_headers(page, "kernels") == ["notebook", "spend", "Actions"]
    row = panel.locator('.jp-costguard-notebook-row[data-path="model.ipynb"]')
    detail = row.locator(".jp-costguard-row-detail")
    assert detail.is_visible()
    text = detail.inner_text()
    assert "Waste USD" in text and "GPU mem 6 GiB" in text and "Idle" in text, text
    assert "Waste USD" in (row.get_attribute("title") or "")  # and on hover
    kernel = panel.locator(".jp-costguard-kernel-row").first
    assert kernel.locator(".jp-costguard-kernel-shutdown").is_visible()
    assert "Shut down kernel" in (kernel.locator(".jp-costguard-kernel-shutdown")
                                  .get_attribute("aria-label") or "")
    shot(page, "panel-narrow.png", "#jp-costguard-panel")

    # One poll, one sample: the notebook's and its only kernel's spend read the same at every
    # refresh (with two polls the kernels table lagged the notebooks table by one)
    seen = set()
    deadline = time.monotonic() + 30
    while len(seen) < 4 and time.monotonic() < deadline:
        pair = page.evaluate("""() => [
            '.jp-costguard-notebook-row[data-path="model.ipynb"] td[data-key="spend"]',
            '.jp-costguard-kernel-row td[data-key="spend"]'].map(
                q => document.querySelector(`#jp-costguard-panel ${q}`)?.textContent)""")
        assert pair[0] == pair[1], pair
        seen.add(pair[0])
        time.sleep(0.15)
    assert len(seen) >= 4, seen  # the figures moved while we watched

    # Widened (on a wide screen), every column is back and the second line goes
    page.set_viewport_size({"width": 2400, "height": 860})
    widen_right_sidebar(page, 800)
    page.wait_for_function("""() => getComputedStyle(document.querySelector(
        '#jp-costguard-panel .jp-costguard-notebooks th[data-key="waste"]')).display !== 'none'""")
    assert "gpu_memory_bytes" in shown_headers(page, "notebooks")
    assert not detail.is_visible()
    assert overflowing_tables(page) == []
    shot(page, "panel-wide.png", "#jp-costguard-panel")


def test_run_as_job_is_in_the_notebook_toolbar_with_the_right_sidebar_open(
        lab: ServerProcess, page: Any):
    cells = open_notebook(lab, page, "model.ipynb")
    open_panel(page)  # the right sidebar open: JupyterLab may hide the cell toolbar
    cells.nth(0).locator(".jp-InputArea-prompt").click()
    page.keyboard.press("Shift+Enter")  # `rate` runs: prompt [1]
    cells.nth(0).locator(".jp-InputArea-prompt", has_text="[1]").wait_for(timeout=30_000)

    button = page.locator(TOOLBAR_BUTTON)
    assert button.is_visible()
    assert "Run as job" in button.inner_text()
    cells.nth(1).click()  # the markdown cell
    page.wait_for_function(f"() => ({TOOLBAR_DISABLED})() === true")
    assert button.is_visible()  # stays put, greyed

    cells.nth(3).locator(".jp-InputArea-prompt").click()
    page.wait_for_function(f"() => ({TOOLBAR_DISABLED})() === false")
    shot(page, "offload-toolbar.png", ".jp-NotebookPanel-toolbar")

    # the cell's right-click menu has it too
    cells.nth(3).locator(".jp-InputArea-editor").click(button="right")
    item = page.locator('.lm-Menu-item[data-command="costguard:run-as-job"]')
    item.wait_for(timeout=10_000)
    assert "Run as batch job" in item.inner_text()
    page.keyboard.press("Escape")

    button.click(modifiers=["Shift"])
    dialog = page.locator(".jp-costguard-offload-dialog")
    dialog.wait_for(timeout=20_000)
    rows = dialog.locator(".jp-costguard-slice-cell")
    assert rows.count() == 3
    named = [(rows.nth(i).locator('[data-field="prompt"]').inner_text(),
              rows.nth(i).locator('[data-field="source"]').inner_text()) for i in range(3)]
    # by prompt and first line, as the notebook shows them; never by position
    assert named == [("[1]", "rate = 3"), ("[ ]", "base = 14"),
                     ("[ ]", "answer = rate * base")], named
    assert dialog.locator("input[name=time_limit_seconds]").input_value() == ""  # no limit
    page.locator(".jp-Dialog-button.jp-mod-accept").click()
    page.locator(".Toastify__toast", has_text="submitted").first.wait_for(timeout=30_000)
    job = lab.wait_for("costguard/api/jobs", lambda d: len(d["jobs"]) == 1)["jobs"][0]
    assert job["selected"] == ["answer"]
    lab.wait_for(f"costguard/api/jobs/{job['id']}", lambda d: d["state"] == "succeeded",
                 timeout=90)


def test_the_dialog_offers_to_send_a_value_instead_of_rerunning_its_cell(
        lab: ServerProcess, page: Any):
    cells = open_notebook(lab, page, "model.ipynb")
    for i in (0, 2):  # `rate` and `base` now live in the kernel
        cells.nth(i).locator(".jp-InputArea-prompt").click()
        page.keyboard.press("Control+Enter")
        cells.nth(i).locator(".jp-InputArea-prompt", has_text=re.compile(r"\[\d+\]")).wait_for(
            timeout=30_000)
    cells.nth(3).locator(".jp-InputArea-prompt").click()
    page.locator(TOOLBAR_BUTTON).click(modifiers=["Shift"])
    dialog = page.locator(".jp-costguard-offload-dialog")
    dialog.wait_for(timeout=20_000)
    rate = dialog.locator('.jp-costguard-slice-cell[data-cell-id="rate"]')
    # how long re-running it would take, from the timing JupyterLab recorded when it ran
    assert re.fullmatch(r"took \d+(\.\d)? s", rate.locator('[data-field="last-run"]').inner_text())
    assert "Re-running the earlier cells took" in dialog.locator(
        ".jp-costguard-slice-cost").inner_text()
    offer = rate.locator("input.jp-costguard-slice-send")
    assert offer.get_attribute("data-names") == "rate"
    assert "from the kernel instead of re-running" in rate.inner_text()
    shot(page, "offload-send-instead.png", ".jp-Dialog-content")
    offer.click()  # the list is drawn again without the cell, so no check() to verify
    dialog.locator('.jp-costguard-slice-sent li[data-name="rate"]').wait_for(timeout=20_000)
    ids = dialog.locator(".jp-costguard-slice-cell").evaluate_all(
        "rows => rows.map(r => r.dataset.cellId)")
    assert ids == ["base", "answer"], ids
    assert dialog.locator("input[name=send]").input_value() == "rate"
    page.locator(".jp-Dialog-button.jp-mod-accept").click()
    page.locator(".Toastify__toast", has_text="submitted").first.wait_for(timeout=30_000)
    job = lab.wait_for("costguard/api/jobs", lambda d: len(d["jobs"]) == 1)["jobs"][0]
    detail = lab.wait_for(f"costguard/api/jobs/{job['id']}",
                          lambda d: d["state"] in ("succeeded", "failed"), timeout=90)
    assert detail["state"] == "succeeded", detail.get("log_tail")
    assert [c["cell_id"] for c in detail["slice"]["cells"]] == ["base", "answer"]
    assert "answer is 42" in detail["log_tail"]


def test_the_dialog_says_why_cells_come_along_and_warns_what_it_cannot_decide(
        lab: ServerProcess, page: Any):
    cells = open_notebook(lab, page, "helper.ipynb")
    cells.nth(4).locator(".jp-InputArea-prompt").click()
    page.locator(TOOLBAR_BUTTON).click(modifiers=["Shift"])  # shift: the dialog first
    dialog = page.locator(".jp-costguard-offload-dialog")
    dialog.wait_for(timeout=20_000)
    rows = dialog.locator(".jp-costguard-slice-cell")
    rows.first.wait_for(timeout=20_000)
    ids = rows.evaluate_all("rows => rows.map(r => r.dataset.cellId)")
    assert ids == ["mkdir", "write", "path", "use"], ids  # not the exec cell
    assert "writes lib/helper.py" in dialog.locator(
        '.jp-costguard-slice-cell[data-cell-id="write"]').inner_text()
    assert "changes sys.path" in dialog.locator(
        '.jp-costguard-slice-cell[data-cell-id="path"]').inner_text()
    warnings = dialog.locator(".jp-costguard-slice-warnings li")
    assert warnings.count() == 1
    assert warnings.first.inner_text().startswith('cell "exec(\'extra = 1\')": runs code')
    shot(page, "offload-warnings.png", ".jp-Dialog-content")
    page.locator(".jp-Dialog-button.jp-mod-accept").click()
    job = lab.wait_for("costguard/api/jobs", lambda d: len(d["jobs"]) == 1)["jobs"][0]
    detail = lab.wait_for(f"costguard/api/jobs/{job['id']}",
                          lambda d: d["state"] in ("succeeded", "failed"), timeout=90)
    assert detail["state"] == "succeeded", detail.get("log_tail")
    assert "doubled 42" in detail["log_tail"]
