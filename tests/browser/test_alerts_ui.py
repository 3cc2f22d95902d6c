"""Alerts readable, in a real Chromium against a real server: an alert with a long message
shows its whole text, wrapping, in the toast and in the notification centre (JupyterLab cuts
messages at 140 characters; costguard's notifications are shown whole), its buttons each fit
on one line, and the cost panel's Alerts section lists it with its actions; dismissing it
there hides it, and "Show dismissed" brings it back greyed as dismissed, as the REST API
says. COSTGUARD_SCREENSHOTS=1 saves docs/alerts-toast.png and docs/alerts-panel.png."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_costguard.guard import training
from tests.support.browser import chromium_page, lab_server, need_browser, notebook, shot
from tests.support.server_proc import ServerProcess
from tests.support.traces import write_trace

pytestmark = pytest.mark.timeout(300)

TITLE = "GPU idle while the notebook is open"
LAST_WORD = "checkpoint-resume."
MESSAGE = (
    "explore.ipynb holds 6 GiB on GPU 0 of this p4de.24xlarge and the GPU has been below 3% "
    "for the last 45 minutes, which wastes about USD 38.40 per hour; save your work and shut "
    "the kernel down, or offload the training cells to a batch job with " + LAST_WORD)

# What the page measures of one element: does its text fit (no clipping, no ellipsis, no
# cut), on how many lines does it sit, and is its last word on screen and not covered.
MEASURE = """(node) => {
  const style = getComputedStyle(node);
  const range = document.createRange();
  range.selectNodeContents(node);
  const tops = new Set(Array.from(range.getClientRects())
    .filter(r => r.width > 0).map(r => Math.round(r.top)));
  let lastWord = null;
  const walker = document.createTreeWalker(node, NodeFilter.SHOW_TEXT);
  let text = null;
  while (walker.nextNode()) {
    if (walker.currentNode.nodeValue.trim()) { text = walker.currentNode; }
  }
  if (text) {
    const value = text.nodeValue.replace(/\\s+$/, '');
    const start = value.lastIndexOf(' ') + 1;
    const word = document.createRange();
    word.setStart(text, start);
    word.setEnd(text, value.length);
    const r = word.getBoundingClientRect();
    const box = node.getBoundingClientRect();
    const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
    lastWord = {
      text: value.slice(start),
      inside: r.left >= box.left - 1 && r.right <= box.right + 1 &&
              r.top >= box.top - 1 && r.bottom <= box.bottom + 1,
      onScreen: r.top >= 0 && r.bottom <= innerHeight && r.left >= 0 && r.right <= innerWidth,
      uncovered: hit !== null && node.contains(hit),
    };
  }
  return {
    text: node.textContent,
    scrollWidth: node.scrollWidth, clientWidth: node.clientWidth,
    scrollHeight: node.scrollHeight, clientHeight: node.clientHeight,
    height: node.getBoundingClientRect().height,
    fontSize: parseFloat(style.fontSize),
    textOverflow: style.textOverflow, lines: tops.size, lastWord,
  };
}"""


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[ServerProcess]:
    need_browser()
    frame = {"t": 0, "gpus": [{"utilization_percent": 2, "power_watts": 70, "processes": []}]}
    trace = write_trace(tmp_path / "trace.json", [frame], gpus=1, instance_type="p4de.24xlarge")
    root = tmp_path / "srv" / "root"
    root.mkdir(parents=True)
    (root / "explore.ipynb").write_text(notebook(["1 + 1"]))
    with lab_server(tmp_path, trace) as server:
        yield server


@pytest.fixture
def page(lab: ServerProcess) -> Iterator[Any]:
    # checked_page's 1400x860 viewport; any uncaught error fails (we touch React's DOM)
    with chromium_page(costguard_errors_only=False) as pg:
        yield pg


def settle(node: Any) -> None:
    """Wait until a toast has slid in: on screen, not moving."""
    node.evaluate("""n => new Promise(resolve => {
      let last = null;
      const tick = () => {
        const r = n.getBoundingClientRect();
        const here = [r.left, r.top, r.width, r.height].map(Math.round).join();
        if (here === last && r.right <= innerWidth && r.bottom <= innerHeight) { resolve(); }
        else { last = here; setTimeout(tick, 100); }
      };
      tick();
    })""")


def assert_whole_message(message: Any) -> None:
    settle(message)
    m = message.evaluate(MEASURE)
    assert MESSAGE.split(" ")[-1] in m["text"] and not m["text"].endswith("…"), m["text"]
    assert TITLE in m["text"] and MESSAGE in m["text"].replace(TITLE, "", 1), m["text"]
    assert m["scrollWidth"] <= m["clientWidth"], m
    assert m["scrollHeight"] <= m["clientHeight"] + 1, m
    assert m["textOverflow"] != "ellipsis", m
    assert m["lines"] >= 3, m  # it wraps
    assert m["lastWord"]["text"] == LAST_WORD, m
    assert m["lastWord"]["inside"] and m["lastWord"]["onScreen"], m
    assert m["lastWord"]["uncovered"], m


def assert_buttons_fit(buttons: Any, expected: list[str]) -> None:
    assert [b.strip() for b in buttons.all_inner_texts()] == expected
    for i in range(buttons.count()):
        m = buttons.nth(i).evaluate(MEASURE)
        assert m["lines"] == 1, m  # "Snooze" never breaks into "Snooz/e"
        assert m["scrollWidth"] <= m["clientWidth"], m
        assert m["height"] < 2.2 * m["fontSize"] + 12, m  # about one line tall


def raise_alert(lab: ServerProcess) -> str:
    code, body = lab.request("costguard/api/alerts", "POST", {
        "kind": "test", "key": "readable", "severity": "warning", "notebook": "explore.ipynb",
        "title": TITLE, "message": MESSAGE,
        "actions": [{"id": "open-panel", "label": "Open cost panel"},
                    {"id": "snooze", "label": "Snooze"},
                    {"id": "dismiss", "label": "Dismiss"}]})
    assert code == 201, body
    return str(json.loads(body)["id"])


def test_alert_text_is_whole_and_the_panel_lists_it(lab: ServerProcess, page: Any) -> None:
    assert len(MESSAGE) > 180
    page.goto(f"{lab.url}lab/tree/explore.ipynb?token={lab.token}")
    page.wait_for_selector(".jp-Notebook", timeout=60_000)
    page.locator("#jp-costguard-status .jp-costguard-notebook").wait_for(timeout=60_000)
    alert_id = raise_alert(lab)
    buttons = ["Open cost panel", "Snooze 1 h", "Dismiss"]

    # the toast: the whole text, wrapping; buttons one line each
    ours = f'.Toastify__toast[data-costguard-alert="{alert_id}"]'
    toast = page.locator(f"#react-toastify-container {ours}")
    toast.wait_for(timeout=30_000)
    assert_whole_message(toast.locator(".jp-toast-message"))
    assert_buttons_fit(toast.locator(".jp-toast-button"), buttons)
    shot(page, "alerts-toast.png", ours)

    # the notification centre: the same
    page.locator(".jp-Notification-Status").click()
    item = page.locator(f".jp-Notification-List {ours}")
    item.wait_for(timeout=10_000)
    toast.wait_for(state="detached", timeout=10_000)  # JupyterLab hides the toasts
    assert_whole_message(item.locator(".jp-toast-message"))
    assert_buttons_fit(item.locator(".jp-toast-button"), buttons)
    page.locator(".jp-Notification-Status").click()  # close it again
    item.wait_for(state="detached", timeout=10_000)

    # the cost panel's Alerts section, at the default sidebar width
    page.locator("#jp-costguard-status").click()
    panel = page.locator("#jp-costguard-panel")
    panel.wait_for(state="visible", timeout=10_000)
    section = panel.locator(".jp-costguard-alerts-section")
    row = section.locator(f'.jp-costguard-alert-row[data-alert-id="{alert_id}"]')
    row.wait_for(timeout=15_000)
    assert row.get_attribute("data-state") == "active"
    assert row.get_attribute("data-severity") == "warning"
    count = re.fullmatch(r"alerts \((\d+)\)",
                         section.locator(".jp-costguard-alerts-title").inner_text().strip().lower())
    assert count and int(count.group(1)) >= 1, count
    m = row.locator(".jp-costguard-alert-message").evaluate(MEASURE)
    assert m["text"] == MESSAGE and m["lines"] >= 3, m
    assert m["scrollWidth"] <= m["clientWidth"], m
    assert m["lastWord"]["text"] == LAST_WORD and m["lastWord"]["inside"], m
    assert "explore.ipynb" in row.locator(".jp-costguard-alert-notebook").inner_text()
    assert "ago" in row.locator(".jp-costguard-alert-age").inner_text()
    assert_buttons_fit(row.locator("button[data-alert-action]"), buttons)
    assert [row.locator("button[data-alert-action]").nth(i).get_attribute("data-alert-action")
            for i in range(3)] == ["open-panel", "snooze", "dismiss"]
    width = section.evaluate("s => [s.scrollWidth, s.clientWidth, s.getBoundingClientRect().width]")
    assert width[0] <= width[1] and width[2] <= 400, width  # fits the sidebar
    shot(page, "alerts-panel.png", "#jp-costguard-panel .jp-costguard-alerts-section")

    # Dismiss in the section: gone from the list and from the server's active alerts
    row.locator('button[data-alert-action="dismiss"]').click()
    row.wait_for(state="detached", timeout=15_000)
    section.locator(".jp-costguard-alerts-empty", has_text="No active alerts").wait_for(
        state="visible", timeout=10_000)
    lab.wait_for("costguard/api/alerts",
                 lambda d: all(a["id"] != alert_id for a in d["alerts"]), timeout=15)

    # Show dismissed: back, greyed, dismissed; the REST API agrees
    section.locator("input.jp-costguard-alerts-show-dismissed").check()
    page.locator(f'.jp-costguard-alert-row[data-alert-id="{alert_id}"][data-state="dismissed"]'
                 ).wait_for(timeout=15_000)
    assert "jp-mod-inactive" in (row.get_attribute("class") or "")
    assert "dismissed" in row.locator(".jp-costguard-alert-state").inner_text()
    assert float(row.evaluate("r => getComputedStyle(r).opacity")) < 1
    assert row.locator("button[data-alert-action]").count() == 0
    listed = lab.get("costguard/api/alerts?include=all")["alerts"]
    assert [a["state"] for a in listed if a["id"] == alert_id] == ["dismissed"]
    # no toast came back for it
    assert page.locator(ours).count() == 0

    section.locator("input.jp-costguard-alerts-show-dismissed").uncheck()
    row.wait_for(state="detached", timeout=10_000)


def test_the_training_alerts_buttons_sit_on_one_row(lab: ServerProcess, page: Any) -> None:
    """The guard's own training-sized alert, as a new user sees it at 1400x900: "Offload heavy
    cells", "Cost panel" and "Snooze 1 h" side by side, none wrapped onto a row of its own."""
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(f"{lab.url}lab/tree/explore.ipynb?token={lab.token}")
    page.wait_for_selector(".jp-Notebook", timeout=60_000)
    page.locator("#jp-costguard-status .jp-costguard-notebook").wait_for(timeout=60_000)
    code, body = lab.request("costguard/api/alerts", "POST", {
        "kind": "test", "key": "training", "severity": "warning", "notebook": "explore.ipynb",
        "title": training.TITLE, "message": MESSAGE, "actions": list(training.ACTIONS)})
    assert code == 201, body
    ours = f'.Toastify__toast[data-costguard-alert="{json.loads(body)["id"]}"]'
    toast = page.locator(f"#react-toastify-container {ours}")
    toast.wait_for(timeout=30_000)
    settle(toast)
    assert_one_row(toast)

    # the notification centre shows it with the same buttons, on one row too
    page.locator(".jp-Notification-Status").click()
    item = page.locator(f".jp-Notification-List {ours}")
    item.wait_for(timeout=10_000)
    assert_one_row(item)


def assert_one_row(toast: Any) -> None:
    """The training alert's buttons, whole, side by side in the server's order, inside."""
    buttons = toast.locator(".jp-toast-button")
    assert_buttons_fit(buttons, ["Offload heavy cells", "Cost panel", "Snooze 1 h"])
    boxes = [buttons.nth(i).bounding_box() for i in range(buttons.count())]
    assert len({round(b["y"]) for b in boxes}) == 1, boxes  # one row
    assert boxes == sorted(boxes, key=lambda b: b["x"]), boxes  # in the server's order
    box = toast.bounding_box()
    assert min(b["x"] for b in boxes) >= box["x"], (boxes, box)  # inside the toast
    assert max(b["x"] + b["width"] for b in boxes) <= box["x"] + box["width"], (boxes, box)


def test_a_toast_shows_its_alerts_latest_figures(lab: ServerProcess, page: Any) -> None:
    """The demo showed "88% idle, ~10.88 USD/h" in a toast beside "98%, ~12.11 USD/h" in the
    panel for the same alert: the toast kept the figures it was raised with. Raised again
    with new figures (the same condition: the same alert), the toast on screen shows them in
    place, dated, and the panel's row says the same."""
    page.goto(f"{lab.url}lab/tree/explore.ipynb?token={lab.token}")
    page.wait_for_selector(".jp-Notebook", timeout=60_000)
    page.locator("#jp-costguard-status .jp-costguard-notebook").wait_for(timeout=60_000)

    def raise_figures(message: str) -> str:
        code, body = lab.request("costguard/api/alerts", "POST", {
            "kind": "test", "key": "figures", "severity": "warning",
            "notebook": "explore.ipynb", "title": "Idle GPU", "message": message,
            "actions": [{"id": "dismiss", "label": "Dismiss"}]})
        assert code in (200, 201), body
        return str(json.loads(body)["id"])

    alert_id = raise_figures("88% idle, ~10.88 USD/h, averaged 19%")
    ours = f'.Toastify__toast[data-costguard-alert="{alert_id}"]'
    toast = page.locator(f"#react-toastify-container {ours}")
    toast.wait_for(timeout=30_000)
    assert "88% idle" in toast.inner_text() and "as of" in toast.inner_text()
    assert raise_figures("98% idle, ~12.11 USD/h, averaged 3%") == alert_id
    toast.locator(".jp-toast-message", has_text="98% idle").wait_for(timeout=30_000)
    text = toast.inner_text()
    assert "88% idle" not in text and "as of" in text, text
    assert page.locator("#react-toastify-container .Toastify__toast",
                        has_text="Idle GPU").count() == 1

    page.locator("#jp-costguard-status").click()
    row = page.locator(f'#jp-costguard-panel .jp-costguard-alert-row[data-alert-id="{alert_id}"]')
    row.wait_for(timeout=15_000)
    assert row.locator(".jp-costguard-alert-message").inner_text().strip() == \
        "98% idle, ~12.11 USD/h, averaged 3%"
