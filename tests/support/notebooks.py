"""Notebook documents the tests put on a server's disk."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def code(cell_id: str, source: str) -> dict[str, Any]:
    return {"id": cell_id, "cell_type": "code", "source": source, "metadata": {},
            "outputs": [], "execution_count": None}


def markdown(cell_id: str, source: str) -> dict[str, Any]:
    return {"id": cell_id, "cell_type": "markdown", "source": source, "metadata": {}}


def notebook_json(cells: list[dict[str, Any]]) -> str:
    """An nbformat 4.5 document with a Python 3 kernelspec."""
    return json.dumps({
        "nbformat": 4, "nbformat_minor": 5, "cells": cells,
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                    "language": "python"}},
    })


def write_notebook(root: Path, name: str, cells: list[dict[str, Any]]) -> Path:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(notebook_json(cells))
    return path
