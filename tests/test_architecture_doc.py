"""docs/architecture.md names every package and module of `jupyter_costguard/`, so the table a
newcomer reads first matches the tree (a module added, moved or renamed without its row fails
here)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "jupyter_costguard"
DOC = (ROOT / "docs" / "architecture.md").read_text()


def _modules() -> list[tuple[str, str]]:
    """(package folder relative to jupyter_costguard, module name) for every module."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.name in ("__init__.py", "__main__.py", "_version.py") or "labextension" in rel.parts:
            continue
        out.append(("/".join(rel.parts[:-1]), rel.stem))
    return out


def test_every_package_has_a_row():
    packages = {p for p, _ in _modules() if p}
    missing = [p for p in sorted(packages) if f"`{p}/`" not in DOC
               and f"`{p.rsplit('/', 1)[-1]}/`" not in DOC]
    assert not missing, f"docs/architecture.md has no row for {missing}"


def test_every_module_is_named():
    missing = []
    for package, module in _modules():
        names = {f"`{module}`", f"`{module}.py`", f"`{package}/{module}`",
                 f"`{package}/{module}.py`", f"`{module}` (", f"`{package}.{module}"}
        if not any(n in DOC for n in names):
            missing.append(f"{package}/{module}" if package else module)
    assert not missing, f"docs/architecture.md does not name {missing}"


def test_the_doc_names_no_module_that_is_gone():
    """Every `pkg/module.py`-style path the doc names exists."""
    gone = [m for m in re.findall(r"`((?:[a-z_]+/)+[a-z_]+\.py)`", DOC)
            if not (PACKAGE / m).exists() and not (ROOT / m).exists()]
    assert not gone, f"docs/architecture.md names files that do not exist: {gone}"
