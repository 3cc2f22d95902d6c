"""The rule set the server runs, in the order they are evaluated."""

from __future__ import annotations

from collections.abc import Callable

from .autostop import AutoStopRule
from .base import Rule
from .budget import BudgetRule
from .config import GuardConfig
from .idle import IdleKernelRule
from .starved import StarvedGpuRule
from .training import TrainingSizedRule


def default_rules(
    config: GuardConfig,
    server_activity: Callable[[], float | None] | None = None,
    gpu_busy_percent: float | None = None,
) -> list[Rule]:
    """`server_activity` (newest terminal activity) and `gpu_busy_percent` let auto-stop
    count work that happens outside kernels."""
    autostop = AutoStopRule(config, server_activity=server_activity) if gpu_busy_percent is None \
        else AutoStopRule(config, server_activity=server_activity,
                          gpu_busy_percent=gpu_busy_percent)
    return [TrainingSizedRule(config), IdleKernelRule(config), StarvedGpuRule(config),
            BudgetRule(config), autostop]
