"""GPU-aware culling: per group or spawner profile, stop servers whose GPUs have all sat idle
too long, after warning the user in their own JupyterLab.

One decision function (`decide`) serves both the service's own culler and the arbiter hook
for jupyterhub-idle-culler 2, on the same inputs (`judged_row`: the node's GPU activity where
its reading is fresh, the profile the site judges the server as, no profile = the site's
default; one freshness window, `HubSettings.fresh`), so the two can never disagree. Whether a
server is idle is the one stop decision every part of costguard asks
(`common/gpuactivity.idleness`, through `row_idleness`): a busy GPU is never idle, whatever its
kernels' states. Silence is never a reason to keep:

- no fresh report from the server (missing, stale or refused): *defer*, the usual culler's
  own rule decides (the service's culler leaves it alone);
- no policy matches the server's profile or the user's groups: defer;
- the server reports a busy GPU (or batch jobs running, or no idle clock: a kernel at work):
  that is the user's word, so it keeps the server only under a policy with
  `trust_reported_activity: true`; otherwise defer;
- the node shows a busy GPU, or one of unknown activity (its series has no number): it may be
  working, so no idle clock runs: keep;
- every GPU idle for the policy's limit (counted from the later of when they went idle and
  when the user last chose "keep running"): stop; within `warn_minutes` of it: warn.

Policies, in `c.CostGuardHub.cull_policies`, first match wins:

    [{"name": "gpu", "profiles": ["gpu-a100", "gpu-h100"], "idle_minutes": 30,
      "warn_minutes": 5, "trust_reported_activity": false}]

A policy with neither `profiles` nor `groups` matches every server.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from jupyter_costguard.common.gpuactivity import BUSY, IDLE, UNKNOWN, Activity, idleness
from jupyter_costguard.common.hubprotocol import WARNING_KIND, warning_doc
from jupyter_costguard.hub.siteprofiles import SiteProfiles
from jupyter_costguard.hub.store import read_only
from jupyter_costguard.hub.storerows import (
    DEFAULT_FRESH_SECONDS,
    OK,
    SERVER_COLUMNS,
    ServerRow,
    server_row,
    with_node_activity,
)

#: servers judged between two turns of the IO loop (10,000 in one go held it ~0.1 s)
YIELD_EVERY = 500

KEEP, WARN, STOP, DEFER = "keep", "warn", "stop", "defer"
#: the alert kind the warnings are raised under in the user's server
ALERT_KIND = WARNING_KIND


@dataclass(frozen=True)
class CullPolicy:
    name: str
    idle_minutes: float
    warn_minutes: float = 5.0
    profiles: frozenset[str] = field(default_factory=frozenset)
    groups: frozenset[str] = field(default_factory=frozenset)
    #: a server's own claim of a busy GPU or a running job keeps it (the site trusts users)
    trust_reported_activity: bool = False

    @classmethod
    def from_config(cls, doc: Mapping[str, Any], index: int) -> CullPolicy:
        try:
            idle = float(doc["idle_minutes"])
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"cull_policies[{index}] needs idle_minutes (a number)") from None
        warn = float(doc.get("warn_minutes", min(5.0, idle / 2)))
        if idle <= 0 or warn < 0 or warn > idle:
            raise ValueError(f"cull_policies[{index}]: need idle_minutes > 0 and "
                             "0 <= warn_minutes <= idle_minutes")
        unknown = set(doc) - {"name", "idle_minutes", "warn_minutes", "profiles", "groups",
                              "trust_reported_activity"}
        if unknown:
            raise ValueError(f"cull_policies[{index}]: unknown keys {sorted(unknown)}")
        trust = doc.get("trust_reported_activity", False)
        if not isinstance(trust, bool):
            raise ValueError(f"cull_policies[{index}]: trust_reported_activity is true or false")
        return cls(str(doc.get("name", f"policy {index}")), idle, warn,
                   frozenset(doc.get("profiles") or ()), frozenset(doc.get("groups") or ()),
                   trust)

    def matches(self, profile: str, groups: Iterable[str]) -> bool:
        if not self.profiles and not self.groups:
            return True
        return profile in self.profiles or bool(self.groups & set(groups))


def policies_from(config: Iterable[Mapping[str, Any]]) -> list[CullPolicy]:
    return [CullPolicy.from_config(doc, i) for i, doc in enumerate(config)]


def policy_for(policies: list[CullPolicy], profile: str, groups: Iterable[str],
               ) -> CullPolicy | None:
    groups = list(groups)
    return next((p for p in policies if p.matches(profile, groups)), None)


@dataclass(frozen=True)
class Decision:
    action: str  # keep, warn, stop, defer
    reason: str
    policy: str | None = None
    idle_seconds: float | None = None
    stop_at: float | None = None
    #: from when the idle clock runs (the later of the GPUs' idle start and a keep)
    idle_start: float | None = None


def judged_row(row: ServerRow, site: SiteProfiles, now: float, fresh_seconds: float,
               ) -> ServerRow:
    """A server's row as every cull decision reads it, the service's culler and the arbiter
    hook alike: its GPU activity from the node where the node's reading is fresh, and the
    profile the site judges it as (no profile: the site's default; one the site does not
    list: the listed one it is counted at)."""
    row = with_node_activity(row, now, fresh_seconds)
    slug = site.of(row.profile).policy_slug
    return row if slug == row.profile else replace(row, profile=slug)


def row_idleness(row: ServerRow) -> Activity:
    """Whether a server is idle by every measure, by the one stop decision (`idleness`): busy
    while a GPU is busy or (by its own report) a batch job runs; unknown while a GPU's activity
    is unknown or no idle clock runs (a GPU that may be working, a kernel at work); else
    idle. The node's figures say nothing of jobs: a job's GPU work shows on them."""
    gpus: Activity = (BUSY if row.gpus_busy > 0
                      else UNKNOWN if row.gpu_idle_since is None else IDLE)
    jobs = row.activity_source != "node" and row.active_jobs > 0
    return idleness(jobs, gpus)


def decide(row: ServerRow | None, groups: Iterable[str], policies: list[CullPolicy],
           now: float, kept_at: float | None = None,
           fresh_seconds: float = DEFAULT_FRESH_SECONDS,
           keep_ceiling: float = 0.0) -> Decision:
    """What to do with one server. `kept_at`: the user's last Keep running, which restarts
    the idle clock, except where the node's figures show every GPU idle for `keep_ceiling`
    seconds or more (0: no ceiling)."""
    node = row is not None and row.activity_source == "node"
    if row is None or (not node and (row.state != OK or row.last_ok is None
                                     or now - row.last_ok > fresh_seconds)):
        return Decision(DEFER, "no fresh costguard report from this server")
    policy = policy_for(policies, row.profile, groups)
    if policy is None:
        return Decision(DEFER, "no GPU culling policy for this profile or group")
    activity = row_idleness(row)
    if node:  # the node's figures (dcgm-exporter): what the user cannot touch decides
        if row.gpus_held == 0:
            return Decision(DEFER, "the node shows no GPU held by this server's pod",
                            policy.name)
        if activity != IDLE:
            unknown = (f", {row.node_unknown} of unknown activity (may be working)"
                       if row.node_unknown else "")
            return Decision(KEEP, f"the node shows {row.gpus_busy} GPU(s) busy{unknown}",
                            policy.name)
    elif activity != IDLE:
        claim = (f"{row.active_jobs} batch job(s) running" if row.active_jobs
                 else f"{row.gpus_busy} GPU(s) busy" if row.gpus_busy
                 else "no GPU idle clock")
        if policy.trust_reported_activity:
            return Decision(KEEP, f"the server reports {claim}", policy.name)
        return Decision(DEFER, f"the server reports {claim}; policy {policy.name} does not "
                               "take a server's word for it", policy.name)
    assert row.gpu_idle_since is not None  # idle: its idle clock runs
    if node and keep_ceiling > 0 and now - row.gpu_idle_since >= keep_ceiling:
        kept_at = None  # idle past the ceiling by what the user cannot touch: no keep holds
    start = max(row.gpu_idle_since, kept_at or 0.0)
    idle = max(0.0, now - start)
    limit = policy.idle_minutes * 60
    stop_at = start + limit
    if idle >= limit:
        return Decision(STOP, f"every GPU idle for {idle / 60:.0f} min (policy "
                              f"{policy.name}: {policy.idle_minutes:g} min)",
                        policy.name, idle, stop_at, start)
    if idle >= limit - policy.warn_minutes * 60:
        return Decision(WARN, f"every GPU idle for {idle / 60:.0f} min; stopping at "
                              f"{policy.idle_minutes:g} min (policy {policy.name})",
                        policy.name, idle, stop_at, start)
    return Decision(KEEP, f"GPUs idle for {idle / 60:.0f} min, under the policy's "
                          f"{policy.idle_minutes:g} min", policy.name, idle, stop_at, start)


# --- the arbiter for jupyterhub-idle-culler 2 ---------------------------------------------

def read_row(db_path: str | Path, user: str, server: str,
             ) -> tuple[ServerRow | None, list[str], float | None]:
    """One server's row, the user's groups and their last "keep running", read-only."""
    found = read_only(
        db_path,
        (f"SELECT {SERVER_COLUMNS} FROM servers WHERE user = ? AND server = ?",
         (user, server)),
        ("SELECT grp FROM memberships WHERE user = ?", (user,)),
        ("SELECT MAX(time) FROM events WHERE user = ? AND server = ? AND kind = 'kept'",
         (user, server)))
    if found is None:
        return None, [], None
    rows, groups, kept = found
    return (server_row(rows[0]) if rows else None, [g for (g,) in groups], kept[0][0])


def cull_arbiter_hook(config_file: str | Path,
                      clock: Callable[[], float] = time.time) -> Callable[..., bool]:
    """`c.IdleCuller.cull_arbiter_hook = cull_arbiter_hook("/srv/costguard_hub_config.py")`.

    Uses the service's policies and figures (its SQLite, read-only) and the service culler's
    inputs (`judged_row`, the one freshness window `HubSettings.fresh`, `decide`): a server
    the node shows GPU-busy is never culled for kernel silence, a GPU-idle one under a policy
    is culled at the policy's limit even while a forgotten tab keeps it "active"; the rest
    keep the culler's rule."""
    from jupyter_costguard.hub.spawn import load_settings

    settings = load_settings(config_file)
    policies = policies_from(settings.cull_policies)
    db = settings.db_path
    fresh = settings.fresh
    site = settings.site
    ceiling = settings.cull_keep_ceiling_minutes * 60

    def arbiter(*, inactive: timedelta, inactive_limit: float, server: dict[str, Any],
                **_: Any) -> bool:
        user, _slash, name = str(server.get("full_name", "")).partition("/")
        row, groups, kept = read_row(db, user, name)
        now = clock()
        if row is not None:  # as the service's culler reads it
            row = judged_row(row, site, now, fresh)
        decision = decide(row, groups, policies, now, kept, fresh, ceiling)
        if decision.action == DEFER:
            return inactive.total_seconds() >= inactive_limit
        return decision.action == STOP

    return arbiter


# --- the service's own culler ---------------------------------------------------------------

@dataclass
class Round:
    """One server's current warning: from when its GPUs were idle, the warning, and when the
    server first took it (in the answer to its report)."""

    start: float
    warning: dict[str, Any]
    delivered_at: float | None = None
    #: a Keep running past the day's limit was refused (recorded once per round)
    keep_refused: bool = False


class Culler:
    """Runs after each look at the Hub: decides, warns (the warning travels back in the
    answer to the server's next report), stops (or, dry-run, logs what it would stop),
    records why.

    A stop needs a warning the server took at least `warn_minutes` ago, so a user always
    sees one; the user's "Keep running" (the report says the warning was dismissed) restarts
    the idle clock and is recorded."""

    def __init__(self, policies: list[CullPolicy],
                 stop_server: Callable[[str, str], Awaitable[None]], *, dry_run: bool,
                 record: Callable[[float, str, str, str, str], None], log: Any,
                 keeps_per_day: int | None = None, keep_ceiling: float = 0.0,
                 fresh_seconds: float = DEFAULT_FRESH_SECONDS) -> None:
        self.policies = policies
        #: how old a report may be and still decide (`HubSettings.fresh`, the arbiter's too)
        self.fresh_seconds = fresh_seconds
        #: the most Keep running answers a server's user may give in 24 h (None: no limit)
        self.keeps_per_day = keeps_per_day
        self.keep_ceiling = keep_ceiling
        #: when each server's user chose Keep running, the last 24 h
        self.keeps: dict[tuple[str, str], list[float]] = {}
        self.stop_server = stop_server
        self.dry_run = dry_run
        self.record = record
        self.log = log
        self.rounds: dict[tuple[str, str], Round] = {}
        self.kept: dict[tuple[str, str], float] = {}
        self.stopped: set[tuple[str, str]] = set()

    # --- what a report's answer carries, and what a report says back -----------------------

    def warnings_for(self, key: tuple[str, str], now: float) -> list[dict[str, Any]]:
        """The warnings that stand for this server, for the answer to its report (the first
        answer that carries one starts the warning's lead)."""
        current = self.rounds.get(key)
        if current is None:
            return []
        if current.delivered_at is None:
            current.delivered_at = now
        return [current.warning]

    def kept_by_user(self, key: tuple[str, str], dismissed: Iterable[str],
                     now: float) -> bool:
        """The report says the user dismissed these warnings ("Keep running"): if the current
        one is among them, the idle clock starts again. True when that happened."""
        current = self.rounds.get(key)
        if current is None or current.warning["key"] not in set(dismissed):
            return False
        if not self.may_keep(key, now):
            if not current.keep_refused:
                current.keep_refused = True
                self.record(now, key[0], key[1], "keep-refused",
                            f"Keep running {self.keeps_per_day} times in 24 h already: the "
                            "warning stands")
            return False
        self.keeps.setdefault(key, []).append(now)
        self.kept[key] = now
        self.rounds.pop(key, None)
        self.record(now, key[0], key[1], "kept", "the user chose Keep running")
        return True

    def may_keep(self, key: tuple[str, str], now: float) -> bool:
        """Whether a Keep running of this server's user still counts today."""
        recent = [t for t in self.keeps.get(key, ()) if now - t < 86400]
        self.keeps[key] = recent
        return self.keeps_per_day is None or len(recent) < self.keeps_per_day

    def _warning(self, d: Decision, key: str, now: float, can_keep: bool = True,
                 ) -> dict[str, Any]:
        minutes = max(0.0, ((d.stop_at or now) - now) / 60)
        then = ("Save your work, or choose Keep running if you still need the GPUs."
                if can_keep else "Save your work: Keep running has been used as often as "
                "the hub allows today, so it will not keep this server.")
        return warning_doc(
            key, f"This GPU server will be stopped in {minutes:.0f} min",
            f"Every GPU on this server has been idle for {(d.idle_seconds or 0) / 60:.0f} "
            f"min, and the hub's policy ({d.policy}) stops idle GPU servers. {then}",
            "critical" if minutes < 1 else "warning",
            {"stop_at": d.stop_at, "policy": d.policy, "idle_seconds": d.idle_seconds,
             "can_keep": can_keep},
            actions=None if can_keep else [{"id": "dismiss", "label": "Hide"}])

    # --- the decisions ----------------------------------------------------------------------

    async def run(self, rows: list[ServerRow], memberships: Mapping[str, list[str]],
                  now: float) -> list[tuple[ServerRow, Decision]]:
        done = []
        live = set()
        for i, row in enumerate(rows):
            if i % YIELD_EVERY == YIELD_EVERY - 1:
                await asyncio.sleep(0)  # the IO loop answers between slices of the servers
            key = (row.user, row.server)
            live.add(key)
            if key in self.stopped:
                continue
            try:
                d = await self._one(row, memberships.get(row.user, []), now)
            except Exception as e:  # one server's trouble never stops the others
                self.log.warning("costguard-hub: culling %s/%s: %s", row.user, row.server, e)
                continue
            done.append((row, d))
        for key in list(self.rounds):
            if key not in live:
                self.rounds.pop(key, None)
        self.stopped &= live
        return done

    async def _one(self, row: ServerRow, groups: list[str], now: float) -> Decision:
        key = (row.user, row.server)
        d = decide(row, groups, self.policies, now, self.kept.get(key),
                   fresh_seconds=self.fresh_seconds, keep_ceiling=self.keep_ceiling)
        if d.action in (KEEP, DEFER):
            if (d.action == KEEP and d.idle_seconds is None) or d.action == DEFER:
                self.rounds.pop(key, None)  # busy again, or no longer judged: withdrawn
            return d
        start = d.idle_start if d.idle_start is not None else max(
            row.gpu_idle_since or now, self.kept.get(key, 0.0))
        current = self.rounds.get(key)
        if current is None or current.start != start:
            current = self.rounds[key] = Round(start, {})
            self.record(now, row.user, row.server, "warn", d.reason)
            if row.activity_source == "node" and row.state != OK:
                # judged by the node while its server does not report: the warning cannot
                # ride on an answer, so its lead runs from now (silence stops nothing early)
                current.delivered_at = now
        if current.delivered_at is None and row.activity_source == "node" \
                and row.state != OK:
            # it went silent after the round began: no report will carry the warning, so
            # its lead runs from now (silence neither stops early nor keeps)
            current.delivered_at = now
        delivered = current.delivered_at
        current.warning = self._warning(d, f"{ALERT_KIND}:{start:.0f}", now,
                                        self.may_keep(key, now))
        if d.action != STOP:
            return d
        policy = policy_for(self.policies, row.profile, groups)
        warn_for = (policy.warn_minutes if policy else 0.0) * 60
        if delivered is None or now - delivered < warn_for:
            why = "the warning has not reached the server yet" if delivered is None else \
                f"warned {now - delivered:.0f} s ago"
            return Decision(WARN, f"{d.reason}; {why}", d.policy, d.idle_seconds,
                            None if delivered is None else delivered + warn_for, start)
        if self.dry_run:
            self.log.info("costguard-hub: dry run: would stop %s/%s: %s", row.user,
                          row.server, d.reason)
            self.record(now, row.user, row.server, "would-stop", d.reason)
            self.stopped.add(key)
            return d
        self.log.info("costguard-hub: stopping %s/%s: %s", row.user, row.server, d.reason)
        self.record(now, row.user, row.server, "stop", d.reason)  # why, before it goes
        self.stopped.add(key)
        try:
            await self.stop_server(row.user, row.server)
        except Exception as e:
            self.stopped.discard(key)
            self.record(time.time(), row.user, row.server, "stop-failed", str(e))
            raise
        return d
