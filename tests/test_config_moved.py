"""Options that moved off c.CostGuard onto their component's class: the old name still works
for a release, with one warning naming the new place; the new name, without one."""

from __future__ import annotations

import pytest
from traitlets.config import Config

from jupyter_costguard.app import CostGuard
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
