"""Whether a GPU is working: the one rule every part of costguard asks (issue 36).

A GPU is *busy* at or above the threshold, *idle* below it, and *unknown* when it reports no
utilisation: NVML gives none for a MIG instance (nor for a GPU in MIG mode), a node exporter
can answer NaN. What cannot be seen is neither busy nor idle: its cost is spend but not waste,
no rule calls it idle (no idle alert, no cull, no auto-stop on its account), and every surface
says "unknown" rather than 0 % or idle.

Standard library only: the server and the hub service both import it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Literal

#: the default threshold (percent) at or above which a GPU is busy: the server's
#: `idle_gpu_threshold_percent`, the hub's `gpu_busy_percent` and the guard's default
GPU_BUSY_PERCENT = 5.0

BUSY: Literal["busy"] = "busy"
IDLE: Literal["idle"] = "idle"
UNKNOWN: Literal["unknown"] = "unknown"
Activity = Literal["busy", "idle", "unknown"]
#: every answer, in the order documents list them
ACTIVITIES: tuple[Activity, ...] = (BUSY, IDLE, UNKNOWN)


def gpu_activity(utilization_percent: float | None,
                 threshold_percent: float = GPU_BUSY_PERCENT) -> Activity:
    """"busy" at or above `threshold_percent`, "idle" below, "unknown" when no utilisation
    is reported (None, or a value that is not a number)."""
    if utilization_percent is None or not math.isfinite(utilization_percent):
        return UNKNOWN
    return BUSY if utilization_percent >= threshold_percent else IDLE


def combined_activity(activities: Iterable[Activity]) -> Activity | None:
    """The activity of several GPUs held together (a kernel's, a pod's): busy when any is,
    else unknown when any is (it may be working), else idle; None for no GPU at all."""
    seen = set(activities)
    if not seen:
        return None
    if BUSY in seen:
        return BUSY
    return UNKNOWN if UNKNOWN in seen else IDLE
