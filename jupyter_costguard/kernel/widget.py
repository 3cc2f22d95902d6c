"""The in-notebook cost widget (ipywidgets 8).

``%load_ext jupyter_costguard`` displays one under the cell, ``%costguard`` displays another
(both in `kernel.magics`), and ``jupyter_costguard.widget()`` returns a fresh one. It shows this
notebook's spend and waste, this kernel's GPU utilisation and memory, idle time, the instance
rate, the active alert for the notebook, the notebook's snapshot still to restore ("Hibernated at
14:02 · 3.2 GiB · 42 variables", the banner's words), and a "simulated" label when the figures
are replayed.

Mechanism: frontend polling. This class only creates the widget model and syncs a few traits
(``kernel_id``, ``refresh_seconds``, ``notebook``). The view in the page
(``labextension/src/costwidget.ts``, module ``jupyter-costguard``) polls the costguard
REST API itself through the Jupyter server (``ServerConnection.makeRequest`` on a lumino
``Poll``), every ``refresh_seconds``. So:

- it keeps updating while a long cell runs in this kernel (a busy kernel can't answer comm
  messages, the server still answers HTTP);
- it never sends a kernel message, so it never resets the kernel's idle timers;
- nothing runs in a thread here, and nothing prints or writes to an ``Output`` widget.

The kernel side's only job is to say which kernel it is: ``kernel_id`` comes from ipykernel's
connection file, which the Jupyter server names ``kernel-<id>.json``. (The view also knows its
widget manager's kernel, and uses that when ``kernel_id`` is empty or not listed.)
"""

from __future__ import annotations

import os
import re
from typing import Any

from ipywidgets import DOMWidget
from traitlets import Float, TraitError, Unicode, validate

#: The npm package (widget module) the view lives in.
MODULE_NAME = "jupyter-costguard"
#: Semver range of the widget module; matches labextension/package.json's version.
MODULE_VERSION = "^0.1.0"
#: What a front end without the ipywidgets manager shows instead of the widget.
FALLBACK_TEXT = "costguard widget: open in JupyterLab or Notebook 7 to see live spend"

_CONNECTION_FILE = re.compile(r"^kernel-(?P<id>.+)\.json$")


def kernel_id_from_connection_file(path: str) -> str:
    """The kernel id in a connection file name (``kernel-<id>.json``), else ``""``."""
    match = _CONNECTION_FILE.match(os.path.basename(path or ""))
    return match.group("id") if match else ""


def current_kernel_id() -> str:
    """The id of the kernel this code runs in, or ``""`` outside a kernel."""
    try:
        from ipykernel.connect import get_connection_file

        return kernel_id_from_connection_file(get_connection_file())
    except Exception:  # not in a kernel, no ipykernel, unreadable config: no id
        return ""


class CostWidget(DOMWidget):
    """Live spend of this notebook and its kernel; see the module docstring."""

    _model_name = Unicode("CostWidgetModel").tag(sync=True)
    _model_module = Unicode(MODULE_NAME).tag(sync=True)
    _model_module_version = Unicode(MODULE_VERSION).tag(sync=True)
    _view_name = Unicode("CostWidgetView").tag(sync=True)
    _view_module = Unicode(MODULE_NAME).tag(sync=True)
    _view_module_version = Unicode(MODULE_VERSION).tag(sync=True)

    kernel_id = Unicode(
        "", help="Id of the kernel to show (the Jupyter server's); found from the connection file."
    ).tag(sync=True)
    refresh_seconds = Float(
        2.0, help="Seconds between refreshes of the view (at least 0.5)."
    ).tag(sync=True)
    notebook = Unicode(
        None,
        allow_none=True,
        help="Server-relative notebook path to show instead of the kernel's own notebook.",
    ).tag(sync=True)

    def __init__(self, **kwargs: Any) -> None:
        if not kwargs.get("kernel_id"):
            kwargs["kernel_id"] = current_kernel_id()
        super().__init__(**kwargs)

    @validate("refresh_seconds")
    def _valid_refresh(self, proposal: dict[str, Any]) -> float:
        value = float(proposal["value"])
        if not value > 0:
            raise TraitError(f"refresh_seconds must be positive, not {value!r}")
        return max(0.5, value)

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any] | None:
        data: dict[str, Any] | None = super()._repr_mimebundle_(**kwargs)
        if data is not None:
            data["text/plain"] = FALLBACK_TEXT
        return data


def widget(
    notebook: str | None = None,
    refresh_seconds: float = 2.0,
    kernel_id: str | None = None,
) -> CostWidget:
    """A fresh cost widget for this kernel (display it, or leave it last in a cell)."""
    kwargs: dict[str, Any] = {"notebook": notebook, "refresh_seconds": refresh_seconds}
    if kernel_id:
        kwargs["kernel_id"] = kernel_id
    return CostWidget(**kwargs)
