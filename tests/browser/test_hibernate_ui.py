"""Hibernate, end to end in a real Chromium against a real server: a notebook's kernel holds
four (replayed) GPUs and sits idle, so its idle-GPU alert offers "Hibernate: free 4 GPUs, keep
your variables"; the toolbar's Hibernate (after its question) saves the variables and shuts the
kernel down, naming the generator it could not save; the notebook's banner offers the
snapshot; Restore starts a kernel, loads them, and a cell run afterwards sees a dict, a
function, an instance of a notebook class and a 100,000-item list again. Resume on use: in a
hibernated notebook, just running the next cell brings them back first.
COSTGUARD_SCREENSHOTS=1 saves docs/hibernate-alert.png and docs/hibernate-banner.png."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import chromium_page, lab_server, need_browser, open_notebook, shot
from tests.support.gated import GATED
from tests.support.notebooks import code, write_notebook
from tests.support.server_proc import ServerProcess
from tests.support.traces import write_trace
from tests.support.units import GiB

pytestmark = pytest.mark.timeout(300)

NOTEBOOK = "explore.ipynb"
CELLS = [
    code("data", "data = {'a': 1, 'b': [1, 2, 3]}"),
    code("fn", "def square(x):\n    return x * x"),
    code("cls", "class Point:\n    def __init__(self, x, y):\n        self.x, self.y = x, y\n"
                "p = Point(3, 4)"),
    code("big", "big = list(range(100_000))"),
    code("gen", "gen = (i for i in range(3))"),
    code("check", "print('back:', data['b'], square(7), p.x + p.y, len(big))"),
]
RAN = 5  # the cells run before hibernating; "check" runs after the restore
BANNER = ".jp-costguard-hibernate-banner"
TOOLBAR_BUTTON = '.jp-NotebookPanel-toolbar [data-command="costguard:hibernate-kernel"]'


@pytest.fixture
def hibernate_after() -> float | None:
    """`hibernate_idle_after_seconds` (None: the server hibernates nothing by itself)."""
    return None


@pytest.fixture
def may_leave_behind() -> bool:
    """`hibernate_may_leave_behind` (False, the default: an automatic hibernation saves every
    variable or keeps the kernel running)."""
    return False


@pytest.fixture
def lab(tmp_path: Path, hibernate_after: float | None,
        may_leave_behind: bool) -> Iterator[ServerProcess]:
    """A p4de.24xlarge whose four GPUs the notebook's first kernel holds, at 2%."""
    need_browser()
    held = [{"kernel": 0, "used_memory_bytes": 4 * GiB}]
    frame = {"t": 0, "gpus": [{"utilization_percent": 2, "power_watts": 70, "processes": held}
                              for _ in range(4)]}
    trace = write_trace(tmp_path / "trace.json", [frame], gpus=4, instance_type="p4de.24xlarge")
    write_notebook(tmp_path / "srv" / "root", NOTEBOOK, CELLS)
    with lab_server(tmp_path, trace, idle_kernel_seconds=1.0,
                    hibernate_idle_after_seconds=hibernate_after,
                    hibernate_may_leave_behind=may_leave_behind) as server:
        yield server


@pytest.fixture
def page(lab: ServerProcess) -> Iterator[Any]:
    with chromium_page(costguard_errors_only=True) as pg:
        yield pg


def toasts(page: Any) -> list[str]:
    return [str(t) for t in page.locator(".Toastify__toast").all_inner_texts()]


def run_cells(page: Any, cells: Any, first: int, count: int) -> None:
    """Run `count` cells from `first` with Shift+Enter and wait for their outputs' prompts."""
    cells.nth(first).locator(".jp-InputArea-prompt").click()
    for _ in range(count):
        page.keyboard.press("Shift+Enter")
    for i in range(first, first + count):
        cells.nth(i).locator(".jp-InputArea-prompt", has_text="[").filter(
            has_not_text="[*]").filter(has_not_text="[ ]").wait_for(timeout=60_000)


def test_hibernate_then_restore_brings_the_variables_back(lab: ServerProcess, page: Any):
    cells = open_notebook(lab, page, NOTEBOOK)
    run_cells(page, cells, 0, RAN)

    # The idle-GPU alert offers Hibernate, saying what it frees.
    offer = page.locator(".Toastify__toast").get_by_role(
        "button", name="Hibernate: free 4 GPUs, keep your variables")
    offer.first.wait_for(timeout=60_000)
    shot(page, "hibernate-alert.png", ".Toastify__toast")
    page.locator(".Toastify__toast .jp-Notification-Toast-Close").first.click()  # hides it only

    page.locator(TOOLBAR_BUTTON).click()
    dialog = page.locator(".jp-Dialog")
    dialog.wait_for(timeout=10_000)
    assert "its GPUs are freed" in dialog.inner_text()
    dialog.get_by_role("button", name="Hibernate").click()

    done = page.locator(".Toastify__toast", has_text="Hibernated:")
    done.first.wait_for(timeout=90_000)
    said = done.first.inner_text()
    assert "1 skipped (gen:" in said, said
    assert "4 GPUs freed" in said, said
    snapshots = lab.get(f"costguard/api/snapshots?notebook={NOTEBOOK}")["snapshots"]
    assert len(snapshots) == 1, snapshots
    assert {"data", "square", "Point", "p", "big"} <= set(snapshots[0]["saved"])
    assert [s["name"] for s in snapshots[0]["skipped"]] == ["gen"]

    banner = page.locator(f"{BANNER}:not(.lm-mod-hidden)")
    banner.wait_for(timeout=30_000)
    assert banner.get_attribute("data-snapshot-id") == snapshots[0]["id"]
    text = banner.locator(".jp-costguard-hibernate-text").inner_text()
    assert text.startswith("Hibernated at "), text
    assert f"{len(snapshots[0]['saved'])} variables" in text, text
    page.wait_for_timeout(1000)  # the toast's slide-in
    shot(page, "hibernate-banner.png")  # the toolbar's button, the banner and the toast

    banner.locator(".jp-costguard-hibernate-restore").click()
    restored = page.locator(".Toastify__toast", has_text="Restored:")
    try:
        restored.first.wait_for(timeout=90_000)
    except Exception as e:  # say what the page said instead (an error toast, the banner's)
        raise AssertionError(f"no restore: toasts {toasts(page)}, banner "
                             f"{page.locator(BANNER).inner_text()!r}") from e
    # the banner stays, saying so, for Discard (the snapshot is kept); Restore is not offered
    banner.locator(".jp-costguard-hibernate-text", has_text="Restored at").wait_for(
        timeout=10_000)
    assert banner.locator(".jp-costguard-hibernate-restore").is_hidden()
    assert banner.locator(".jp-costguard-hibernate-discard").is_visible()
    after = lab.get(f"costguard/api/snapshots?notebook={NOTEBOOK}")["snapshots"]
    assert after[0]["restored"] is not None, after  # a reload does not offer it again

    run_cells(page, cells, RAN, 1)
    output = cells.nth(RAN).locator(".jp-OutputArea")
    output.filter(has_text="back:").wait_for(timeout=30_000)
    assert "back: [1, 2, 3] 49 7 100000" in output.inner_text()


@pytest.mark.parametrize(("hibernate_after", "may_leave_behind"), [(6.0, True)])
def test_the_server_hibernates_an_idle_gpu_kernel_and_the_page_offers_it_back(
        lab: ServerProcess, page: Any, hibernate_after: float):
    """Idle past `hibernate_idle_after_seconds`, the kernel is hibernated by the server
    itself; the page says so and its banner offers the snapshot. The notebook's generator
    cannot live outside the process: the admin's `hibernate_may_leave_behind` lets the
    automatic hibernation leave it behind, named (without it the kernel keeps running and the
    alert names it: tests/test_hibernate_api.py, tests/test_guard_idle_hibernate.py)."""
    cells = open_notebook(lab, page, NOTEBOOK)
    run_cells(page, cells, 0, RAN)
    said = page.locator(".Toastify__toast", has_text="Hibernated explore.ipynb: freed 4 GPUs")
    said.first.wait_for(timeout=90_000)
    text = said.first.inner_text()
    assert "not saved: gen" in text and "banner" in text, text
    banner = page.locator(f"{BANNER}:not(.lm-mod-hidden)")
    banner.wait_for(timeout=30_000)
    (snapshot,) = lab.get(f"costguard/api/snapshots?notebook={NOTEBOOK}")["snapshots"]
    assert banner.get_attribute("data-snapshot-id") == snapshot["id"]


def test_running_a_cell_in_a_hibernated_notebook_restores_its_variables_and_runs_it(
        lab: ServerProcess, page: Any):
    """Resume on use: the kernel hibernated (by the server, as the idle rule does), the user
    just runs the next cell: the notebook gets a new kernel, the server restores the snapshot
    into it first, and the cell runs with the variables; no click, no NameError. The banner
    stays, saying they were restored, for discarding the snapshot."""
    cells = open_notebook(lab, page, NOTEBOOK)
    run_cells(page, cells, 0, RAN)
    (session,) = [s for s in lab.get("api/sessions") if s["path"] == NOTEBOOK]
    code_, body = lab.request(f"costguard/api/kernels/{session['kernel']['id']}/hibernate",
                              "POST", {})
    assert code_ == 200, body
    banner = page.locator(f"{BANNER}:not(.lm-mod-hidden)")
    banner.wait_for(timeout=30_000)

    run_cells(page, cells, RAN, 1)
    output = cells.nth(RAN).locator(".jp-OutputArea")
    output.filter(has_text="back:").wait_for(timeout=60_000)
    assert "back: [1, 2, 3] 49 7 100000" in output.inner_text()
    assert "NameError" not in output.inner_text()
    (snapshot,) = lab.get(f"costguard/api/snapshots?notebook={NOTEBOOK}")["snapshots"]
    assert snapshot["restored"] is not None and snapshot["restore_error"] is None, snapshot

    restored = banner.locator(".jp-costguard-hibernate-text", has_text="Restored at")
    restored.wait_for(timeout=30_000)
    assert "snapshot kept" in restored.inner_text()
    assert banner.get_attribute("data-snapshot-id") == snapshot["id"]
    assert banner.locator(".jp-costguard-hibernate-restore").is_hidden()
    assert banner.locator(".jp-costguard-hibernate-discard").is_visible()
    assert not [t for t in toasts(page) if "Restored:" in t or "NameError" in t]


def test_the_banner_says_restoring_while_the_server_restores(
        lab: ServerProcess, page: Any, tmp_path: Path):
    """While the server loads the snapshot (held open here by a value whose loading waits for
    a file), the banner says "Restoring N variables (size)…" and the cell waits; then the
    cell runs with the variables."""
    gate = tmp_path / "gate"
    write_notebook(tmp_path / "srv" / "root", "gated.ipynb", [
        code("data", "data = [1, 2, 3]"), code("gated", GATED.format(gate=str(gate))),
        code("check", "print('back:', data, gated)")])
    cells = open_notebook(lab, page, "gated.ipynb")
    run_cells(page, cells, 0, 2)
    (session,) = [s for s in lab.get("api/sessions") if s["path"] == "gated.ipynb"]
    code_, body = lab.request(f"costguard/api/kernels/{session['kernel']['id']}/hibernate",
                              "POST", {})
    assert code_ == 200, body
    saved = len(json.loads(body)["saved"])
    banner = page.locator(f"{BANNER}:not(.lm-mod-hidden)")
    banner.locator(".jp-costguard-hibernate-text", has_text="Hibernated at").wait_for(
        timeout=30_000)

    cells.nth(2).locator(".jp-InputArea-prompt").click()
    page.keyboard.press("Shift+Enter")
    restoring = banner.locator(".jp-costguard-hibernate-text",
                               has_text=f"Restoring {saved} variables (")
    restoring.wait_for(timeout=60_000)
    assert banner.get_attribute("data-state") == "restoring"
    assert banner.locator(".jp-costguard-hibernate-discard").is_disabled()
    gate.touch()
    output = cells.nth(2).locator(".jp-OutputArea")
    output.filter(has_text="back:").wait_for(timeout=60_000)
    assert "back: [1, 2, 3] 42" in output.inner_text()
    banner.locator(".jp-costguard-hibernate-text", has_text="Restored at").wait_for(
        timeout=30_000)
