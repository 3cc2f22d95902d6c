"""The guard: rules over spend and telemetry that raise alerts and, where opted in, act."""

from .base import Act, Finding, GuardContext, Rule, RuleResult
from .config import GuardConfig
from .engine import Guard

__all__ = ["Act", "Finding", "Guard", "GuardConfig", "GuardContext", "Rule", "RuleResult"]
