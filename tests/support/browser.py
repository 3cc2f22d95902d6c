"""What the browser tests share: Debian's Chromium through Playwright's sync API, a
JupyterLab settings folder without the news prompt, and screenshots for docs/."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.notebooks import code, notebook_json, write_notebook
from tests.support.server_proc import ServerProcess
from tests.support.traces import write_trace

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DOCS = Path(__file__).resolve().parents[2] / "docs"
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


@contextlib.contextmanager
def lab_server(tmp: Path, trace: Path, **costguard: Any) -> Iterator[ServerProcess]:
    """A server in its own process (notebooks under `tmp`/srv/root) playing `trace`, sampled
    every 0.5 s, with `costguard` on top and a JupyterLab that never asks about news."""
    server = ServerProcess(tmp / "srv", {
        "db_path": str(tmp / "ledger.sqlite"), "sample_interval": 0.5,
        "replay_trace": str(trace), "replay_mode": "always", **costguard},
        env=lab_settings(tmp / "lab-settings")).start()
    try:
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def idle_gpu_lab(tmp: Path) -> Iterator[ServerProcess]:
    """A server on a p4de.24xlarge with one idle GPU and local batch jobs (their state under
    `tmp`/jobs, followed every 0.2 s), serving the notebooks under `tmp`/srv/root."""
    need_browser()
    frame = {"t": 0, "gpus": [{"utilization_percent": 3, "power_watts": 70, "processes": []}]}
    trace = write_trace(tmp / "trace.json", [frame], gpus=1, instance_type="p4de.24xlarge")
    with lab_server(tmp, trace, jobs_dir=str(tmp / "jobs"), offload_poll_interval=0.2) as server:
        yield server


@contextlib.contextmanager
def jobs_lab(tmp: Path, name: str, cells: list[dict[str, Any]]) -> Iterator[ServerProcess]:
    """`idle_gpu_lab` with one notebook, `name` holding `cells`."""
    write_notebook(tmp / "srv" / "root", name, cells)
    with idle_gpu_lab(tmp) as server:
        yield server


def open_notebook(lab: ServerProcess, page: Any, path: str) -> Any:
    """Open `path` in JupyterLab and wait until its kernel has started and is idle (so a
    cell run goes through); the notebook's cells."""
    page.goto(f"{lab.url}lab/tree/{path}?token={lab.token}")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    lab.wait_for("api/sessions", lambda d: any(
        s["path"] == path and s["kernel"]["execution_state"] == "idle" for s in d), timeout=90)
    return page.locator(".jp-Notebook .jp-Cell")


def notebook(sources: list[str]) -> str:
    """A notebook of code cells c0, c1, ... holding `sources`."""
    return notebook_json([code(f"c{i}", src) for i, src in enumerate(sources)])


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
def chromium() -> Iterator[Any]:
    """A Chromium of its own (for a module's pages)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = launch(p)
        try:
            yield browser
        finally:
            browser.close()


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


def hub_form_login(pg: Any, hub: Any, user: str, landed: str) -> None:
    """`user` logs in through the Hub's own login form on the way to the costguard service's
    page (the admin with the hub's admin password, others with the users' one), and the page
    shows `landed`; otherwise the assertion says where the browser ended and what the hub
    logged. `hub` is a `tests.support.hub.Hub` or an `ExampleHub`."""
    pg.goto(hub.url + "/services/costguard/")
    pg.wait_for_selector("#username_input", timeout=30_000)
    pg.fill("#username_input", user)
    pg.fill("#password_input", hub.admin_password if user == "admin" else hub.password)
    pg.click("#login_submit")
    try:
        pg.wait_for_selector(landed, timeout=30_000)
    except Exception as e:
        raise AssertionError(f"{user} did not land on the page: {pg.url}\n"
                             f"{pg.inner_text('body')[:2000]}\n{hub.log()}") from e


def settled_box(page: Any, selector: str, timeout: float = 10.0) -> dict[str, float]:
    """`selector`'s bounding box once two reads 100 ms apart agree (after a viewport change
    JupyterLab lays out again, later on a loaded machine)."""
    deadline = time.monotonic() + timeout
    last = page.locator(selector).bounding_box()
    while time.monotonic() < deadline:
        page.wait_for_timeout(100)
        box = page.locator(selector).bounding_box()
        if box and box == last:
            return dict(box)
        last = box
    assert last, f"{selector} is not shown"
    return dict(last)


def widen_right_sidebar(page: Any, by: int = 260) -> None:
    """Drag the sidebar's split handle `by` pixels left, as a user would, until the sidebar
    really is wider (a drag that starts before the layout settled misses the handle)."""
    box = settled_box(page, "#jp-right-stack")
    start = box["width"]
    for _ in range(3):
        y = box["y"] + box["height"] / 2
        page.mouse.move(box["x"] - 2, y)
        page.mouse.down()
        page.mouse.move(box["x"] - 2 - by, y, steps=5)
        page.mouse.up()
        box = settled_box(page, "#jp-right-stack")
        if box["width"] >= start + by / 2:
            return
    raise AssertionError(f"the right sidebar stayed {start} px wide after three drags")
