"""The guard: rules over spend and telemetry that raise alerts and, where opted in, act."""

from jupyter_costguard.guard.base import Act, Finding, GuardContext, Outcome, Rule, RuleResult
from jupyter_costguard.guard.config import GuardConfig
from jupyter_costguard.guard.engine import GuardEngine

__all__ = [
           "Act",
           "Finding",
           "GuardConfig",
           "GuardContext",
           "GuardEngine",
           "Outcome",
           "Rule",
           "RuleResult",
]
