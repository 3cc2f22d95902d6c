"""Runs the rules after every sample and turns what they say into alerts and actions."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence

from ..alerts import AlertStore
from ..ledger import Ledger
from ..pricing import Catalog
from ..service import Published
from .base import Act, GuardContext, Rule
from .config import GuardConfig

log = logging.getLogger("jupyter_costguard")


class Guard:
    """Evaluated on the sampler thread; `dispatch` hands acts to the IO loop."""

    def __init__(
        self,
        config: GuardConfig,
        rules: Sequence[Rule],
        alerts: AlertStore,
        ledger: Ledger,
        catalog: Catalog,
        dispatch: Callable[[Act], None] = lambda act: None,
    ) -> None:
        self.config = config
        self.rules = list(rules)
        self.alerts = alerts
        self.ledger = ledger
        self.catalog = catalog
        self.dispatch = dispatch
        self._holding: set[tuple[str, str]] = set()
        self.running_jobs: Callable[[], int] = lambda: 0
        self.notebook_budgets: Callable[[], Mapping[str, float]] = dict

    def _state(self, kind: str, key: str) -> str | None:
        alert = self.alerts.find(kind, key)
        if alert is None or alert.resolved is not None:
            return None
        return alert.effective_state(self.alerts.clock())

    def evaluate(self, published: Published) -> list[Act]:
        """One round of every rule; returns the acts it dispatched."""
        sample = published.sample
        if sample is None:
            return []
        ctx = GuardContext(
            now=sample.time, published=published, ledger=self.ledger,
            catalog=self.catalog, config=self.config, alert_state=self._state,
            running_jobs=self.running_jobs(), notebook_budgets=self.notebook_budgets(),
        )
        holding: set[tuple[str, str]] = set()
        acts: list[Act] = []
        for rule in self.rules:
            try:
                result = rule.evaluate(ctx)
            except Exception:  # one broken rule must not stop sampling or the others
                log.exception("costguard: guard rule %s failed", rule.kind)
                holding |= {c for c in self._holding if c[0] == rule.kind}  # keep its alerts
                continue
            for f in result.findings:
                self.alerts.raise_alert(
                    f.kind, f.key, f.severity, f.title, f.message, notebook=f.notebook,
                    kernel_id=f.kernel_id, actions=[dict(a) for a in f.actions],
                    details=dict(f.details))
                holding.add((f.kind, f.key))
            acts.extend(result.acts)
        for kind, key in self._holding - holding:
            self.alerts.resolve(kind, key)
        self._holding = holding
        for act in acts:
            log.warning("costguard: %s%s: %s", act.action,
                        f" {act.kernel_id}" if act.kernel_id else "", act.reason)
            self.dispatch(act)
        return acts
