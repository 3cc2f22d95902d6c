"""The documentation site (docs/) builds with Sphinx, warnings as errors, as a reader would
build it (`sphinx-build -W --keep-going -b html docs <out>`), and its two generated
references cover the code: every configurable traitlet of the server extension and of the
hub service is on the configuration page, and every operation of both OpenAPI documents on
the REST pages. An option or a route added without its help or its description still
appears, and one that is gone disappears, because the pages are generated at build time.

The site is built in a fresh venv holding only what `pip install ".[docs]"` installs (the
package's dependencies and the docs extra; the package itself is the checkout, which
docs/conf.py puts first on the path), so a module the references import that the extra does
not bring fails here rather than on a reader's machine. uv (in the test extra; pip where it is
missing) installs them, from its cache after the first run; the venv is removed once the site
is built."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

if sys.version_info >= (3, 11):
    import tomllib
else:
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def docs_requirements(pyproject: str, extra: str = "docs") -> list[str]:
    """What `pip install ".[<extra>]"` installs besides the package itself: its dependencies
    and the extra's, with an extra of the package that the extra names (`jupyter_costguard[hub]`)
    expanded in place."""
    project = tomllib.loads(pyproject)["project"]
    name = canonicalize_name(project["name"])
    extras = project.get("optional-dependencies", {})
    wanted, todo, seen = list(project.get("dependencies", [])), [extra], set()
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        for line in extras[current]:
            req = Requirement(line)
            if canonicalize_name(req.name) == name:
                todo.extend(sorted(req.extras))
            else:
                wanted.append(line)
    return wanted


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once for this file by Sphinx in a fresh venv holding only the docs
    extra's packages (the venv is removed afterwards; pip keeps its cache)."""
    work = tmp_path_factory.mktemp("docs")
    venv, out = work / "venv", work / "html"
    python = venv / "bin" / "python"
    requirements = docs_requirements((ROOT / "pyproject.toml").read_text())
    # uv (the test extra) installs them in about half pip's time; pip where it is missing
    uv = shutil.which("uv", path=Path(sys.executable).parent) or shutil.which("uv")
    if uv:
        make = [uv, "venv", "-q", str(venv)]
        install = [uv, "pip", "install", "-q", "--python", str(python), *requirements]
    else:
        make = [sys.executable, "-m", "venv", "--without-pip", str(venv)]
        install = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                   "--disable-pip-version-check", *requirements]
    subprocess.run(make, check=True, timeout=120)
    try:
        installed = subprocess.run(install, capture_output=True, text=True, timeout=420)
        assert installed.returncode == 0, (
            f"{install[0]} could not install the docs extra's packages:\n"
            f"{installed.stderr[-4000:]}")
        done = subprocess.run(
            [str(python), "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
             str(DOCS), str(out)],
            cwd=ROOT, capture_output=True, text=True, timeout=240)
    finally:
        shutil.rmtree(venv, ignore_errors=True)
    assert done.returncode == 0, f"the docs do not build cleanly:\n{done.stderr[-6000:]}"
    assert "WARNING" not in done.stderr, done.stderr[-6000:]
    return out


def test_the_docs_requirements_are_what_pip_installs_for_the_extra() -> None:
    pyproject = """
[project]
name = "Some_Pkg"
dependencies = ["a>=1"]
[project.optional-dependencies]
hub = ["b>=2"]
more = ["c", "some-pkg[hub]"]
docs = ["d", "some_pkg[more,hub]"]
"""
    assert sorted(docs_requirements(pyproject)) == ["a>=1", "b>=2", "c", "d"]
    real = docs_requirements((ROOT / "pyproject.toml").read_text())
    assert any(canonicalize_name(Requirement(r).name) == "sphinx" for r in real)


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


# the first test to ask for the site waits for the venv (pip) and the build
@pytest.mark.timeout(720)
def test_every_option_is_in_the_configuration_reference(site: Path) -> None:
    page = site / "admin" / "configuration.html"
    ids, text = ids_in(page), page.read_text()
    traits = costguard_traits()
    assert len(traits["CostGuard"]) > 15 and len(traits["CostGuardHub"]) > 20
    missing = [f"c.{section}.{name}" for section, names in sorted(traits.items())
               for name in sorted(names)
               if slug(section, name) not in ids or f"c.{section}.{name}" not in text]
    assert not missing, f"options missing from the configuration reference: {missing}"


# the first test to ask for the site waits for the venv (pip) and the build
@pytest.mark.timeout(720)
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
