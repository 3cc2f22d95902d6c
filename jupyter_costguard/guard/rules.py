"""The rule set the server runs, in the order they are evaluated."""

from __future__ import annotations

from collections.abc import Callable

from jupyter_costguard.common.gpuactivity import GPU_BUSY_PERCENT
from jupyter_costguard.guard.autostop import AutoStopRule
from jupyter_costguard.guard.base import Rule
from jupyter_costguard.guard.budget import BudgetRule
from jupyter_costguard.guard.config import GuardConfig
from jupyter_costguard.guard.idle import IdleKernelRule
from jupyter_costguard.guard.starved import StarvedGpuRule
from jupyter_costguard.guard.training import TrainingSizedRule


def default_rules(
    config: GuardConfig,
    server_activity: Callable[[], float | None] | None = None,
    gpu_busy_percent: float = GPU_BUSY_PERCENT,
    budget: BudgetRule | None = None,
) -> list[Rule]:
    """`server_activity` (newest terminal activity) and `gpu_busy_percent` let auto-stop
    count work that happens outside kernels; the idle-kernel rule asks the same threshold
    whether a kernel's GPUs are idle (`common/gpuactivity.py`). `budget` is the budget rule
    when the caller also hands it to the job service (which asks it whether a notebook may
    still offload)."""
    autostop = AutoStopRule(config, server_activity=server_activity,
                            gpu_busy_percent=gpu_busy_percent)
    return [TrainingSizedRule(config), IdleKernelRule(config, gpu_busy_percent),
            StarvedGpuRule(config),
            budget if budget is not None else BudgetRule(config), autostop]
