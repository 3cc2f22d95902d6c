"""`/services/costguard/metrics`: per-user and per-group series for Prometheus.

A custom collector over the store (built on scrape, off the IO loop), in its own registry so
the service's process metrics never mix with them. `/hub/metrics` has aggregates only; these
carry `user` and `group` labels to join on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from jupyter_costguard.hub.budgets import Budgets
from jupyter_costguard.hub.report import Reconcile, rows
from jupyter_costguard.hub.store import HubStore
from jupyter_costguard.hub.storerows import OK


class HubCollector:
    def __init__(self, store: HubStore, budgets: Budgets,
                 last_poll: Callable[[], tuple[float, float] | None],
                 currency: str = "USD", reconcile: Reconcile | None = None) -> None:
        self.store = store
        self.reconcile = reconcile
        self.budgets = budgets
        self.last_poll = last_poll
        #: the site's: group series add up several users' servers
        self.currency = currency

    def collect(self) -> Iterator[Metric]:
        now = time.time()
        by_user = rows(self.store, self.budgets, "user", now, currency=self.currency,
                       reconcile=self.reconcile)
        by_group = rows(self.store, self.budgets, "group", now, currency=self.currency)
        spend = CounterMetricFamily("costguard_hub_user_spend",
                                    "Spend of all the user's servers, all time.",
                                    labels=["user", "currency"])
        waste = CounterMetricFamily("costguard_hub_user_waste",
                                    "Waste (GPUs held while idle) of the user's servers.",
                                    labels=["user", "currency"])
        removed = GaugeMetricFamily(
            "costguard_hub_user_waste_removed",
            "The waste the user's servers' hibernations removed, as each server's last report "
            "said (reported by the server, not checked against the meter).",
            labels=["user", "currency"])
        idle = CounterMetricFamily("costguard_hub_user_idle_gpu_seconds",
                                   "GPU-seconds below the idle threshold on the user's servers.",
                                   labels=["user"])
        rate = GaugeMetricFamily("costguard_hub_user_spend_rate_per_hour",
                                 "What the user's running servers cost per hour now.",
                                 labels=["user", "currency"])
        metered = GaugeMetricFamily("costguard_hub_user_metered_rate_per_hour",
                                    "What the user's running servers cost per hour by the "
                                    "service's meter (their profiles' prices), in the site's "
                                    "currency.", labels=["user", "currency"])
        flagged = GaugeMetricFamily("costguard_hub_user_flagged_servers",
                                    "The user's running servers whose reported rate or spend "
                                    "is below their meter beyond the tolerance.",
                                    labels=["user"])
        held = GaugeMetricFamily("costguard_hub_user_gpus_held",
                                 "GPUs held by a process on the user's running servers.",
                                 labels=["user"])
        used = GaugeMetricFamily("costguard_hub_budget_used_ratio",
                                 "Share of the budget spent in the current period.",
                                 labels=["scope", "name", "period"])
        for r in by_user:
            cur = r.currency or ""
            spend.add_metric([r.key, cur], r.spend)
            waste.add_metric([r.key, cur], r.waste)
            removed.add_metric([r.key, cur], r.waste_removed)
            idle.add_metric([r.key], r.idle_gpu_seconds)
            rate.add_metric([r.key, cur], r.rate_per_hour)
            held.add_metric([r.key], r.gpus_held)
            metered.add_metric([r.key, self.currency], r.metered_rate_per_hour)
            flagged.add_metric([r.key], len({f.split(" ", 1)[0] for f in r.flags or ()}))
            if r.budget is not None:
                used.add_metric(["user", r.key, r.budget.period], r.budget.used)
        gspend = CounterMetricFamily("costguard_hub_group_spend",
                                     "Spend of the group's members' servers, all time.",
                                     labels=["group", "currency"])
        gwaste = CounterMetricFamily("costguard_hub_group_waste",
                                     "Waste of the group's members' servers, all time.",
                                     labels=["group", "currency"])
        for r in by_group:
            gspend.add_metric([r.key, r.currency or ""], r.spend)
            gwaste.add_metric([r.key, r.currency or ""], r.waste)
            if r.budget is not None:
                used.add_metric(["group", r.key, r.budget.period], r.budget.used)
        up = GaugeMetricFamily("costguard_hub_server_up",
                               "1 when the server's last report was accepted and is fresh.",
                               labels=["user", "server"])
        for s in self.store.servers():
            if s.state != "stopped":
                up.add_metric([s.user, s.server], 1.0 if s.state == OK else 0.0)
        yield from (spend, waste, removed, idle, rate, metered, flagged, held, gspend, gwaste,
                    used, up)
        last = self.last_poll()
        poll = GaugeMetricFamily("costguard_hub_poll_duration_seconds",
                                 "Wall time of the last look at the Hub (running servers, "
                                 "stale marks, culling).")
        servers = GaugeMetricFamily("costguard_hub_poll_servers",
                                    "Servers the Hub listed as running at the last look.")
        if last is not None:
            poll.add_metric([], last[0])
            servers.add_metric([], last[1])
        yield poll
        yield servers


def exposition(collector: HubCollector) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry)
