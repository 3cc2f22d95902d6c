"""GPU-aware culling: per group or spawner profile, stop servers whose GPUs have all sat idle
too long, after warning the user in their own JupyterLab; never one busy on a GPU.

One decision function serves both the service's own culler and the arbiter hook for
jupyterhub-idle-culler 2, so the two can never disagree:

- no fresh costguard figures for the server: costguard does not judge it (the culler's
  usual rule applies; the service's culler leaves it alone);
- a GPU at or above the idle threshold (or one that cannot report): keep, whatever the
  kernels say: a silent training run is not idle;
- no policy matches the server's profile or the user's groups: leave it to the usual culler;
- every GPU idle for the policy's limit (counted from the later of when they went idle and
  when the user last chose "keep running"): stop; within `warn_minutes` of it: warn.

Policies, in `c.CostGuardHub.cull_policies`, first match wins:

    [{"name": "gpu", "profiles": ["gpu-a100", "gpu-h100"], "idle_minutes": 30,
      "warn_minutes": 5}]

A policy with neither `profiles` nor `groups` matches every server.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from jupyter_costguard.hub.store import OK, ServerRow, read_only, server_row

KEEP, WARN, STOP, DEFER = "keep", "warn", "stop", "defer"
#: the alert kind the warnings are raised under in the user's server
ALERT_KIND = "hub-cull"


@dataclass(frozen=True)
class CullPolicy:
    name: str
    idle_minutes: float
    warn_minutes: float = 5.0
    profiles: frozenset[str] = field(default_factory=frozenset)
    groups: frozenset[str] = field(default_factory=frozenset)

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
        unknown = set(doc) - {"name", "idle_minutes", "warn_minutes", "profiles", "groups"}
        if unknown:
            raise ValueError(f"cull_policies[{index}]: unknown keys {sorted(unknown)}")
        return cls(str(doc.get("name", f"policy {index}")), idle, warn,
                   frozenset(doc.get("profiles") or ()), frozenset(doc.get("groups") or ()))

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


def decide(row: ServerRow | None, groups: Iterable[str], policies: list[CullPolicy],
           now: float, kept_at: float | None = None, fresh_seconds: float = 120.0,
           ) -> Decision:
    if row is None or row.state != OK or row.last_ok is None \
            or now - row.last_ok > fresh_seconds:
        return Decision(DEFER, "no fresh costguard figures for this server")
    if row.gpus_busy > 0 or row.gpu_idle_since is None:
        return Decision(KEEP, f"{row.gpus_busy} GPU(s) busy")
    policy = policy_for(policies, row.profile, groups)
    if policy is None:
        return Decision(DEFER, "no GPU culling policy for this profile or group")
    start = max(row.gpu_idle_since, kept_at or 0.0)
    idle = max(0.0, now - start)
    limit = policy.idle_minutes * 60
    stop_at = start + limit
    if idle >= limit:
        return Decision(STOP, f"every GPU idle for {idle / 60:.0f} min (policy "
                              f"{policy.name}: {policy.idle_minutes:g} min)",
                        policy.name, idle, stop_at)
    if idle >= limit - policy.warn_minutes * 60:
        return Decision(WARN, f"every GPU idle for {idle / 60:.0f} min; stopping at "
                              f"{policy.idle_minutes:g} min (policy {policy.name})",
                        policy.name, idle, stop_at)
    return Decision(KEEP, f"GPUs idle for {idle / 60:.0f} min, under the policy's "
                          f"{policy.idle_minutes:g} min", policy.name, idle, stop_at)


# --- the arbiter for jupyterhub-idle-culler 2 ---------------------------------------------

def read_row(db_path: str | Path, user: str, server: str,
             ) -> tuple[ServerRow | None, list[str], float | None]:
    """One server's row, the user's groups and their last "keep running", read-only."""
    found = read_only(
        db_path,
        ("SELECT user, server, url, state, detail, last_ok, last_try, currency, simulated, "
         "rate_per_hour, gpu_count, gpus_held, gpus_busy, gpu_idle_since, profile "
         "FROM servers WHERE user = ? AND server = ?", (user, server)),
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

    Uses the service's policies and figures (its SQLite, read-only): a GPU-busy server is
    never culled for kernel silence, a GPU-idle one under a policy is culled at the policy's
    limit even while a forgotten tab keeps it "active"; the rest keep the culler's rule."""
    from jupyter_costguard.hub.spawn import load_settings

    settings = load_settings(config_file)
    policies = policies_from(settings.get("cull_policies") or [])
    db = settings.get("db_path", "costguard_hub.sqlite")
    fresh = 4 * float(settings.get("poll_interval", 30.0)) + 10.0

    def arbiter(*, inactive: timedelta, inactive_limit: float, server: dict[str, Any],
                **_: Any) -> bool:
        user, _slash, name = str(server.get("full_name", "")).partition("/")
        row, groups, kept = read_row(db, user, name)
        decision = decide(row, groups, policies, clock(), kept, fresh)
        if decision.action == DEFER:
            return inactive.total_seconds() >= inactive_limit
        return decision.action == STOP

    return arbiter


# --- the service's own culler ---------------------------------------------------------------

class CullClient:
    """What the culler does to servers (the poller implements it over HTTP)."""

    async def raise_alert(self, url: str, body: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    async def dismiss_alert(self, url: str, alert_id: str) -> None:
        raise NotImplementedError

    async def active_jobs(self, url: str) -> int:
        raise NotImplementedError

    async def stop_server(self, user: str, server: str) -> None:
        raise NotImplementedError


@dataclass
class Round:
    """One server's current warning: from when its GPUs were idle, and the alert raised."""

    start: float
    alert_id: str | None = None
    warned_at: float | None = None


class Culler:
    """Runs after each poll: warns, stops (or, dry-run, logs what it would stop), records why.

    A stop needs a warning at least `warn_minutes` old, so a user always sees one; the user's
    "Keep running" (dismissing the warning) restarts the idle clock and is recorded."""

    def __init__(self, policies: list[CullPolicy], client: CullClient, *, dry_run: bool,
                 record: Callable[[float, str, str, str, str], None], log: Any,
                 hub_url: str = "") -> None:
        self.policies = policies
        self.client = client
        self.dry_run = dry_run
        self.record = record
        self.log = log
        self.hub_url = hub_url
        self.rounds: dict[tuple[str, str], Round] = {}
        self.kept: dict[tuple[str, str], float] = {}
        self.stopped: set[tuple[str, str]] = set()

    def _alert(self, row: ServerRow, d: Decision, key: str, now: float) -> dict[str, Any]:
        minutes = max(0.0, ((d.stop_at or now) - now) / 60)
        return {
            "kind": ALERT_KIND, "key": key, "severity": "critical" if minutes < 1 else "warning",
            "title": f"This GPU server will be stopped in {minutes:.0f} min",
            "message": (f"Every GPU on this server has been idle for "
                        f"{(d.idle_seconds or 0) / 60:.0f} min, and the hub's policy "
                        f"({d.policy}) stops idle GPU servers. Save your work, or choose "
                        "Keep running if you still need the GPUs."),
            "actions": [{"id": "dismiss", "label": "Keep running"}],
            "details": {"stop_at": d.stop_at, "policy": d.policy,
                        "idle_seconds": d.idle_seconds},
        }

    async def run(self, rows: list[ServerRow], memberships: Mapping[str, list[str]],
                  now: float) -> list[tuple[ServerRow, Decision]]:
        done = []
        live = set()
        for row in rows:
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
        d = decide(row, groups, self.policies, now, self.kept.get(key))
        current = self.rounds.get(key)
        if d.action in (KEEP, DEFER):
            if current is not None and current.alert_id and d.action == KEEP \
                    and (d.idle_seconds is None):
                # the GPUs went busy again: take the warning back
                await self.client.dismiss_alert(row.url, current.alert_id)
                self.rounds.pop(key, None)
            return d
        start = row.gpu_idle_since or now
        if current is None or current.start != max(start, self.kept.get(key, 0.0)):
            current = self.rounds[key] = Round(max(start, self.kept.get(key, 0.0)))
        alert = await self.client.raise_alert(
            row.url, self._alert(row, d, f"{ALERT_KIND}:{current.start:.0f}", now))
        if current.warned_at is None:
            current.warned_at = now
            current.alert_id = str(alert.get("id"))
            self.record(now, row.user, row.server, "warn", d.reason)
        if alert.get("state") == "dismissed":  # the user chose "Keep running"
            self.kept[key] = now
            self.rounds.pop(key, None)
            self.record(now, row.user, row.server, "kept", "the user chose Keep running")
            return Decision(KEEP, "the user chose Keep running", d.policy)
        if d.action != STOP:
            return d
        policy = policy_for(self.policies, row.profile, groups)
        warn_for = (policy.warn_minutes if policy else 0.0) * 60
        if now - current.warned_at < warn_for:
            return Decision(WARN, f"{d.reason}; warned {now - current.warned_at:.0f} s ago",
                            d.policy, d.idle_seconds, current.warned_at + warn_for)
        jobs = await self.client.active_jobs(row.url)
        if jobs:
            return Decision(KEEP, f"{jobs} batch job(s) running", d.policy, d.idle_seconds)
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
            await self.client.stop_server(row.user, row.server)
        except Exception as e:
            self.stopped.discard(key)
            self.record(time.time(), row.user, row.server, "stop-failed", str(e))
            raise
        return d
