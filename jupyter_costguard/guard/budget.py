"""Guard rule `budget` (to be filled in)."""

from __future__ import annotations

from .base import GuardContext, RuleResult
from .config import GuardConfig


class BudgetRule:
    kind = "budget"

    def __init__(self, config: GuardConfig) -> None:
        self.config = config

    def evaluate(self, ctx: GuardContext) -> RuleResult:
        return RuleResult()
