"""Replay traces: the GPU readings a server under test plays instead of NVML's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.units import GiB


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
