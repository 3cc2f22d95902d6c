"""A GPU that reports no utilisation (a MIG instance; here a replayed GPU whose trace records
none): the panel's GPU, kernel and notebook rows say "unknown", not 0 % or "–", and the
notebook's spend carries no waste."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.browser import (
    checked_page,
    chromium,
    lab_server,
    need_browser,
    notebook,
    widen_right_sidebar,
)
from tests.support.server_proc import ServerProcess
from tests.support.traces import write_trace
from tests.support.units import GiB

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    need_browser()
    tmp = tmp_path_factory.mktemp("lab")
    frame = {"t": 0, "gpus": [
        {"utilization_percent": None, "power_watts": 70,
         "processes": [{"notebook": "mig.ipynb", "used_memory_bytes": 6 * GiB}]}]}
    trace = write_trace(tmp / "trace.json", [frame], gpus=1, instance_type="p4de.24xlarge")
    root = tmp / "srv" / "root"
    root.mkdir(parents=True)
    (root / "mig.ipynb").write_text(notebook(["1 + 1"]))
    with lab_server(tmp, trace) as server:
        yield server


def test_panel_says_unknown_for_a_gpu_without_utilisation(lab: ServerProcess) -> None:
    with chromium() as browser, checked_page(browser) as page:
        page.goto(f"{lab.url}lab/tree/mig.ipynb?token={lab.token}")
        page.wait_for_selector(".jp-Notebook", timeout=60_000)
        lab.wait_for("costguard/api/kernels",
                     lambda d: any(k["gpu_activity"] == "unknown" for k in d["kernels"]),
                     timeout=90)
        page.locator("#jp-costguard-status .jp-costguard-notebook").wait_for(timeout=60_000)
        page.locator("#jp-costguard-status").click()
        panel = page.locator("#jp-costguard-panel")
        panel.wait_for(state="visible", timeout=10_000)
        widen_right_sidebar(page)
        util = panel.locator('.jp-costguard-gpu-row td[data-key="utilization"]')
        util.wait_for(timeout=30_000)
        page.wait_for_function(
            "() => document.querySelector("
            "'.jp-costguard-gpu-row td[data-key=\"utilization\"]')?.textContent === 'unknown'",
            timeout=30_000)
        kernel = panel.locator('.jp-costguard-kernel-row td[data-key="gpu_utilization_percent"]')
        kernel.first.wait_for(state="attached", timeout=30_000)  # a secondary column
        assert kernel.first.text_content() == "unknown"
        row = panel.locator('.jp-costguard-notebook-row[data-path="mig.ipynb"]')
        row.wait_for(state="attached", timeout=30_000)
        assert row.locator('td[data-key="gpu_utilization_percent"]').text_content() == "unknown"
        doc = lab.get("costguard/api/notebooks")
        nb = next(n for n in doc["notebooks"] if n["path"] == "mig.ipynb")
        assert nb["gpu_spend"] > 0 and nb["waste"] == 0
