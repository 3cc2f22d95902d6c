"""Whether a GPU is working, and whether a kernel or a server is idle: the one rule every part
of costguard asks (issues 36 and 44).

A GPU is *busy* at or above the threshold, *idle* below it, and *unknown* when it reports no
utilisation: NVML gives none for a MIG instance (nor for a GPU in MIG mode), a node exporter
can answer NaN. What cannot be seen is neither busy nor idle: its cost is spend but not waste,
no rule calls it idle (no idle alert, no cull, no auto-stop on its account), and every surface
says "unknown" rather than 0 % or idle.

Whether something may be stopped for idleness is `idleness` (issue 44): idle only when it is
idle by every measure, i.e. it runs no code *and* the GPUs it holds are idle. A GPU that works
is never idle, whatever the kernel's execution state: a kernel back at its prompt whose
training loop runs in a thread, a child process or an async task keeps its GPU busy. The
guard's idle rule (its warning, kernel cull and hibernation), auto-stop, the waste split, the
hub service's culler and the idle-culler arbiter hook all ask it.

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


#: the execution states in which a kernel runs code (jupyter_server's, from the kernel's IOPub
#: status). A kernel started without a client stays "starting" indefinitely having run
#: nothing, and one restarting runs nothing of the user's: neither is executing.
EXECUTING_STATES = frozenset({"busy"})


def executing(execution_state: str | None) -> bool:
    """Whether a kernel in this execution state runs code."""
    return execution_state in EXECUTING_STATES


def idleness(running: bool, gpus: Activity | None) -> Activity:
    """The one stop decision: whether a kernel (or a server, a pod) is idle by every measure.

    `running`: it executes code (a kernel's `executing` state, a server's running kernels or
    batch jobs); `gpus`: the activity of the GPUs it holds together (`combined_activity`;
    None: it holds none). "busy" when it runs code or any GPU it holds is busy, whatever its
    execution state; else "unknown" when a GPU's activity is unknown (it may be working:
    neither idle nor busy, not judged); else "idle". Only "idle" lets anything warn, cull,
    hibernate, stop or call its cost waste."""
    if running or gpus == BUSY:
        return BUSY
    return UNKNOWN if gpus == UNKNOWN else IDLE
