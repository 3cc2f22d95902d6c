"""The documentation site (docs/) builds with Sphinx, warnings as errors, as a reader would
build it (`sphinx-build -W --keep-going -b html docs <out>`), and its two generated
references cover the code: every configurable traitlet of the server extension and of the
hub service is on the configuration page, and every operation of both OpenAPI documents on
the REST pages. An option or a route added without its help or its description still
appears, and one that is gone disappears, because the pages are generated at build time."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once for this file in a fresh Sphinx process."""
    pytest.importorskip("sphinx", reason="the docs extra (pip install '.[docs]')")
    out = tmp_path_factory.mktemp("docs") / "html"
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         str(DOCS), str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"the docs do not build cleanly:\n{done.stderr[-6000:]}"
    assert "WARNING" not in done.stderr, done.stderr[-6000:]
    return out


def ids_in(page: Path) -> set[str]:
    return set(re.findall(r'\bid="([^"]+)"', page.read_text()))


def slug(*parts: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", "-".join(parts).lower()).strip("-")


def costguard_traits() -> dict[str, set[str]]:
    """Config section -> the configurable traits costguard adds to its base application."""
    from jupyter_server.extension.application import ExtensionApp
    from traitlets.config import Application

    from jupyter_costguard.app import COMPONENTS, CostGuard
    from jupyter_costguard.hub.app import CostGuardHub

    return {
        "CostGuard": set(CostGuard.class_traits(config=True))
        - set(ExtensionApp.class_traits(config=True)),
        **{cls.__name__: set(cls.class_traits(config=True)) for cls in COMPONENTS},
        "CostGuardHub": set(CostGuardHub.class_traits(config=True))
        - set(Application.class_traits(config=True)),
    }


def test_every_option_is_in_the_configuration_reference(site: Path) -> None:
    page = site / "admin" / "configuration.html"
    ids, text = ids_in(page), page.read_text()
    traits = costguard_traits()
    assert len(traits["CostGuard"]) > 15 and len(traits["CostGuardHub"]) > 20
    missing = [f"c.{section}.{name}" for section, names in sorted(traits.items())
               for name in sorted(names)
               if slug(section, name) not in ids or f"c.{section}.{name}" not in text]
    assert not missing, f"options missing from the configuration reference: {missing}"


@pytest.mark.parametrize("document, page, prefix", [
    ("jupyter_costguard/web/openapi.yaml", "reference/rest-server.html", "server"),
    ("jupyter_costguard/hub/openapi.yaml", "reference/rest-hub.html", "hub"),
])
def test_every_operation_is_in_the_rest_reference(site: Path, document: str, page: str,
                                                  prefix: str) -> None:
    spec = yaml.safe_load((ROOT / document).read_text())
    html = (site / page).read_text()
    ids = ids_in(site / page)
    titles = set(re.findall(r"<h2>(.*?)<a class=\"headerlink\"", html))
    operations = [(method.upper(), path) for path, ops in spec["paths"].items()
                  for method in ops if method in ("get", "put", "post", "delete", "patch")]
    assert operations
    missing = [f"{m} {p}" for m, p in operations
               if slug(prefix, m, p) not in ids or f"{m} {p}" not in titles]
    assert not missing, f"operations of {document} missing from {page}: {missing}"
    for name in spec.get("components", {}).get("schemas", {}):
        assert slug(prefix, "schema", name) in ids, name


def test_every_figure_file_in_docs_is_shown_or_named() -> None:
    """The real-browser screenshots kept in docs/ are each shown by a page or README, or
    named by the browser test that makes it: none is left behind by a move."""
    pages = "".join(p.read_text() for p in [ROOT / "README.md", *DOCS.rglob("*.md")])
    tests = "".join(p.read_text() for p in (ROOT / "tests").rglob("*.py"))
    orphans = [png.name for png in sorted(DOCS.glob("*.png"))
               if png.name not in pages and png.name not in tests]
    assert not orphans, orphans
