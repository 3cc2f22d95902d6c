"""Run as batch job, end to end in a real Chromium against a real server: select a cell whose
inputs come from two earlier cells, click the cell toolbar's button, watch the job finish in
the Jobs panel, and insert its output under the cell. COSTGUARD_SCREENSHOTS=1 saves
docs/offload-dialog.png, docs/jobs-panel.png and docs/offload-output.png."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import chromium_page, jobs_lab, open_notebook, shot
from tests.support.notebooks import code, markdown
from tests.support.server_proc import ServerProcess

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("no_leftover_jobs")]

BUTTON = '.jp-cell-toolbar [data-command="costguard:run-as-job"]'
CELLS = [
    code("rate", "rate = 3  # from the data team"),
    markdown("about", "## Model size"),
    code("noise", "scratch = 'an unrelated cell'\nprint(scratch)"),
    code("base", "base = 14"),
    code("answer", "import time\nanswer = rate * base\ntime.sleep(1)\nprint('answer is', answer)"),
]


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[ServerProcess]:
    with jobs_lab(tmp_path, "model.ipynb", CELLS) as server:
        yield server


@pytest.fixture
def page(lab: ServerProcess) -> Iterator[Any]:
    with chromium_page(costguard_errors_only=False) as pg:
        yield pg


def test_run_as_batch_job_from_the_cell_toolbar(lab: ServerProcess, page: Any):
    cells = open_notebook(lab, page, "model.ipynb")
    target = cells.nth(4)
    target.locator(".jp-InputArea-prompt").click()
    target.locator(BUTTON).click()  # one click: submitted with the defaults

    toast = page.locator(".Toastify__toast", has_text="submitted")
    toast.first.wait_for(timeout=30_000)
    assert "3 cells (1 selected)" in toast.first.inner_text()
    jobs = lab.get("costguard/api/jobs")["jobs"]
    assert len(jobs) == 1 and jobs[0]["selected"] == ["answer"]
    detail = lab.get(f"costguard/api/jobs/{jobs[0]['id']}")
    assert [c["cell_id"] for c in detail["slice"]["cells"]] == ["rate", "base", "answer"]

    toast.first.get_by_role("button", name="Show jobs").click()
    row = page.locator('#jp-costguard-jobs .jp-costguard-job-row[data-job-id="1"]')
    row.wait_for(timeout=15_000)
    page.locator('.jp-costguard-job-row[data-job-id="1"][data-state="succeeded"]').wait_for(
        timeout=90_000)
    assert "model.ipynb" in row.inner_text()
    ended = page.locator(".Toastify__toast", has_text="succeeded")
    ended.first.wait_for(timeout=15_000)
    # "Show jobs" opened the panel on this job, expanded: its log follows
    assert "jp-mod-expanded" in (row.get_attribute("class") or "")
    page.locator('.jp-costguard-job-row[data-job-id="1"] pre.jp-costguard-job-log',
                 has_text="answer is 42").wait_for(timeout=15_000)
    shot(page, "jobs-panel.png", "#jp-costguard-jobs")

    row.locator(".jp-costguard-job-insert").click()
    output = target.locator(".jp-OutputArea")
    output.filter(has_text="answer is 42").wait_for(timeout=15_000)
    text = output.inner_text()
    assert "ran as job 1 on local" in text, text
    assert "answer is 42" not in cells.nth(2).inner_text()  # other cells untouched
    shot(page, "offload-output.png", ".jp-Notebook")

    # the results come back into the interactive kernel
    row.locator(".jp-costguard-job-load").click()
    page.locator(".Toastify__toast", has_text="answer").first.wait_for(timeout=20_000)


def test_shift_click_shows_the_slice_with_its_reasons_first(lab: ServerProcess, page: Any):
    cells = open_notebook(lab, page, "model.ipynb")
    target = cells.nth(4)
    target.locator(".jp-InputArea-prompt").click()
    target.locator(BUTTON).click(modifiers=["Shift"])
    dialog = page.locator(".jp-costguard-offload-dialog")
    dialog.wait_for(timeout=20_000)
    rows = dialog.locator(".jp-costguard-slice-cell")
    assert [rows.nth(i).get_attribute("data-cell-id") for i in range(rows.count())] == [
        "rate", "base", "answer"]
    assert "rate" in rows.nth(0).inner_text() and "base" in rows.nth(1).inner_text()
    assert rows.nth(2).get_attribute("data-selected") == "true"
    shot(page, "offload-dialog.png", ".jp-Dialog-content")
    dialog.locator("input[name=time_limit_seconds]").fill("120")
    page.locator(".jp-Dialog-button.jp-mod-accept").click()
    page.locator(".Toastify__toast", has_text="submitted").first.wait_for(timeout=30_000)
    job = lab.wait_for("costguard/api/jobs", lambda d: len(d["jobs"]) == 1)["jobs"][0]
    assert job["resources"]["time_limit_seconds"] == 120
    lab.wait_for(f"costguard/api/jobs/{job['id']}", lambda d: d["state"] == "succeeded",
                 timeout=90)
    assert job["notebook"] == "model.ipynb"
