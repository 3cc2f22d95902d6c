"""Shared fixtures: a real Jupyter server (pytest-jupyter) with costguard loaded."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

pytest_plugins = ["pytest_jupyter.jupyter_server"]

GiB = 1 << 30
TOKEN_HEADER = "Authorization"


def write_trace(path: Path, frames: list[dict[str, Any]], gpus: int = 2,
                instance_type: str | None = None, duration: float | None = None) -> Path:
    """A replay trace; in `frames`, processes name kernels by start order."""
    doc: dict[str, Any] = {
        "format": "costguard-trace/1",
        "description": "test trace",
        "gpus": [
            {"uuid": f"GPU-test-{i}", "name": "NVIDIA A100-SXM4-80GB",
             "memory_total_bytes": 80 * GiB}
            for i in range(gpus)
        ],
        "frames": frames,
    }
    if instance_type:
        doc["instance_type"] = instance_type
    if duration:
        doc["duration"] = duration
    path.write_text(json.dumps(doc))
    return path


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


Fetch = Callable[..., Awaitable[Any]]


async def get_json(jp_fetch: Fetch, *parts: str, **kw: Any) -> Any:
    resp = await jp_fetch(*parts, **kw)
    return json.loads(resp.body)


async def wait_for(jp_fetch: Fetch, predicate: Callable[[dict[str, Any]], bool],
                   endpoint: str = "status", timeout: float = 30.0) -> dict[str, Any]:
    """Poll a costguard document until `predicate` holds (samples arrive asynchronously)."""
    deadline = time.monotonic() + timeout
    doc: dict[str, Any] = {}
    while time.monotonic() < deadline:
        doc = await get_json(jp_fetch, "costguard", "api", endpoint)
        if predicate(doc):
            return doc
        await asyncio.sleep(0.1)
    raise AssertionError(f"condition not met within {timeout}s; last {endpoint}: {doc}")


async def start_session(jp_fetch: Fetch, path: str, kernel: str = "python3") -> dict[str, Any]:
    body = json.dumps({"path": path, "type": "notebook", "name": "",
                       "kernel": {"name": kernel}})
    return await get_json(jp_fetch, "api", "sessions", method="POST", body=body)
