"""The guard's training-sized warning as a JupyterLab notification, in a real Chromium
(Debian's, driven by Playwright) against a real server playing a p4d.24xlarge trace.
COSTGUARD_SCREENSHOTS=1 saves docs/guard-training.png."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import GiB, write_trace
from .server_proc import ServerProcess

pytestmark = pytest.mark.timeout(300)

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DOCS = Path(__file__).resolve().parent.parent / "docs"
SHOTS = os.environ.get("COSTGUARD_SCREENSHOTS") == "1"
TITLE = "Training-sized instance used interactively"


def _need_browser() -> None:
    if os.path.exists(CHROMIUM):
        try:
            import playwright  # noqa: F401
            return
        except ImportError:
            pass
    if os.environ.get("CI"):
        pytest.fail("CI must run the browser tests: install Debian's chromium and playwright")
    pytest.skip("no chromium or playwright here")


@pytest.fixture(autouse=True)
def jp_asyncio_loop() -> Iterator[None]:
    """Playwright's sync API runs its own loop here; pytest-jupyter's must stay out."""
    yield None


@pytest.fixture(autouse=True)
def jp_server_cleanup() -> Iterator[None]:
    yield None


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[ServerProcess]:
    _need_browser()
    # as in examples/: kernel 0 explores on GPU 0 of a p4d.24xlarge at 2%, holding 6 GiB
    frame = {"t": 0, "gpus": [
        {"utilization_percent": 2, "power_watts": 68,
         "processes": [{"kernel": 0, "used_memory_bytes": 6 * GiB}]}
    ] + [{"utilization_percent": 0, "power_watts": 52, "processes": []} for _ in range(7)]}
    trace = write_trace(tmp_path / "trace.json", [frame], gpus=8, instance_type="p4d.24xlarge")
    root = tmp_path / "srv" / "root"
    root.mkdir(parents=True)
    (root / "explore.ipynb").write_text(json.dumps({
        "cells": [{"cell_type": "code", "id": "c0", "metadata": {}, "outputs": [],
                   "source": "values = [i * i for i in range(10_000)]",
                   "execution_count": None}],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                    "language": "python"}},
        "nbformat": 4, "nbformat_minor": 5}))
    server = ServerProcess(tmp_path / "srv", {
        "db_path": str(tmp_path / "ledger.sqlite"), "sample_interval": 0.5,
        "replay_trace": str(trace), "replay_mode": "always",
        "interactive_window_seconds": 6.0}).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def page(lab: ServerProcess) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"])
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 860})
            pg = context.new_page()
            errors: list[str] = []
            pg.on("pageerror", lambda e: errors.append(str(e)))
            yield pg
            assert not [e for e in errors if "costguard" in e.lower()], errors
        finally:
            browser.close()


def test_training_sized_warning_names_the_cheaper_instance(lab: ServerProcess, page: Any):
    page.goto(f"{lab.url}lab/tree/explore.ipynb?token={lab.token}")
    page.wait_for_selector(".jp-Notebook", timeout=60_000)
    page.evaluate("window.localStorage.setItem('jupyterlab-news', 'false')")

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
    if SHOTS:
        news = page.locator(".Toastify__toast", has_text="Jupyter news")
        if news.count():
            news.first.get_by_role("button", name="No", exact=True).click()
            page.wait_for_timeout(500)
        DOCS.mkdir(exist_ok=True)
        page.screenshot(path=str(DOCS / "guard-training.png"))

    # Snooze goes to the server
    toast.first.get_by_role("button", name="Snooze").click()
    lab.wait_for("costguard/api/alerts?include=all", lambda d: any(
        a["id"] == alert["id"] and a["state"] == "snoozed" for a in d["alerts"]), timeout=15)
