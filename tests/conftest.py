"""Shared fixtures: a real Jupyter server (pytest-jupyter) with costguard loaded."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.processes import kill_runners_under
from tests.support.traces import write_trace
from tests.support.units import GiB

pytest_plugins = ["pytest_jupyter.jupyter_server"]


@pytest.fixture
def trace_file(tmp_path: Path) -> Path:
    """Kernel 0 holds 4 GiB on GPU 0 at 2% utilisation; GPU 1 sits unused."""
    frame = {"t": 0, "gpus": [
        {"utilization_percent": 2, "power_watts": 60,
         "processes": [{"kernel": 0, "used_memory_bytes": 4 * GiB}]},
        {"utilization_percent": 0, "power_watts": 50, "processes": []},
    ]}
    return write_trace(tmp_path / "trace.json", [frame])


@pytest.fixture
def costguard_config(tmp_path: Path, trace_file: Path) -> dict[str, Any]:
    return {
        "db_path": str(tmp_path / "ledger.sqlite"),
        "sample_interval": 0.25,
        "hourly_rate": 36.0,
        "gpu_share": 0.9,
        "replay_trace": str(trace_file),
        "replay_mode": "always",
        "offload_warm_kernels": 0,  # tests that want one ask for it
    }


@pytest.fixture
def jp_server_config(costguard_config: dict[str, Any]) -> dict[str, Any]:
    return {
        "ServerApp": {
            "jpserver_extensions": {"jupyter_costguard": True},
            "allow_unauthenticated_access": False,
        },
        "CostGuard": costguard_config,
    }


@pytest.fixture
def no_leftover_jobs(tmp_path: Path) -> Iterator[None]:
    """Jobs outlive their server by design; a test's must not outlive the test (modules that
    start jobs use it through `pytest.mark.usefixtures`)."""
    yield
    kill_runners_under(tmp_path)
