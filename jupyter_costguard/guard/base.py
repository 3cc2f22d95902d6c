"""What a guard rule sees and what it may say or do.

Each tick a rule reads a `GuardContext` (the published sample, the ledger's totals, the
catalog) and returns `Finding`s (conditions that hold now, raised as alerts) and `Act`s
(things to do, carried out on the IO loop by the engine). A condition a rule stops finding
is resolved; a *notice* (something that happened, e.g. a kernel was hibernated) is raised once
and stays until the user dismisses it. How an act went is told back to the rules as an
`Outcome` (their optional `heard`, called from the IO loop: it must be thread-safe). A rule
that judges a stretch of time keeps its own `window.Rolling`, fed once per sample, so no rule
re-reads old samples.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from jupyter_costguard.cost.catalog import Catalog
from jupyter_costguard.cost.ledger import Ledger
from jupyter_costguard.cost.published import Published
from jupyter_costguard.guard.config import GuardConfig


@dataclass(frozen=True)
class Finding:
    """A condition that holds now; becomes (or refreshes) the alert `(kind, key)`."""

    kind: str
    key: str
    severity: str  # info | warning | critical
    title: str
    message: str
    notebook: str | None = None
    kernel_id: str | None = None
    actions: tuple[Mapping[str, Any], ...] = ()
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Act:
    """Something to do on the IO loop: interrupt/restart/shutdown a kernel, run the
    configured shutdown command, or stop the server."""

    action: str  # interrupt-kernel | restart-kernel | shutdown-kernel | hibernate-kernel
    #              | run-command | stop-server
    reason: str
    kernel_id: str | None = None
    command: tuple[str, ...] = ()


@dataclass(frozen=True)
class Outcome:
    """How an act went, once the IO loop has carried it out: `error` None when it worked;
    `result` what it answered (a hibernation: its snapshot document)."""

    act: Act
    time: float
    error: str | None = None
    result: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class RuleResult:
    findings: list[Finding] = field(default_factory=list)
    acts: list[Act] = field(default_factory=list)
    #: raised once, never resolved by the engine: the user dismisses them
    notices: list[Finding] = field(default_factory=list)


@dataclass
class GuardContext:
    now: float
    published: Published
    ledger: Ledger
    catalog: Catalog
    config: GuardConfig
    #: the state of alert (kind, key): "active", "dismissed", "snoozed", or None when there
    #: is none — lets a rule see that the user dismissed it (e.g. cancelled a countdown)
    alert_state: Callable[[str, str], str | None] = lambda kind, key: None
    #: batch jobs running now (auto-stop counts them as work)
    running_jobs: int = 0
    #: per-notebook budget overrides read from notebook metadata (path -> amount)
    notebook_budgets: Mapping[str, float] = field(default_factory=dict)


class Rule(Protocol):
    kind: str

    def evaluate(self, ctx: GuardContext) -> RuleResult: ...
