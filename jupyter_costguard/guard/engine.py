"""Runs the rules after every sample and turns what they say into alerts and actions."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence

from jupyter_costguard.alerts.store import AlertStore
from jupyter_costguard.cost.catalog import Catalog
from jupyter_costguard.cost.ledger import Ledger
from jupyter_costguard.cost.published import Published
from jupyter_costguard.guard.base import Act, GuardContext, Outcome, Rule
from jupyter_costguard.guard.config import GuardConfig

log = logging.getLogger("jupyter_costguard")


class GuardEngine:
    """Evaluated on the sampler thread; `dispatch` hands acts to the IO loop."""

    def __init__(
        self,
        config: GuardConfig,
        rules: Sequence[Rule],
        alerts: AlertStore,
        ledger: Ledger,
        catalog: Catalog,
        dispatch: Callable[[Act], None] = lambda act: None,
        *,
        running_jobs: Callable[[], int] = lambda: 0,
        notebook_budgets: Callable[[], Mapping[str, float]] = dict,
    ) -> None:
        self.config = config
        self.rules = list(rules)
        self.alerts = alerts
        self.ledger = ledger
        self.catalog = catalog
        self.dispatch = dispatch
        self._holding: set[tuple[str, str]] = set()
        #: alerts an earlier run of the server left open, until their rule has judged
        self._leftovers: set[tuple[str, str]] | None = None
        self._started = 0.0
        #: batch jobs running now, and per-notebook budget overrides (path -> amount)
        self.running_jobs = running_jobs
        self.notebook_budgets = notebook_budgets

    def _state(self, kind: str, key: str) -> str | None:
        alert = self.alerts.find(kind, key)
        if alert is None or alert.resolved is not None:
            return None
        return alert.effective_state(self.alerts.clock())

    def _resolve_leftovers(self, now: float, holding: set[tuple[str, str]],
                           failed: set[str]) -> None:
        """An alert left open by an earlier run is resolved once its rule, having run for
        its `settle_seconds` (the time it needs before it can speak), did not raise it."""
        if not self._leftovers:
            return
        settle = {r.kind: float(getattr(r, "settle_seconds", 0.0)) for r in self.rules}
        for kind, key in list(self._leftovers):
            if (kind, key) in holding:
                self._leftovers.discard((kind, key))  # raised again: followed as usual
            elif kind not in failed and now - self._started >= settle[kind]:
                self._leftovers.discard((kind, key))
                log.info("costguard: resolving %s alert %r left by an earlier run", kind, key)
                self.alerts.resolve(kind, key)

    def heard(self, outcome: Outcome) -> None:
        """How an act went (from the IO loop): told to every rule that listens."""
        for rule in self.rules:
            listen = getattr(rule, "heard", None)
            if listen is not None:
                try:
                    listen(outcome)
                except Exception:
                    log.exception("costguard: guard rule %s failed to hear %s", rule.kind,
                                  outcome.act.action)

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
        if self._leftovers is None:
            kinds = {rule.kind for rule in self.rules}
            self._leftovers = {c for c in self.alerts.open_conditions() if c[0] in kinds}
            self._started = sample.time
        holding: set[tuple[str, str]] = set()
        acts: list[Act] = []
        failed: set[str] = set()
        for rule in self.rules:
            try:
                result = rule.evaluate(ctx)
            except Exception:  # one broken rule must not stop sampling or the others
                log.exception("costguard: guard rule %s failed", rule.kind)
                holding |= {c for c in self._holding if c[0] == rule.kind}  # keep its alerts
                failed.add(rule.kind)
                continue
            for f in result.findings + result.notices:
                self.alerts.raise_alert(
                    f.kind, f.key, f.severity, f.title, f.message, notebook=f.notebook,
                    kernel_id=f.kernel_id, actions=[dict(a) for a in f.actions],
                    details=dict(f.details))
            holding |= {(f.kind, f.key) for f in result.findings}
            acts.extend(result.acts)
        for kind, key in self._holding - holding:
            self.alerts.resolve(kind, key)
        self._holding = holding
        self._resolve_leftovers(sample.time, holding, failed)
        for act in acts:
            log.warning("costguard: %s%s: %s", act.action,
                        f" {act.kernel_id}" if act.kernel_id else "", act.reason)
            self.dispatch(act)
        return acts
