"""The in-notebook cost widget's Python side, in-process and in a real ipykernel.

The view (labextension/src/costwidget-view.ts) polls the REST API from the page; here we check
what the kernel side owes it: the traits, the kernel id found from the connection file, the
fallback text, `%load_ext jupyter_costguard` and `%costguard`.
"""

from __future__ import annotations

import json
import os
import queue
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import jupyter_costguard
from jupyter_costguard.kernel.widget import (
    FALLBACK_TEXT,
    MODULE_NAME,
    MODULE_VERSION,
    CostWidget,
    kernel_id_from_connection_file,
)

ROOT = Path(__file__).resolve().parents[1]
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def _semver(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("-")[0].split("."))


def _caret_allows(caret: str, version: str) -> bool:
    """npm's `^x.y.z` semantics, enough for our versions."""
    assert caret.startswith("^")
    want, have = _semver(caret[1:]), _semver(version)
    if have < want:
        return False
    if want[0] > 0:
        return have[0] == want[0]
    if want[1] > 0:
        return have[:2] == want[:2]
    return have == want


def test_module_matches_the_npm_package():
    pkg = json.loads((ROOT / "labextension" / "package.json").read_text())
    assert MODULE_NAME == pkg["name"] == "jupyter-costguard"
    assert _caret_allows(MODULE_VERSION, pkg["version"])
    w = CostWidget()
    try:
        assert w._model_module == w._view_module == MODULE_NAME
        assert w._model_module_version == w._view_module_version == MODULE_VERSION
        assert (w._model_name, w._view_name) == ("CostWidgetModel", "CostWidgetView")
    finally:
        w.close()


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/run/user/1000/jupyter/runtime/kernel-3f1c-44aa.json", "3f1c-44aa"),
        ("kernel-0b6d2a36-9e42-4d2c-a1d0-6a4c1c8d4c2e.json",
         "0b6d2a36-9e42-4d2c-a1d0-6a4c1c8d4c2e"),
        ("/tmp/tmpab12cd.json", ""),
        ("", ""),
    ],
)
def test_kernel_id_from_connection_file(path: str, expected: str):
    assert kernel_id_from_connection_file(path) == expected


def test_outside_a_kernel_traits_and_fallback_text():
    w = jupyter_costguard.widget()
    other = jupyter_costguard.widget(notebook="dir/a.ipynb", refresh_seconds=5, kernel_id="k1")
    try:
        assert isinstance(w, CostWidget)
        assert w.kernel_id == ""  # no kernel here; the view falls back to its manager's kernel
        assert w.refresh_seconds == 2.0
        assert w.notebook is None
        assert (other.kernel_id, other.notebook, other.refresh_seconds) == ("k1", "dir/a.ipynb", 5)
        assert w.model_id != other.model_id  # a fresh widget each call
        bundle = w._repr_mimebundle_()
        assert bundle["text/plain"] == FALLBACK_TEXT
        assert bundle[WIDGET_VIEW]["model_id"] == w.model_id
        state = w.get_state()
        for name in ("kernel_id", "refresh_seconds", "notebook"):
            assert name in state
    finally:
        w.close()
        other.close()


def test_refresh_is_validated():
    from traitlets import TraitError

    w = CostWidget(refresh_seconds=0.1)
    try:
        assert w.refresh_seconds == 0.5
        with pytest.raises(TraitError):
            w.refresh_seconds = 0
    finally:
        w.close()


def test_widget_name_is_callable_whichever_import_came_first():
    import importlib

    module = importlib.import_module("jupyter_costguard.kernel.widget")
    # Importing the widget module leaves the package's `widget` function as it was.
    w = jupyter_costguard.widget(kernel_id="abc")
    v = module.widget(kernel_id="def")
    try:
        assert (w.kernel_id, v.kernel_id) == ("abc", "def")
    finally:
        w.close()
        v.close()


# --- a real kernel -------------------------------------------------------------------------


class Kernel:
    def __init__(self, km: Any, kc: Any) -> None:
        self.km = km
        self.kc = kc

    @property
    def kernel_id(self) -> str:
        return str(self.km.kernel_id)

    def run(self, code: str, timeout: float = 60) -> list[dict[str, Any]]:
        """Execute `code`; return this request's iopub messages (after checking it ran)."""
        msgs: list[dict[str, Any]] = []
        reply = self.kc.execute_interactive(
            code, output_hook=msgs.append, timeout=timeout, allow_stdin=False
        )
        content = reply["content"]
        assert content["status"] == "ok", content
        return msgs


def _stdout(msgs: list[dict[str, Any]]) -> str:
    return "".join(
        m["content"]["text"] for m in msgs
        if m["msg_type"] == "stream" and m["content"]["name"] == "stdout"
    )


def _stderr(msgs: list[dict[str, Any]]) -> str:
    return "".join(
        m["content"]["text"] for m in msgs
        if m["msg_type"] == "stream" and m["content"]["name"] == "stderr"
    )


def _widget_displays(msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        m["content"]["data"] for m in msgs
        if m["msg_type"] == "display_data" and WIDGET_VIEW in m["content"]["data"]
    ]


def _comm_opens(msgs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        m["content"]["comm_id"]: m["content"] for m in msgs if m["msg_type"] == "comm_open"
    }


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kernel]:
    from jupyter_client.manager import KernelManager

    runtime = tmp_path_factory.mktemp("runtime")
    kernel_id = str(uuid.uuid4())
    # Named as the Jupyter server's kernel manager names it.
    km = KernelManager(
        kernel_name="python3", connection_file=str(runtime / f"kernel-{kernel_id}.json")
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    km.start_kernel(kernel_id=kernel_id, env=env, cwd=str(runtime))
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        yield Kernel(km, kc)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_real_kernel_finds_its_own_id(kernel: Kernel):
    assert kernel.kernel_id
    msgs = kernel.run(
        "import jupyter_costguard; w = jupyter_costguard.widget(); "
        "print(w.kernel_id, w._model_module, w._view_name)"
    )
    assert _stdout(msgs).split() == [kernel.kernel_id, "jupyter-costguard", "CostWidgetView"]


def test_load_ext_displays_a_widget_whose_model_exists(kernel: Kernel):
    msgs = kernel.run("%load_ext jupyter_costguard")
    assert not _stderr(msgs)
    displays = _widget_displays(msgs)
    assert len(displays) == 1
    data = displays[0]
    assert data["text/plain"] == FALLBACK_TEXT
    model_id = data[WIDGET_VIEW]["model_id"]
    opens = _comm_opens(msgs)
    assert model_id in opens  # the frontend got the model before the view
    comm = opens[model_id]
    assert comm["target_name"] == "jupyter.widget"
    state = comm["data"]["state"]
    assert state["_model_name"] == "CostWidgetModel"
    assert state["_view_name"] == "CostWidgetView"
    assert state["_model_module"] == state["_view_module"] == "jupyter-costguard"
    assert state["_model_module_version"] == MODULE_VERSION
    assert state["kernel_id"] == kernel.kernel_id
    assert state["refresh_seconds"] == 2.0
    assert state["notebook"] is None
    # ... and the kernel still knows it.
    check = kernel.run(
        "from ipywidgets import Widget\n"
        f"print(type(Widget.widgets[{model_id!r}]).__name__)"
    )
    assert _stdout(check).strip() == "CostWidget"


def test_costguard_magic_displays_another(kernel: Kernel):
    first = kernel.run("%load_ext jupyter_costguard")  # already loaded: no second widget
    assert not _widget_displays(first)

    msgs = kernel.run("%costguard")
    displays = _widget_displays(msgs)
    assert len(displays) == 1
    model_id = displays[0][WIDGET_VIEW]["model_id"]
    assert _comm_opens(msgs)[model_id]["data"]["state"]["kernel_id"] == kernel.kernel_id

    again = kernel.run("%costguard --refresh 5 --notebook=work/train.ipynb")
    (data,) = _widget_displays(again)
    other_id = data[WIDGET_VIEW]["model_id"]
    assert other_id != model_id
    state = _comm_opens(again)[other_id]["data"]["state"]
    assert (state["refresh_seconds"], state["notebook"]) == (5.0, "work/train.ipynb")

    bad = kernel.run("%costguard --bogus")
    assert not _widget_displays(bad)
    assert "usage: %costguard" in _stderr(bad)


def test_widget_sends_nothing_after_display(kernel: Kernel):
    """The kernel side is passive: no thread, no periodic message once displayed."""
    kernel.run("w2 = jupyter_costguard.widget(refresh_seconds=0.5); display(w2)")
    kernel.run("import time; time.sleep(1.5)")
    leftovers: list[dict[str, Any]] = []
    while True:
        try:
            leftovers.append(kernel.kc.get_iopub_msg(timeout=0.5))
        except queue.Empty:
            break
    assert not [m for m in leftovers if m["msg_type"] in ("comm_msg", "stream", "display_data")]
    threads = kernel.run(
        "import threading; print(sorted(t.name for t in threading.enumerate()"
        " if 'costguard' in t.name.lower()))"
    )
    assert _stdout(threads).strip() == "[]"
