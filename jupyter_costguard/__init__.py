"""jupyter-costguard: what each GPU notebook costs, live, and how to stop paying for idle GPUs."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from jupyter_costguard._version import __version__

if TYPE_CHECKING:
    from jupyter_costguard.kernel.widget import CostWidget

__all__ = ["__version__", "load_ipython_extension", "unload_ipython_extension", "widget"]


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "jupyter-costguard"}]


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    from jupyter_costguard.app import CostGuard

    return [{"module": "jupyter_costguard", "app": CostGuard}]


# The cost widget (ipywidgets) is imported lazily: the server extension and the CLI don't need
# ipywidgets. The view polls the costguard REST API from the page (frontend polling), so it
# updates while a cell runs and never sends a kernel message; see `kernel/widget.py`.


def widget(
    notebook: str | None = None,
    refresh_seconds: float = 2.0,
    kernel_id: str | None = None,
) -> CostWidget:
    """A fresh cost widget for this kernel: spend, waste, GPU use, idle time, rate, alerts.

    `notebook` shows another notebook's spend (server-relative path); `refresh_seconds` is how
    often the view refreshes; `kernel_id` overrides the kernel found from the connection file.
    """
    from jupyter_costguard.kernel.widget import widget as make

    return make(notebook=notebook, refresh_seconds=refresh_seconds, kernel_id=kernel_id)


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext jupyter_costguard`: show the cost widget and register `%costguard`."""
    from jupyter_costguard.kernel.magics import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """`%unload_ext jupyter_costguard`: nothing to undo (the views stop polling when their
    outputs are cleared)."""


def _register_magic() -> None:
    """In an IPython kernel, ``%costguard`` is there as soon as costguard is imported (the
    notebook's first costguard cell, or the widget), with no ``%load_ext`` first. The magic's
    module (and ipywidgets) loads on its first use; elsewhere (the server) this does nothing."""
    ipython_module = sys.modules.get("IPython")
    ipython = ipython_module.get_ipython() if ipython_module is not None else None
    if ipython is None or "costguard" in ipython.magics_manager.magics.get("line", {}):
        return

    def costguard(line: str = "") -> None:
        from jupyter_costguard.kernel.magics import _costguard_magic

        _costguard_magic(line)

    costguard.__doc__ = ("%costguard [--refresh SECONDS] [--notebook PATH]: the cost widget. "
                         "%costguard fetch JOB [--dir JOBS_DIR]: load what a job brought back.")
    ipython.register_magic_function(costguard, magic_kind="line", magic_name="costguard")


_register_magic()
