"""Guard rule `auto-stop` (to be filled in)."""

from __future__ import annotations

from .base import GuardContext, RuleResult
from .config import GuardConfig


class AutoStopRule:
    kind = "auto-stop"

    def __init__(self, config: GuardConfig) -> None:
        self.config = config

    def evaluate(self, ctx: GuardContext) -> RuleResult:
        return RuleResult()
