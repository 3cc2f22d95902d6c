"""What the service's handlers, its report intake and its cycle read of the running service:
one typed view of `CostGuardHub` (hub/app.py), so a renamed attribute is a type error in every
module that uses it rather than an AttributeError at request time."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from jupyter_costguard.hub.budgets import Budgets, BudgetState
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


class ServiceContext(Protocol):
    # --- settings (hub/settings.py) -------------------------------------------------------
    currency: str
    member_group_view: str
    report_interval: float
    poll_interval: float
    max_rate_per_hour: float
    clock_skew_seconds: float
    token_cache_seconds: int

    # --- the running service --------------------------------------------------------------
    log: logging.Logger
    store: HubStore
    worker: ThreadPoolExecutor
    prefix: str
    reconcile: Reconcile
    collector: HubCollector
    hub: HubAPI
    culler: Culler | None
    budget_hold: BudgetHold | None
    #: what the Hub last said is running (reports of other servers are refused)
    running: dict[tuple[str, str], RunningServer]
    #: the node's GPU activity per pod (None: the servers' reports are used)
    node: NodeGpu | None
    pod_namespace: str
    pod_name_template: str
    pod_slug_scheme: str

    @property
    def stale_after(self) -> float: ...

    @property
    def fresh(self) -> float: ...

    @property
    def page_max_age(self) -> float: ...

    def refresh_pages(self) -> None: ...

    @property
    def budgets(self) -> Budgets: ...

    @property
    def site(self) -> SiteProfiles: ...

    def run(self, fn: Callable[..., T], *args: Any) -> Awaitable[T]: ...

    def report(self, fn: Callable[..., T], *args: Any) -> Awaitable[T]: ...

    def page_html(self) -> Awaitable[str]: ...

    def poll_doc(self) -> dict[str, Any] | None: ...

    def is_admin(self, model: dict[str, Any]) -> bool: ...

    def budgets_of(self, name: str, now: float) -> list[BudgetState]: ...

    def as_run(self, server: RunningServer) -> RunningServer: ...
