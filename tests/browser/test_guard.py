"""The guard's training-sized warning as a JupyterLab notification, in a real Chromium
(Debian's, driven by Playwright) against a real server playing a p4d.24xlarge trace.
COSTGUARD_SCREENSHOTS=1 saves docs/guard-training.png."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import chromium_page, lab_server, need_browser, notebook, shot
from tests.support.server_proc import ServerProcess
from tests.support.traces import write_trace
from tests.support.units import GiB

pytestmark = pytest.mark.timeout(300)

TITLE = "Training-sized instance used interactively"


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[ServerProcess]:
    need_browser()
    # as in examples/: kernel 0 explores on GPU 0 of a p4d.24xlarge at 2%, holding 6 GiB
    frame = {"t": 0, "gpus": [
        {"utilization_percent": 2, "power_watts": 68,
         "processes": [{"kernel": 0, "used_memory_bytes": 6 * GiB}]}
    ] + [{"utilization_percent": 0, "power_watts": 52, "processes": []} for _ in range(7)]}
    trace = write_trace(tmp_path / "trace.json", [frame], gpus=8, instance_type="p4d.24xlarge")
    root = tmp_path / "srv" / "root"
    root.mkdir(parents=True)
    (root / "explore.ipynb").write_text(notebook(["values = [i * i for i in range(10_000)]"]))
    with lab_server(tmp_path, trace, interactive_window_seconds=6.0) as server:
        yield server


@pytest.fixture
def page(lab: ServerProcess) -> Iterator[Any]:
    with chromium_page() as pg:
        yield pg


def test_training_sized_warning_names_the_cheaper_instance(lab: ServerProcess, page: Any):
    page.goto(f"{lab.url}lab/tree/explore.ipynb?token={lab.token}")
    page.wait_for_selector(".jp-Notebook", timeout=60_000)

    doc = lab.wait_for("costguard/api/alerts", lambda d: any(
        a["kind"] == "training-sized-interactive" for a in d["alerts"]), timeout=90)
    alert = next(a for a in doc["alerts"] if a["kind"] == "training-sized-interactive")
    suggestion = alert["details"]["suggestion"]
    assert suggestion is not None and suggestion["provider"] == "aws"
    assert alert["notebook"] == "explore.ipynb"

    toast = page.locator(".Toastify__toast", has_text=TITLE)
    toast.first.wait_for(timeout=30_000)
    text = toast.first.inner_text()
    assert suggestion["instance_type"] in text, text
    assert "(simulated)" in text and "idle" in text
    for label in ("Offload heavy cells", "Cost panel", "Snooze"):
        assert toast.first.get_by_role("button", name=label).count() == 1, label
    # the status bar marks the notebook the warning concerns
    page.locator("#jp-costguard-status.jp-costguard-alert").wait_for(timeout=15_000)
    page.wait_for_timeout(3000)  # more polls: still one notification for the alert
    assert toast.count() == 1
    shot(page, "guard-training.png")

    # Snooze goes to the server
    toast.first.get_by_role("button", name="Snooze").click()
    lab.wait_for("costguard/api/alerts?include=all", lambda d: any(
        a["id"] == alert["id"] and a["state"] == "snoozed" for a in d["alerts"]), timeout=15)


def test_offload_heavy_cells_opens_the_offload_dialog(lab: ServerProcess, page: Any):
    """The warning's "Offload heavy cells" action leads to the job dialog for the notebook."""
    page.goto(f"{lab.url}lab/tree/explore.ipynb?token={lab.token}")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    toast = page.locator(".Toastify__toast", has_text=TITLE)
    toast.first.wait_for(timeout=90_000)
    page.locator(".jp-Notebook .jp-Cell").first.locator(".jp-InputArea-prompt").click()
    toast.first.get_by_role("button", name="Offload heavy cells").click()
    dialog = page.locator(".jp-costguard-offload-dialog")
    dialog.wait_for(timeout=20_000)
    cells = dialog.locator(".jp-costguard-slice-cell")
    assert cells.count() == 1 and cells.first.get_attribute("data-selected") == "true"
    page.locator(".jp-Dialog-button.jp-mod-accept").click()
    job = lab.wait_for("costguard/api/jobs", lambda d: len(d["jobs"]) == 1)["jobs"][0]
    assert job["notebook"] == "explore.ipynb"
    lab.wait_for(f"costguard/api/jobs/{job['id']}", lambda d: d["state"] == "succeeded",
                 timeout=90)
