"""The offload dialog says what the job will cost before it starts, in a real Chromium against
a real server: on the demo's notebook (an AWS p4de.24xlarge priced from the shipped catalog,
local batch jobs) the toolbar's "Run as job" says what a one-click submit costs before the
click, and the dialog shows the job's share of this machine's hourly price (one CPU of its 96:
cost/allocation.py) and where it came from, then, once a time limit is typed, the most the job
can cost within it. COSTGUARD_SCREENSHOTS=1 saves
docs/offload-estimate.png."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import chromium_page, idle_gpu_lab, open_notebook, shot
from tests.support.server_proc import ServerProcess

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
BUTTON = '.jp-cell-toolbar [data-command="costguard:run-as-job"]'
TOOLBAR_TITLE = """() => {
  const b = document.querySelector(
    '.jp-NotebookPanel-toolbar [data-command="costguard:run-as-job"]');
  return b ? (b.getAttribute('title') || b.querySelector('[title]')?.getAttribute('title') || '')
           : '';
}"""

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("no_leftover_jobs")]


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[ServerProcess]:
    """The demo's offload.ipynb on a p4de.24xlarge (one idle GPU), local batch jobs."""
    root = tmp_path / "srv" / "root"
    root.mkdir(parents=True)
    shutil.copy(EXAMPLES / "offload.ipynb", root / "offload.ipynb")
    with idle_gpu_lab(tmp_path) as server:
        yield server


@pytest.fixture
def page(demo: ServerProcess) -> Iterator[Any]:
    with chromium_page() as pg:
        yield pg


def amount(text: str, before: str) -> float:
    """The USD amount that follows `before` in `text`."""
    found = re.search(re.escape(before) + r" USD ([0-9.,]+)", text)
    assert found, text
    return float(found.group(1).replace(",", ""))


def test_the_dialog_shows_the_local_estimate_and_the_most_within_the_time_limit(
        demo: ServerProcess, page: Any):
    status = demo.get("costguard/api/status")
    assert status["price"]["instance_type"] == "p4de.24xlarge" and status["rate_per_hour"] > 1
    assert status["instance"]["vcpus"] == 96
    # a job that asks for nothing holds one CPU: 1/96 of the host's part of the price
    rate = status["rate_per_hour"] * (1 - status["gpu_share"]) / 96
    cells = open_notebook(demo, page, "offload.ipynb")
    page.wait_for_function(f"() => ({TOOLBAR_TITLE})().includes('about USD')", timeout=20_000)
    title = page.evaluate(TOOLBAR_TITLE)
    assert "/h on local" in title and amount(title, "about") == pytest.approx(rate, abs=0.006)
    train = cells.nth(5)  # `train`: the heavy cell
    train.locator(".jp-InputArea-prompt").click()
    train.locator(BUTTON).click(modifiers=["Shift"])
    dialog = page.locator(".jp-costguard-offload-dialog")
    dialog.wait_for(timeout=20_000)
    estimate = dialog.locator(".jp-costguard-offload-estimate[data-state='ok']")
    estimate.wait_for(timeout=20_000)
    price = estimate.locator("[data-field='price']").inner_text()
    assert price.endswith("/h on local")
    assert amount(price, "About") == pytest.approx(rate, abs=0.006)
    source = estimate.locator("[data-field='source']").inner_text()
    assert re.fullmatch(r"Price from catalog: aws p4de\.24xlarge on-demand, as of "
                        r"\d{4}-\d\d-\d\d at [0-9.]+ USD/h, the job's share: 1 CPU of 96 × "
                        r"[0-9.]+ per hour \(USD\)\.", source), source
    assert estimate.locator("[data-field='most']").inner_text() == \
        "No time limit: nothing caps what it can cost."

    limit = dialog.locator("input[name='time_limit_seconds']")
    limit.fill("7200")
    most = dialog.locator(".jp-costguard-offload-estimate[data-state='ok'] [data-field='most']")
    page.wait_for_function(
        "() => document.querySelector('.jp-costguard-offload-estimate [data-field=\"most\"]')"
        "?.textContent.startsWith('At most')", timeout=20_000)
    text = most.inner_text()
    assert text.endswith("within the 2 h 00 min time limit.")
    assert amount(text, "At most") == pytest.approx(2 * rate, abs=0.006)
    shot(page, "offload-estimate.png", ".jp-Dialog-content")
    page.locator(".jp-Dialog-button.jp-mod-reject").click()
    dialog.wait_for(state="detached", timeout=10_000)
    assert demo.get("costguard/api/jobs")["jobs"] == []
