"""Run as batch job, end to end in a real Chromium against a real server: select a cell whose
inputs come from two earlier cells, click the cell toolbar's button, watch the job finish in
the Jobs panel, and insert its output under the cell. On the demo's notebooks: the dialog
says what the job brings back and what stays in it, and the training alert's "Offload heavy
cells" selects the heavy cell and opens the dialog on it. COSTGUARD_SCREENSHOTS=1 saves
docs/offload-dialog.png, docs/jobs-panel.png and docs/offload-output.png."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_costguard.guard import training
from tests.support.browser import (
    chromium_page,
    idle_gpu_lab,
    jobs_lab,
    open_notebook,
    shot,
)
from tests.support.notebooks import code, markdown, write_notebook
from tests.support.server_proc import ServerProcess

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

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


def test_a_job_that_ends_before_the_pages_first_answer_still_says_so(
        lab: ServerProcess, page: Any):
    """In the demo, job 1's end never popped up (jobs 2 and 3's did): the page's first
    answer was its baseline, and a job it first saw ended was taken as old news, even one
    that ended after the page opened. Here the page's job polls fail until job 1 (submitted
    after the page opened) has ended; its first answer then has job 1 ended: announced."""
    held = [True]

    def jobs_list(route: Any) -> None:
        if held[0]:
            route.abort()
        else:
            route.continue_()

    page.route("**/costguard/api/jobs?*", jobs_list)
    open_notebook(lab, page, "model.ipynb")
    code_, body = lab.request("costguard/api/jobs", "POST",
                              {"notebook": "model.ipynb", "selected": ["answer"]})
    assert code_ == 201, body
    job_id = json.loads(body)["id"]
    lab.wait_for(f"costguard/api/jobs/{job_id}", lambda d: d["state"] == "succeeded",
                 timeout=90)
    held[0] = False
    page.locator('.jp-SideBar [data-id="jp-costguard-jobs"]').click()  # polls at once
    ended = page.locator(".Toastify__toast", has_text=f"Job {job_id} (model.ipynb) succeeded")
    ended.first.wait_for(timeout=60_000)
    page.wait_for_timeout(4500)  # a few more polls of the open panel: no repeat
    assert ended.count() == 1


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
    dialog.locator("input[name=time_limit_seconds]").fill("120")
    page.locator(".jp-Dialog-button.jp-mod-accept").click()
    page.locator(".Toastify__toast", has_text="submitted").first.wait_for(timeout=30_000)
    job = lab.wait_for("costguard/api/jobs", lambda d: len(d["jobs"]) == 1)["jobs"][0]
    assert job["resources"]["time_limit_seconds"] == 120
    lab.wait_for(f"costguard/api/jobs/{job['id']}", lambda d: d["state"] == "succeeded",
                 timeout=90)
    assert job["notebook"] == "model.ipynb"


#: a notebook whose third cell is the heavy one: it takes seconds, the others next to nothing
SWEEP = [
    markdown("about", "# A sweep"),
    code("setup", "import time\nrate = 3"),
    code("fit", "time.sleep(3)  # stands in for training\nweights = [rate, 2]"),
    code("show", "print('weights are', weights)"),
]


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[ServerProcess]:
    """The demo's offload.ipynb and train.ipynb, local batch jobs, one idle GPU."""
    root = tmp_path / "srv" / "root"
    root.mkdir(parents=True)
    for name in ("offload.ipynb", "train.ipynb"):
        shutil.copy(EXAMPLES / name, root / name)
    write_notebook(root, "sweep.ipynb", SWEEP)
    with idle_gpu_lab(tmp_path) as server:
        yield server


def assert_brings_back_only_weights(dialog: Any) -> None:
    back = dialog.locator(".jp-costguard-slice-brings-back")
    assert back.get_attribute("data-names") == "weights"
    assert back.inner_text() == "Brings back weights: later cells read it."
    stays = dialog.locator(".jp-costguard-slice-stays")
    assert stays.get_attribute("data-names") == "ckpt,epoch,err,f,grad,start,y"
    assert stays.inner_text() == (
        "Stays in the job: ckpt, epoch, err, f, grad, start and y (no later cell reads them).")


def test_the_dialog_says_the_demo_training_cell_brings_back_only_weights(
        demo: ServerProcess, page: Any):
    cells = open_notebook(demo, page, "offload.ipynb")
    train = cells.nth(5)  # `train`: "# train: the heavy cell, gradient descent..."
    assert "# train: the heavy cell" in train.inner_text()
    train.locator(".jp-InputArea-prompt").click()
    train.locator(BUTTON).click(modifiers=["Shift"])
    dialog = page.locator(".jp-costguard-offload-dialog")
    dialog.wait_for(timeout=20_000)
    ids = dialog.locator(".jp-costguard-slice-cell").evaluate_all(
        "rows => rows.map(r => r.dataset.cellId)")
    assert ids == ["setup", "data", "features", "train"], ids
    assert_brings_back_only_weights(dialog)
    shot(page, "offload-dialog.png", ".jp-Dialog-content")
    page.locator(".jp-Dialog-button.jp-mod-reject").click()
    dialog.wait_for(state="detached", timeout=10_000)
    assert demo.get("costguard/api/jobs")["jobs"] == []


def offload_from_alert(demo: ServerProcess, page: Any, notebook: str) -> Any:
    """Raise the training alert (the rule's own title and actions) on `notebook`, click its
    "Offload heavy cells"; the dialog that opens."""
    code_, body = demo.request("costguard/api/alerts", "POST", {
        "kind": "test", "key": f"training-{notebook}", "severity": "warning",
        "notebook": notebook, "title": training.TITLE, "message": "GPUs 99% idle.",
        "actions": list(training.ACTIONS)})
    assert code_ == 201, body
    alert_id = json.loads(body)["id"]
    toast = page.locator(f'.Toastify__toast[data-costguard-alert="{alert_id}"]')
    toast.locator(".jp-toast-button", has_text="Offload heavy cells").click(timeout=30_000)
    dialog = page.locator(".jp-costguard-offload-dialog")
    dialog.wait_for(timeout=20_000)
    return dialog


def current_tab(page: Any) -> str:
    return str(page.locator("#jp-main-dock-panel .lm-TabBar-tab.lm-mod-current").inner_text())


def test_offload_heavy_cells_selects_the_heavy_cell_and_opens_the_dialog(
        demo: ServerProcess, page: Any):
    cells = open_notebook(demo, page, "sweep.ipynb")
    cells.first.click()
    page.locator(".lm-MenuBar-item", has_text="Run").click()
    page.locator(".lm-Menu-item", has_text="Run All Cells").first.click()
    cells.nth(3).locator(".jp-OutputArea-output", has_text="weights are [3, 2]").wait_for(
        timeout=90_000)

    # train.ipynb (the demo's) is not open: opened, its only code cell selected
    dialog = offload_from_alert(demo, page, "train.ipynb")
    assert "train.ipynb" in current_tab(page)
    rows = dialog.locator(".jp-costguard-slice-cell")
    assert rows.count() == 1 and rows.first.get_attribute("data-cell-id") == "train-1"
    assert rows.first.get_attribute("data-selected") == "true"
    page.locator(".jp-Dialog-button.jp-mod-reject").click()
    dialog.wait_for(state="detached", timeout=10_000)

    # sweep.ipynb is open behind it: back to it, the cell that ran longest selected
    dialog = offload_from_alert(demo, page, "sweep.ipynb")
    assert "sweep.ipynb" in current_tab(page)
    rows = dialog.locator(".jp-costguard-slice-cell")
    assert rows.evaluate_all("rows => rows.map(r => [r.dataset.cellId, r.dataset.selected])") \
        == [["setup", "false"], ["fit", "true"]]
    assert dialog.locator(".jp-costguard-slice-brings-back").get_attribute(
        "data-names") == "weights"
    active = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell.jp-mod-active")
    assert "time.sleep(3)" in active.inner_text()
    page.locator(".jp-Dialog-button.jp-mod-reject").click()
    dialog.wait_for(state="detached", timeout=10_000)
    assert demo.get("costguard/api/jobs")["jobs"] == []
