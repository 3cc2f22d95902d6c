"""Options that moved off c.CostGuard onto their component's class: the old name still works
for a release, with one warning naming the new place; the new name, without one."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
from traitlets.config import Config, Configurable
from traitlets.config.loader import PyFileConfigLoader

from jupyter_costguard.app import COMPONENTS, CostGuard
from jupyter_costguard.offload.backends.kubernetes.traits import KubernetesBackend
from jupyter_costguard.offload.backends.local import LocalBackend
from jupyter_costguard.offload.backends.slurm import SlurmBackend


def deprecations(capsys: pytest.CaptureFixture[str]) -> list[str]:
    """The app's log (its own handler, on stderr) lines that say an option is deprecated."""
    return [line for line in capsys.readouterr().err.splitlines() if "deprecated" in line]


def test_an_old_name_works_with_one_warning_naming_the_new_place(
        capsys: pytest.CaptureFixture[str]) -> None:
    c = Config()
    c.CostGuard.slurm_partition = "gpu"
    c.CostGuard.hourly_rate = 3.0  # CostGuard's own: untouched
    app = CostGuard(config=c)
    app.update_config(c)  # read again, as linking to the server does
    app.update_config(Config({"CostGuard": {"slurm_partition": "gpu"}}))
    assert SlurmBackend(parent=app).partition == "gpu"
    assert app.hourly_rate == 3.0
    warned = deprecations(capsys)
    assert len(warned) == 1, warned
    assert "c.CostGuard.slurm_partition" in warned[0]
    assert "c.SlurmBackend.partition" in warned[0]


def test_the_new_name_warns_nothing_and_wins_over_the_old(
        capsys: pytest.CaptureFixture[str]) -> None:
    c = Config()
    c.KubernetesBackend.namespace = "new"
    app = CostGuard(config=c)
    assert KubernetesBackend(parent=app).namespace == "new"
    assert not deprecations(capsys)
    c.CostGuard.k8s_namespace = "old"
    app = CostGuard(config=c)
    assert KubernetesBackend(parent=app).namespace == "new"


def test_an_old_name_on_the_command_line_works_too(capsys: pytest.CaptureFixture[str]) -> None:
    app = CostGuard()
    app.parse_command_line(["--CostGuard.offload_warm_kernels=3"])
    assert LocalBackend(parent=app).warm_kernels == 3
    warned = deprecations(capsys)
    assert len(warned) == 1 and "c.LocalBackend.warm_kernels" in warned[0], warned


# --- every example config and docs snippet uses the new names ----------------------------

ROOT = Path(__file__).resolve().parents[1]
SECTIONS: dict[str, type[Configurable]] = {
    "CostGuard": CostGuard, **{cls.__name__: cls for cls in COMPONENTS}}
SETS_AN_OPTION = re.compile(rf"^\s*c\.({'|'.join(SECTIONS)})\.\w+", re.M)


def example_configs() -> list[tuple[str, Config]]:
    """Each example server config file, and each Python block of the docs (and READMEs)
    that sets a costguard option, loaded as the server loads a config file."""
    found: list[tuple[str, Config]] = []
    for path in sorted(ROOT.glob("examples/**/jupyter_server_config.py")):
        loader = PyFileConfigLoader(path.name, path=str(path.parent))
        found.append((str(path.relative_to(ROOT)), loader.load_config()))
    pages = sorted([*ROOT.glob("docs/**/*.md"), *ROOT.glob("examples/**/*.md"),
                    ROOT / "README.md"])
    for page in pages:
        if "_build" in page.parts:
            continue
        for i, m in enumerate(re.finditer(r"```python[^\n]*\n(.*?)```", page.read_text(),
                                          re.S)):
            if SETS_AN_OPTION.search(m.group(1)):
                c = Config()
                exec(m.group(1), {"c": c, "get_config": lambda c=c: c, "os": os, "sys": sys})
                found.append((f"{page.relative_to(ROOT)} block {i}", c))
    return found


def test_every_example_config_and_docs_snippet_uses_the_new_names(
        capsys: pytest.CaptureFixture[str]) -> None:
    configs = example_configs()
    assert len(configs) >= 8, [where for where, _ in configs]
    for where, config in configs:
        for section, cls in SECTIONS.items():
            if section in config:
                unknown = set(config[section]) - set(cls.class_trait_names(config=True))
                assert not unknown, f"{where}: c.{section} has no {sorted(unknown)}"
        app = CostGuard(config=config)
        for cls in COMPONENTS:
            cls(parent=app)
        assert not deprecations(capsys), where
