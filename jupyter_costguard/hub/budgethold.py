"""Budgets held while servers run (opt-in, dry-run-able, like culling).

The spawn hook refuses a GPU server once a budget is spent, but a server started with budget
left would otherwise run on however far past it. After each look at the Hub, a running GPU
server (by the site's profiles, hub/siteprofiles.py) whose user's or group's budget is spent
by the counted figure (the meter, by default: nothing the user's server says) is warned in the
user's JupyterLab with the time left; after `budget_grace_minutes` it is stopped through the
Hub's API, and both events are recorded with the figures that decided them. The user cannot
keep it running: "Hide" only hides the alert. A warning rides on the answer to the server's
next report; a server that does not report is warned all the same, its grace counted from
when it is found up and silent. A budget raised, or a new period, withdraws the warning.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from jupyter_costguard.common.hubprotocol import warning_doc
from jupyter_costguard.hub.budgets import BudgetState, shown, spent_words
from jupyter_costguard.hub.siteprofiles import SiteProfiles, site_profiles
from jupyter_costguard.hub.storerows import OK, ServerRow

MODES = ("off", "dry-run", "on")
#: the alert key's prefix: the server shows it like the cull warnings (protocol.WARNING_KIND)
KEY_PREFIX = "budget"


@dataclass
class Hold:
    """One server's standing budget warning."""

    start: float
    figures: str
    warning: dict[str, Any]
    delivered_at: float | None = None


def figures_of(state: BudgetState, currency: str, view: str = "full") -> str:
    """The spent budget in words: with its figures for the admins' record (the default),
    and for the user as the site's `member_group_view` lets members see a group's
    (budgets.spent_words, the one rule)."""
    return spent_words(state, currency, view)


def upper_first(text: str) -> str:
    return text[:1].upper() + text[1:]


class BudgetHold:
    """Decides, warns, stops (or, dry run, records what it would stop)."""

    def __init__(self, mode: str, grace_seconds: float,
                 site: SiteProfiles | Iterable[str], *,
                 stop_server: Callable[[str, str], Awaitable[None]],
                 record: Callable[[float, str, str, str, str], None], log: Any,
                 currency: str, view: str = "remaining") -> None:
        if mode not in MODES:
            raise ValueError(f"budget_stop must be one of {', '.join(MODES)}, not {mode!r}")
        self.mode = mode
        self.grace = max(0.0, grace_seconds)
        #: which servers are GPU ones (the site's profiles; a set of slugs: those alone)
        self.site = site if isinstance(site, SiteProfiles) else site_profiles(
            {}, gpu_profiles=set(site))
        self.stop_server = stop_server
        self.record = record
        self.log = log
        self.currency = currency
        #: what a member may see of a group budget (member_group_view)
        self.view = view
        self.holds: dict[tuple[str, str], Hold] = {}
        self.stopped: set[tuple[str, str]] = set()

    def warnings_for(self, key: tuple[str, str], now: float) -> list[dict[str, Any]]:
        """The budget warning standing for this server, for the answer to its report (the
        first answer that carries it starts its grace)."""
        hold = self.holds.get(key)
        if hold is None:
            return []
        if hold.delivered_at is None:
            hold.delivered_at = now
        return [hold.warning]

    def _warning(self, state: BudgetState, hold_start: float, now: float,
                 delivered: float | None) -> dict[str, Any]:
        stop_at = (delivered if delivered is not None else now) + self.grace
        minutes = max(0.0, (stop_at - now) / 60)
        return warning_doc(
            f"{KEY_PREFIX}:{state.scope}:{state.name}:{state.period_start:.0f}",
            f"Budget spent: this GPU server will be stopped in {minutes:.0f} min",
            f"{upper_first(figures_of(state, self.currency, self.view))}. The hub stops GPU "
            "servers "
            "once a budget is spent: save your work. It resets on "
            f"{time.strftime('%Y-%m-%d', time.gmtime(state.period_end))}; a CPU profile can "
            "still be started.",
            "critical",
            {"stop_at": stop_at, "scope": state.scope, "name": state.name,
             **{k: v for k, v in (shown(state, self.view) or {}).items()
                if k in ("budget", "spent") and v is not None},
             "period": state.period},
            actions=[{"id": "dismiss", "label": "Hide"}])

    async def run(self, rows: list[ServerRow],
                  states: Mapping[str, list[BudgetState]], now: float,
                  starting: Collection[tuple[str, str]] = (),
                  ) -> list[tuple[ServerRow, str]]:
        """One round over the running servers (`states`: each user's budget states now;
        `starting`: the servers the Hub has not yet called ready). Returns what was done to
        whom: "warn", "stop", "would-stop".

        A server still starting is warned, but its grace waits until it is up: the grace is
        the user's time to save their work, and a server that is not up shows no warning and
        holds no work (the Hub's own start timeout ends one that never comes up). A server
        that is up and does not report is warned all the same: its grace runs from the first
        round that finds it so, whenever that is."""
        done: list[tuple[ServerRow, str]] = []
        live = set()
        for row in rows:
            key = (row.user, row.server)
            live.add(key)
            if self.mode == "off" or key in self.stopped or not self.site.of(row.profile).gpu:
                continue
            spent = [s for s in states.get(row.user, []) if s.exhausted]
            if not spent:
                self.holds.pop(key, None)  # a budget raised, or a new period
                continue
            state = spent[0]
            figures = figures_of(state, self.currency)
            hold = self.holds.get(key)
            if hold is None:
                hold = self.holds[key] = Hold(now, figures, {})
                self.record(now, row.user, row.server, "budget-warn",
                            f"{figures}; stopping in {self.grace / 60:g} min")
                done.append((row, "warn"))
            if hold.delivered_at is None and row.state != OK and key not in starting:
                hold.delivered_at = now  # no report carries the warning: its grace runs now
            hold.warning = self._warning(state, hold.start, now, hold.delivered_at)
            if hold.delivered_at is None or now - hold.delivered_at < self.grace:
                continue
            why = f"{figures}; warned {now - hold.delivered_at:.0f} s ago"
            self.stopped.add(key)
            if self.mode == "dry-run":
                self.log.info("costguard-hub: dry run: would stop %s/%s: %s", *key, why)
                self.record(now, row.user, row.server, "budget-would-stop", why)
                done.append((row, "would-stop"))
                continue
            self.log.info("costguard-hub: stopping %s/%s: %s", *key, why)
            self.record(now, row.user, row.server, "budget-stop", why)
            try:
                await self.stop_server(row.user, row.server)
            except Exception as e:  # the next round tries again
                self.stopped.discard(key)
                self.record(time.time(), row.user, row.server, "stop-failed", str(e))
                self.log.warning("costguard-hub: stopping %s/%s: %s", *key, e)
                continue
            self.holds.pop(key, None)
            done.append((row, "stop"))
        for key in list(self.holds):
            if key not in live:
                self.holds.pop(key, None)
        self.stopped &= live
        return done
