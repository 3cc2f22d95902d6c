"""jupyter-costguard: what each GPU notebook costs, live, and how to stop paying for idle GPUs."""

from __future__ import annotations

from typing import Any

from ._version import __version__

__all__ = ["__version__"]


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "jupyter-costguard"}]


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    from .app import CostGuard

    return [{"module": "jupyter_costguard", "app": CostGuard}]
