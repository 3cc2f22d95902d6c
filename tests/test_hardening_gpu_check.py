"""Issue 11, item 9: the sampling package imports without jupyter_server, and bench/gpu_check.py
runs with nothing but pynvml, psutil and this repository (on a machine without an NVIDIA
driver it says so, exit status 2, no traceback).

Each check runs a fresh interpreter in which the server's packages cannot be imported (an
import hook refuses them), so a stray import anywhere in the chain fails the test.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

#: refuses these top-level packages in the child interpreter
BLOCK = """
import sys
class _Refuse:
    def __init__(self, names): self.names = set(names)
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.names:
            raise ImportError(name + " is refused here")
        return None
sys.meta_path.insert(0, _Refuse({names!r}))
sys.path.insert(0, {repo!r})
"""
SERVER_SIDE = ["jupyter_server", "jupyter_client", "tornado", "ipykernel", "nbformat",
               "nbclient", "prometheus_client"]


def _run(code: str, blocked: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    prelude = BLOCK.format(names=blocked, repo=str(REPO))
    return subprocess.run([sys.executable, "-c", prelude + code, *args], capture_output=True,
                          text=True, timeout=120, cwd="/")


def test_sampling_imports_without_the_server_and_without_traitlets() -> None:
    proc = _run("import jupyter_costguard.sampling.telemetry, jupyter_costguard.sampling.nvml, "
                "jupyter_costguard.sampling.records, jupyter_costguard.sampling.replay\n"
                "print('ok')", [*SERVER_SIDE, "traitlets"])
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_the_sources_need_traitlets_only() -> None:
    proc = _run("import jupyter_costguard.sampling.sources\nprint('ok')", SERVER_SIDE)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None
                    or Path("/proc/driver/nvidia").exists(),
                    reason="an NVIDIA driver is here: run bench/gpu_check.py itself")
def test_gpu_check_says_no_nvidia_driver_with_exit_status_2() -> None:
    script = REPO / "bench" / "gpu_check.py"
    proc = _run(f"import runpy, sys\nsys.argv = [{str(script)!r}]\n"
                f"runpy.run_path({str(script)!r}, run_name='__main__')",
                [*SERVER_SIDE, "traitlets"])
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "no NVIDIA driver" in proc.stderr
    assert "Traceback" not in proc.stderr
    # the hibernate step (issue 37) says it did not run, and why
    assert "gpu_check: hibernate step skipped: no NVIDIA driver" in proc.stdout


def test_the_hibernate_step_says_why_it_is_skipped(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    import argparse
    import runpy

    gpu_check = runpy.run_path(str(REPO / "bench" / "gpu_check.py"))
    args = argparse.Namespace(hibernate_mib=16, timeout=10.0)
    assert gpu_check["hibernate_step"](args, driver=False) == {
        "status": "skipped", "reason": "no NVIDIA driver"}
    assert capsys.readouterr().out == "gpu_check: hibernate step skipped: no NVIDIA driver\n"

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "torch" else real(name, *a))
    step = gpu_check["hibernate_step"](args, driver=True)  # a driver, but no torch
    assert step == {"status": "skipped", "reason": "torch is not installed"}
    assert "hibernate step skipped: torch is not installed" in capsys.readouterr().out


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None,
                    reason="torch is here: the step goes on past the probe")
def test_the_hibernate_step_asks_a_real_kernel_for_torch_and_skips_without_it() -> None:
    import argparse
    import runpy

    gpu_check = runpy.run_path(str(REPO / "bench" / "gpu_check.py"))
    args = argparse.Namespace(hibernate_mib=16, timeout=10.0)
    with pytest.raises(gpu_check["_Skip"], match="torch is not importable in the kernel"):
        gpu_check["_hibernate"](args)
