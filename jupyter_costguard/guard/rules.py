"""The rule set the server runs, in the order they are evaluated."""

from __future__ import annotations

from .autostop import AutoStopRule
from .base import Rule
from .budget import BudgetRule
from .config import GuardConfig
from .idle import IdleKernelRule
from .starved import StarvedGpuRule
from .training import TrainingSizedRule


def default_rules(config: GuardConfig) -> list[Rule]:
    return [TrainingSizedRule(config), IdleKernelRule(config), StarvedGpuRule(config),
            BudgetRule(config), AutoStopRule(config)]
