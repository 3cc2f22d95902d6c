"""Sphinx configuration of costguard's documentation: MyST Markdown pages with the PyData
theme, as jupyter_server and JupyterHub do. Two small extensions in docs/_ext generate the
configuration reference (from the traitlets) and the REST reference (from the OpenAPI
documents) at build time. No intersphinx and no link check: the build needs no network and
runs in the test suite with warnings as errors (tests/test_docs_build.py)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(HERE.parent))  # the package the references are generated from

project = "jupyter-costguard"
author = "jupyter-costguard contributors"
copyright = "jupyter-costguard contributors"

extensions = ["myst_parser", "cg_config", "cg_openapi"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "**/.ipynb_checkpoints"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 4


html_theme = "pydata_sphinx_theme"
html_title = "jupyter-costguard"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": [],
    "footer_end": [],
}
html_static_path: list[str] = []
html_show_sourcelink = False
