"""Writes examples/gpu_trace.json, the replay trace the demo plays when no GPU is found.

The trace is synthetic, shaped after a common day on a p4d.24xlarge (8× A100 40 GB):
`explore.ipynb` explores (a few GiB on GPU 0, utilisation in the low single digits with a
short burst now and then); `train.ipynb`, when opened, trains on GPUs 1-4 at ~90% for a few
minutes and then idles holding its memory. GPUs are bound to those notebooks' kernels, not to
the order kernels start in, whatever the user opens first; a GPU whose notebook is not open
reads idle (no utilisation, idle power). Everything it produces is labelled simulated.
Run `python examples/make_trace.py` to regenerate it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

GiB = 1 << 30
DURATION = 600  # seconds; the replay loops
STEP = 5


def frame(t: int) -> dict:
    gpus = []
    burst = 120 <= t % 300 < 140  # a 20 s burst of real work every 5 minutes
    explore_util = 65.0 if burst else 2.0 + 1.5 * math.sin(t / 37.0)
    training = t < 360  # notebook 2 trains for 6 minutes, then sits holding memory
    for i in range(8):
        g: dict = {"utilization_percent": 0.0, "power_watts": 52.0, "processes": []}
        if i == 0:
            g["utilization_percent"] = round(explore_util, 1)
            g["power_watts"] = 210.0 if burst else 68.0
            g["processes"] = [{"notebook": "explore.ipynb", "used_memory_bytes": 6 * GiB}]
        elif 1 <= i <= 4:
            g["utilization_percent"] = round(88.0 + 6 * math.sin(t / 11.0 + i), 1) \
                if training else 0.0
            g["power_watts"] = 360.0 if training else 60.0
            g["processes"] = [{"notebook": "train.ipynb", "used_memory_bytes": 31 * GiB}]
        gpus.append(g)
    return {"t": t, "gpus": gpus}


def main() -> None:
    doc = {
        "format": "costguard-trace/1",
        "description": "Synthetic p4d.24xlarge day: one notebook exploring, one training.",
        "instance_type": "p4d.24xlarge",
        "driver_version": "550.54.15 (simulated)",
        "duration": DURATION,
        "interval": STEP,
        "gpus": [
            {"uuid": f"GPU-5a1c0de0-0000-4000-8000-00000000000{i}",
             "name": "NVIDIA A100-SXM4-40GB", "memory_total_bytes": 40 * GiB}
            for i in range(8)
        ],
        "frames": [frame(t) for t in range(0, DURATION, STEP)],
    }
    out = Path(__file__).with_name("gpu_trace.json")
    out.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    print(f"wrote {out} ({len(doc['frames'])} frames)")


if __name__ == "__main__":
    main()
