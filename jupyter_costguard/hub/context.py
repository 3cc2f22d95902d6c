"""What each part of the running service reads of it: one small Protocol per consumer (the
handlers, the report intake, the cycle), each naming only the members that consumer uses.
`CostGuardHub` (hub/app.py) satisfies all three, so a renamed attribute is a type error in the
module that uses it rather than an AttributeError at request time, and no consumer can reach
into the rest of the app (calls go app -> consumer, never back round)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from jupyter_costguard.hub.budgets import Budgets
from jupyter_costguard.hub.hubapi import HubAPI, RunningServer
from jupyter_costguard.hub.nodegpu import NodeGpu
from jupyter_costguard.hub.report import Reconcile
from jupyter_costguard.hub.siteprofiles import SiteProfiles
from jupyter_costguard.hub.store import HubStore

if TYPE_CHECKING:
    from jupyter_costguard.hub.budgethold import BudgetHold
    from jupyter_costguard.hub.cull import Culler
    from jupyter_costguard.hub.metrics import HubCollector

T = TypeVar("T")


class Worker(Protocol):
    """Store work off the IO loop."""

    def run(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]: ...


class HandlerContext(Worker, Protocol):
    """What the page and API handlers (hub/handlers.py) read."""

    currency: str
    member_group_view: str
    prefix: str
    store: HubStore
    reconcile: Reconcile
    collector: HubCollector
    admin_users: set[str]
    admin_groups: set[str]

    @property
    def budgets(self) -> Budgets: ...

    def report(self, fn: Callable[..., T], *args: Any) -> Awaitable[T]:
        """`fn(*args)` answered from the pages' cache (hub/pagecache.py)."""
        ...

    def poll_doc(self) -> dict[str, Any] | None:
        """The last look at the Hub, for an admin's answer (None before the first)."""
        ...


class IntakeContext(Worker, Protocol):
    """What the report intake (hub/intake.py) reads."""

    log: logging.Logger
    store: HubStore
    hub: HubAPI
    culler: Culler | None
    budget_hold: BudgetHold | None
    report_interval: float
    max_rate_per_hour: float
    clock_skew_seconds: float
    token_cache_seconds: int
    #: what the Hub last said is running (reports of other servers are refused)
    running: dict[tuple[str, str], RunningServer]

    def as_run(self, server: RunningServer) -> RunningServer: ...


class CycleContext(Worker, Protocol):
    """What one look at the Hub (hub/cycle.py) reads and writes."""

    log: logging.Logger
    store: HubStore
    hub: HubAPI
    culler: Culler | None
    budget_hold: BudgetHold | None
    #: the node's GPU activity per pod (None: the servers' reports are used)
    node: NodeGpu | None
    poll_interval: float
    pod_namespace: str
    pod_name_template: str
    pod_slug_scheme: str
    #: what the Hub last said is running (the cycle replaces it each look)
    running: dict[tuple[str, str], RunningServer]

    @property
    def stale_after(self) -> float: ...

    @property
    def fresh(self) -> float: ...

    @property
    def budgets(self) -> Budgets: ...

    @property
    def site(self) -> SiteProfiles: ...

    def as_run(self, server: RunningServer) -> RunningServer: ...

    def refresh_pages(self) -> None:
        """After a look at the Hub: the pages' default views recomputed in the background."""
        ...

