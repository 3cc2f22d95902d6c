"""The release checks itself: the sdist and the wheel build, pass `twine check --strict`, carry
what a build or an install needs, and the wheel installed in a fresh environment has the server
extension and the lab extension enabled there.

Built with `python -m build --no-isolation`: the build backend comes from the test environment
(the `test` extra), so nothing is downloaded. The labextension is the one already built in the
checkout (scripts/test.sh's editable install builds it): hatch-jupyter-builder skips its npm
build while `jupyter_costguard/labextension/package.json` exists (`skip-if-exists`), so no
npm production build runs here. Where it is missing the hook would run `npm run build:prod`
(minutes), so the module says to build it first instead.

The fresh environment is a venv without the system's or the test environment's site-packages
on its own path, into which the wheel is installed with `--no-deps`; a `.pth` file then hands it
the test environment's packages for the dependencies. A truly clean install would also fetch
the dependencies (and JupyterLab, which the wheel does not depend on but `labextension list`
needs) from an index: a minute or more, and a network. What this checks is the wheel's part: its
package, its data files and its `etc/` and `share/` files land in a new prefix and Jupyter finds
them enabled there, with the checkout nowhere on the path.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILT_EXTENSION = ROOT / "jupyter_costguard" / "labextension"
NAME, LAB_NAME = "jupyter_costguard", "jupyter-costguard"

pytestmark = pytest.mark.skipif(
    not (BUILT_EXTENSION / "package.json").exists(),
    reason="the labextension is not built: `pip install -e .` or `npm run build:prod` in "
           "labextension/ first (the wheel build would otherwise run npm for minutes)")

#: what a wheel build from the sdist needs besides the package's own sources
SDIST_NEEDS = [
    "pyproject.toml", "README.md", "LICENSE",
    "jupyter-config/server-config/jupyter_costguard.json",
    "labextension/package.json", "labextension/package-lock.json", "labextension/tsconfig.json",
    "labextension/install.json", "labextension/src/index.ts",
    "jupyter_costguard/labextension/package.json",
    "jupyter_costguard/labextension/static/style.js",
    # the hub pages' built script: without it the wheel built from the sdist ran the npm build
    "jupyter_costguard/hub/static/costguard-hub.js",
]
#: the wheel's files outside the Python package: Jupyter's config and the prebuilt extension
WHEEL_DATA = [
    "etc/jupyter/jupyter_server_config.d/jupyter_costguard.json",
    f"share/jupyter/labextensions/{LAB_NAME}/package.json",
    f"share/jupyter/labextensions/{LAB_NAME}/install.json",
    f"share/jupyter/labextensions/{LAB_NAME}/static/style.js",
]


def _package_data() -> list[str]:
    """Every file of the package the code reads at run time that is not Python (the catalog,
    the API documents, the hub's page...): the tracked ones, so a new one is checked too and
    a stray local file is not."""
    r = subprocess.run(["git", "-C", str(ROOT), "ls-files", NAME], capture_output=True,
                       text=True, timeout=60)
    files = (r.stdout.split() if r.returncode == 0 and r.stdout.strip() else
             [p.relative_to(ROOT).as_posix() for p in (ROOT / NAME).rglob("*") if p.is_file()
              and "__pycache__" not in p.parts and BUILT_EXTENSION not in p.parents])
    return sorted(f for f in files if not f.endswith((".py", ".pyc")))


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("dist")
    # the sdist, then the wheel built from it (build's default): the wheel proves the sdist
    r = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out),
                        str(ROOT)], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    sdist, = out.glob("*.tar.gz")
    wheel, = out.glob("*.whl")
    return {"sdist": sdist, "wheel": wheel}


def test_twine_check_strict_passes(dists: dict[str, Path]) -> None:
    """What an index checks before it takes an upload (the long description renders, the
    metadata is complete)."""
    r = subprocess.run([sys.executable, "-m", "twine", "check", "--strict",
                        str(dists["sdist"]), str(dists["wheel"])],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("PASSED") == 2, r.stdout


def test_the_metadata_names_the_licence_and_its_text(dists: dict[str, Path]) -> None:
    with zipfile.ZipFile(dists["wheel"]) as z:
        names = z.namelist()
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: BSD-3-Clause" in meta
    assert "Author: " in meta and "Description-Content-Type: text/markdown" in meta
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)


def test_the_sdist_holds_what_a_build_from_it_needs(dists: dict[str, Path]) -> None:
    with tarfile.open(dists["sdist"]) as t:
        top = t.getnames()[0].split("/")[0]
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    missing = [n for n in SDIST_NEEDS + _package_data() if n not in names]
    assert not missing, missing
    assert not any(n.startswith("labextension/node_modules/") for n in names)
    assert top.startswith(f"{NAME}-")


def test_the_wheel_holds_the_labextension_the_data_and_the_jupyter_config(
        dists: dict[str, Path]) -> None:
    with zipfile.ZipFile(dists["wheel"]) as z:
        names = set(z.namelist())
    data = next(n.split("/")[0] for n in names if ".data/" in n)
    missing = [n for n in _package_data() if n not in names]
    missing += [n for n in WHEEL_DATA if f"{data}/data/{n}" not in names]
    assert not missing, missing
    assert "jupyter_costguard/data/catalog.csv" in names  # the shipped prices, named
    assert "jupyter_costguard/hub/static/costguard-hub.js" in names  # the hub pages' script
    assert not any(n.startswith(("tests/", "bench/", "examples/")) for n in names)


def _fresh_env(tmp: Path) -> dict[str, str]:
    """No checkout, no user or test-run Jupyter paths: only what the new prefix has."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("JUPYTER", "PYTHON", "VIRTUAL_ENV"))}
    env["HOME"] = str(tmp / "home")
    env["JUPYTER_PLATFORM_DIRS"] = "1"
    return env


def test_the_wheel_installs_with_both_extensions_enabled(
        dists: dict[str, Path], tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=60)
    py = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q",
                    "--no-deps", "--no-index", str(dists["wheel"])],
                   check=True, capture_output=True, text=True, timeout=120)
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()"
                                "['purelib'])"], capture_output=True, text=True, check=True,
                               timeout=30).stdout.strip())
    # the dependencies from the test environment, after the venv's own packages on the path
    (site / "_deps_from_test_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = _fresh_env(tmp_path)

    def run(code: str) -> str:
        r = subprocess.run([str(py), "-c", code], capture_output=True, text=True, env=env,
                           cwd=tmp_path, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        return re.sub(r"\x1b\[[0-9;]*m", "", r.stdout + r.stderr)  # no colours

    where = run("import jupyter_costguard, sys; print(jupyter_costguard.__file__)")
    assert where.strip().startswith(str(site)), where  # the wheel's copy, not the checkout

    servers = run("import sys; from jupyter_server.extension.serverextension import main; "
                  "sys.argv = ['jupyter-server-extension', 'list']; main()")
    line = next((ln for ln in servers.splitlines() if f"{NAME} " in ln and "enabled" in ln), "")
    assert line, servers
    assert str(venv / "etc" / "jupyter") in servers, servers  # from the wheel's etc/ file
    assert re.search(rf"{NAME} \S+ \S*OK", servers), servers  # it imports and validates

    labs = run("import sys; from jupyterlab.labextensions import main; "
               "sys.argv = ['jupyter-labextension', 'list']; main()")
    assert str(venv / "share" / "jupyter" / "labextensions") in labs, labs
    ext = next((ln for ln in labs.splitlines() if LAB_NAME in ln), "")
    assert "enabled" in ext and "OK" in ext and f"(python, {NAME})" in ext, labs
