"""What the browser tests share: Debian's Chromium through Playwright's sync API, a
JupyterLab settings folder without the news prompt, and screenshots for docs/."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DOCS = Path(__file__).resolve().parent.parent / "docs"
SHOTS = os.environ.get("COSTGUARD_SCREENSHOTS") == "1"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]


def need_browser() -> None:
    """Skip where no browser can run; CI must run these tests, so fail there instead."""
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
    """Playwright's sync API runs its own loop here; pytest-jupyter's must stay out
    (these tests use a server in its own process, not pytest-jupyter's)."""
    yield None


@pytest.fixture(autouse=True)
def jp_server_cleanup() -> Iterator[None]:
    yield None


def launch(playwright: Any) -> Any:
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


def lab_settings(folder: Path) -> dict[str, str]:
    """Environment for a server whose JupyterLab never asks about news (the prompt would
    cover our notifications)."""
    target = folder / "@jupyterlab" / "apputils-extension"
    target.mkdir(parents=True, exist_ok=True)
    (target / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    return {"JUPYTERLAB_SETTINGS_DIR": str(folder)}


def notebook(cells: list[str]) -> str:
    return json.dumps({
        "cells": [{"cell_type": "code", "id": f"c{i}", "metadata": {}, "source": src,
                   "outputs": [], "execution_count": None} for i, src in enumerate(cells)],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                    "language": "python"}},
        "nbformat": 4, "nbformat_minor": 5})


def shot(page: Any, name: str, selector: str | None = None) -> None:
    if not SHOTS:
        return
    DOCS.mkdir(exist_ok=True)
    target = page.locator(selector).first if selector else page
    target.screenshot(path=str(DOCS / name))


@contextlib.contextmanager
def checked_page(browser: Any, costguard_errors_only: bool = True) -> Iterator[Any]:
    """A fresh page whose uncaught errors fail the test (by default those that name
    costguard: JupyterLab itself sometimes logs its own)."""
    context = browser.new_context(viewport={"width": 1400, "height": 860})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    try:
        yield pg
    finally:
        context.close()
    assert not [e for e in errors if not costguard_errors_only or "costguard" in e.lower()], \
        errors


@contextlib.contextmanager
def chromium_page(costguard_errors_only: bool = True) -> Iterator[Any]:
    """`checked_page` in a Chromium of its own."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = launch(p)
        try:
            with checked_page(browser, costguard_errors_only) as pg:
                yield pg
        finally:
            browser.close()
