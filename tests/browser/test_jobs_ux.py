"""Jobs, as the user lives them, in a real Chromium against a real server: with the Jobs panel
open, a job submitted from the cell toolbar ends with a notification; "Load results" brings
back only what a later cell reads (not the training loop's leftovers), and asks before it
replaces a name the kernel already has. The kernel is then read directly (its connection
file), not through the page."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import chromium_page, jobs_lab, open_notebook
from tests.support.notebooks import code
from tests.support.server_proc import ServerProcess

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("no_leftover_jobs")]

BUTTON = '.jp-cell-toolbar [data-command="costguard:run-as-job"]'
TRAIN = """\
import time
weights = [0.0, 0.0]
for epoch in range(3):
    grad = [0.0, 0.0]
    for f, y in rows:
        err = sum(w * v for w, v in zip(weights, f)) - y
        grad = [g + err * v for g, v in zip(grad, f)]
    weights = [w - 0.5 * g / len(rows) for w, g in zip(weights, grad)]
    loss = sum(g * g for g in grad)
time.sleep(1)
print('trained')
"""
CELLS = [
    code("mine", "weights = 'mine'\nerr = 'my own err'"),
    code("data", "rows = [([1.0, x / 10], 3 * x / 10 + 2) for x in range(20)]"),
    code("train", TRAIN),
    code("report", "print(weights, loss)"),
]


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[ServerProcess]:
    with jobs_lab(tmp_path, "train.ipynb", CELLS) as server:
        yield server


@pytest.fixture
def page(lab: ServerProcess) -> Iterator[Any]:
    with chromium_page(costguard_errors_only=False) as pg:
        yield pg


def kernel_values(lab: ServerProcess, names: list[str]) -> dict[str, str]:
    """`repr` of each name in the notebook's kernel ('<undefined>' when it has none), read
    over the kernel's own channels (its connection file), not through the page."""
    from jupyter_client import BlockingKernelClient

    kernel_id = lab.get("api/sessions")[0]["kernel"]["id"]
    client = BlockingKernelClient()
    client.load_connection_file(str(lab.workdir / "runtime" / f"kernel-{kernel_id}.json"))
    client.start_channels(hb=False)
    try:
        expressions = {n: f"repr(globals().get({n!r}, '<undefined>'))" for n in names}
        reply = client.execute_interactive("", silent=True, store_history=False,
                                           user_expressions=expressions, timeout=30)
    finally:
        client.stop_channels()
    found = reply["content"]["user_expressions"]
    return {n: eval(found[n]["data"]["text/plain"]) for n in names}  # repr of a repr


def test_job_end_notification_with_the_panel_open_and_load_asks_first(
        lab: ServerProcess, page: Any):
    cells = open_notebook(lab, page, "train.ipynb")
    # the user's own `weights` and `err`, in the interactive kernel
    cells.nth(0).locator(".jp-InputArea-prompt").click()
    page.keyboard.press("Control+Enter")
    deadline = time.monotonic() + 30
    while kernel_values(lab, ["weights"])["weights"] != "'mine'":
        assert time.monotonic() < deadline, "the first cell did not run"
        time.sleep(0.3)

    # the Jobs panel is open before the job is submitted
    page.locator('.jp-SideBar [data-id="jp-costguard-jobs"]').click()
    page.locator("#jp-costguard-jobs").wait_for(state="visible", timeout=15_000)

    target = cells.nth(2)
    target.locator(".jp-InputArea-prompt").click()
    target.locator(BUTTON).click()
    page.locator(".Toastify__toast", has_text="submitted").first.wait_for(timeout=30_000)
    job = lab.wait_for("costguard/api/jobs", lambda d: len(d["jobs"]) == 1)["jobs"][0]
    # a later cell reads weights and loss: only they come back, not the loop's leftovers
    assert job["bring_back"] == ["loss", "weights"], job
    assert job["bring_back_from"] == "later_cells"

    row = page.locator(f'#jp-costguard-jobs .jp-costguard-job-row[data-job-id="{job["id"]}"]')
    row.wait_for(timeout=15_000)
    ended = page.locator(".Toastify__toast", has_text=f"Job {job['id']} (train.ipynb) succeeded")
    ended.first.wait_for(timeout=90_000)
    page.wait_for_timeout(4500)  # a few more polls of the open panel (every 2 s): no repeat
    assert ended.count() == 1
    assert row.get_attribute("data-state") == "succeeded"

    row.locator(".jp-costguard-job-load").click()
    dialog = page.locator(".jp-Dialog", has=page.locator(".jp-costguard-load-dialog"))
    dialog.wait_for(timeout=20_000)
    assert "Replace weights in the kernel?" in dialog.inner_text()
    assert dialog.locator(".jp-costguard-load-dialog").get_attribute("data-names") == "weights"
    assert "err" not in dialog.inner_text()  # a leftover, never brought back
    dialog.locator(".jp-costguard-load-others").click()  # keep my weights
    page.locator(".Toastify__toast",
                 has_text=f"Loaded loss from job {job['id']}").first.wait_for(timeout=20_000)

    values = kernel_values(lab, ["weights", "loss", "err", "grad", "epoch"])
    assert values["weights"] == "'mine'"  # kept
    assert values["err"] == "'my own err'"  # not replaced by the job's leftover
    assert values["grad"] == values["epoch"] == "'<undefined>'"  # leftovers stayed in the job
    assert float(values["loss"]) >= 0  # the one that did not exist was loaded
