"""Alerts: what costguard wants a person to notice, deduplicated, dismissable, persistent.

An alert is identified by the condition that raised it, a `(kind, key)` pair (the key is
typically a notebook path or a kernel id). Raising the same pair again updates the one alert
instead of adding another, and a dismissed alert stays dismissed for as long as its
condition persists: only `resolve(kind, key)` (the condition ended) retires it, after which
the next raise is a new alert. A snoozed alert comes back by itself after `snoozed_until`.

The store lives in memory (readers on the IO loop never touch the disk) and is mirrored into
an `alert` table in the ledger's SQLite file. Changes mark rows dirty; `flush()` writes them
in one transaction. In the server `flush` only ever runs on the service's single worker
thread (the store is given a `schedule` hook that submits to it), so the IO loop never
waits for SQLite. All public methods are thread-safe: the guard raises from the sampler
thread, the API dismisses and snoozes from the IO loop.
"""

from __future__ import annotations

import copy
import json
import logging
import re
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_costguard.common.jsonlimits import check_string, parse_json
from jupyter_costguard.common.sqlite import Schema, open_db

SEVERITIES = ("info", "warning", "critical")
SEVERITY_RANK = {s: i for i, s in enumerate(SEVERITIES)}
STATES = ("active", "dismissed", "snoozed")
SOURCES = ("guard", "api")
#: What a UI may offer as a button on an alert.
ACTION_IDS = (
    "open-panel", "snooze", "dismiss", "shutdown-kernel", "restart-kernel", "interrupt-kernel",
    "offload", "open-url", "hibernate",
)
#: Kinds the guard raises (the API accepts any kind its `AlertRequest` schema does).
KNOWN_KINDS = (
    "training-sized-interactive", "idle-gpu-kernel", "budget", "auto-stop", "starved-gpu", "test",
    "kernel-hibernated",
)

#: A request's fields and their limits are written once, in web/openapi.yaml (AlertRequest,
#: SnoozeRequest); its body's size, which no schema states, here.
MAX_BODY_BYTES = 64 * 1024

#: Resolved and dismissed alerts are forgotten this long after their condition was last seen.
RETENTION_SECONDS = 30 * 86400
#: However many alerts come and go, memory and the table hold at most this many retired ones.
MAX_RETIRED = 5000
#: Active alerts raised through the API (a script gone wrong should not fill the UI forever).
MAX_ACTIVE_API = 1000
PRUNE_EVERY_SECONDS = 3600.0
#: A re-raise that changes nothing but `updated` is written at most this often.
TOUCH_PERSIST_SECONDS = 60.0

#: version 1, the baseline: the table as it has been since alerts were stored (a file from
#: before versions already has it, unchanged)
BASELINE = """
CREATE TABLE IF NOT EXISTS alert (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    key TEXT NOT NULL,
    severity TEXT NOT NULL,
    notebook TEXT,
    kernel_id TEXT,
    title TEXT NOT NULL,
    message TEXT NOT NULL,
    actions TEXT NOT NULL,       -- JSON list
    details TEXT NOT NULL,       -- JSON object
    created REAL NOT NULL,
    updated REAL NOT NULL,
    state TEXT NOT NULL,         -- active | dismissed | snoozed
    snoozed_until REAL,
    source TEXT NOT NULL,        -- guard | api
    resolved REAL                -- when the condition ended; NULL while it persists
);
"""
#: the alerts' table, in the ledger's file (whose own versions count in slot 0): slot 1
SCHEMA = Schema("alerts", (BASELINE,), slot=1)

log = logging.getLogger("jupyter_costguard")


class AlertError(ValueError):
    """A request to raise or change an alert is invalid; the message names the field."""


class AlertLimitError(AlertError):
    """Too many active alerts raised through the API."""


@dataclass
class Alert:
    id: str
    kind: str
    key: str
    severity: str
    title: str
    message: str
    notebook: str | None = None
    kernel_id: str | None = None
    actions: list[dict[str, Any]] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    created: float = 0.0
    updated: float = 0.0
    state: str = "active"
    snoozed_until: float | None = None
    source: str = "guard"
    resolved: float | None = None

    def effective_state(self, now: float) -> str:
        """A snooze that has run out is active again."""
        if self.state == "snoozed" and (self.snoozed_until is None or self.snoozed_until <= now):
            return "active"
        return self.state

    def is_active(self, now: float) -> bool:
        return self.resolved is None and self.effective_state(now) == "active"

    def to_dict(self, now: float) -> dict[str, Any]:
        """The API's shape (see `Alert` in openapi.yaml); a deep copy."""
        state = self.effective_state(now)
        return {
            "id": self.id,
            "kind": self.kind,
            "key": self.key,
            "severity": self.severity,
            "notebook": self.notebook,
            "kernel_id": self.kernel_id,
            "title": self.title,
            "message": self.message,
            "actions": copy.deepcopy(self.actions),
            "details": copy.deepcopy(self.details),
            "created": self.created,
            "updated": self.updated,
            "state": state,
            "snoozed_until": self.snoozed_until if state == "snoozed" else None,
            "source": self.source,
            "resolved": self.resolved,
        }

    def copy(self) -> Alert:
        return copy.deepcopy(self)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _storable(text: str | None) -> str | None:
    """Text SQLite can hold: a lone surrogate (which UTF-8 cannot encode, so every save would
    fail) becomes U+FFFD. The API refuses them; this covers what comes from inside."""
    return _SURROGATE.sub("\ufffd", text) if text is not None else None


def _storable_json(value: Any, empty: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (ValueError, TypeError, RecursionError) as e:
        log.warning("costguard: alert field not saved (%s); saving %r instead", e, empty)
        text = json.dumps(empty)
    return _SURROGATE.sub("\ufffd", text)


def _row(a: Alert) -> tuple[Any, ...]:
    return (a.id, a.kind, _storable(a.key), a.severity, _storable(a.notebook),
            _storable(a.kernel_id), _storable(a.title), _storable(a.message),
            _storable_json(a.actions, []), _storable_json(a.details, {}), a.created,
            a.updated, a.state, a.snoozed_until, a.source, a.resolved)


_COLUMNS = ("id, kind, key, severity, notebook, kernel_id, title, message, actions, details, "
            "created, updated, state, snoozed_until, source, resolved")


def _text(value: Any, name: str, nullable: bool = False) -> Any:
    if value is None and nullable:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{name} is not text")
    check_string(value, name)
    return value


def _number(value: Any, name: str, nullable: bool = False) -> Any:
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise ValueError(f"{name} is not a number")
    return float(value)


def _parse_row(row: tuple[Any, ...]) -> Alert:
    """One stored row as an Alert; ValueError (or JSONLimitError) when it does not parse."""
    (aid, kind, key, severity, notebook, kernel_id, title, message, actions, details,
     created, updated, state, snoozed_until, source, resolved) = row
    acts = parse_json(_text(actions, "actions"))
    det = parse_json(_text(details, "details"))
    if not isinstance(acts, list) or not all(isinstance(x, dict) for x in acts):
        raise ValueError("actions is not a list of objects")
    if not isinstance(det, dict):
        raise ValueError("details is not an object")
    return Alert(id=_text(aid, "id"), kind=_text(kind, "kind"), key=_text(key, "key"),
                 severity=severity if severity in SEVERITY_RANK else "warning",
                 title=_text(title, "title"), message=_text(message, "message"),
                 notebook=_text(notebook, "notebook", True),
                 kernel_id=_text(kernel_id, "kernel_id", True),
                 actions=acts, details=det,
                 created=_number(created, "created"), updated=_number(updated, "updated"),
                 state=state if state in STATES else "active",
                 snoozed_until=_number(snoozed_until, "snoozed_until", True),
                 source=_text(source, "source"),
                 resolved=_number(resolved, "resolved", True))


class AlertStore:
    """Alerts in memory, mirrored to the `alert` table of `db_path`."""

    def __init__(
        self,
        db_path: str | Path | None,
        clock: Callable[[], float] = time.time,
        schedule: Callable[[Callable[[], None]], object] | None = None,
        logger: logging.Logger | None = None,
        retention_seconds: float = RETENTION_SECONDS,
        max_retired: int = MAX_RETIRED,
    ) -> None:
        """`schedule(fn)` runs `fn` later on the thread that owns the database; without it,
        changes are written only by explicit `flush()` (and `close()`)."""
        self.clock = clock
        self.schedule = schedule
        self.log = logger or log
        self.retention_seconds = retention_seconds
        self.max_retired = max_retired
        self._lock = threading.RLock()
        self._io_lock = threading.Lock()  # one flush at a time, so writes land in order
        self._alerts: dict[str, Alert] = {}
        self._open: dict[tuple[str, str], str] = {}  # (kind, key) -> id, unresolved only
        self._dirty: dict[str, Alert | None] = {}  # id -> row to write, None to delete
        self._flush_pending = False
        self._persisted_updated: dict[str, float] = {}
        self._last_prune = 0.0
        self.raised_total: dict[str, int] = {}  # kind -> new alerts since the process started
        self.version = 0  # bumped on every visible change
        self.db: sqlite3.Connection | None = None
        if db_path is not None:
            self.db = open_db(db_path, SCHEMA)
            self._load()
        self.prune()

    def _load(self) -> None:
        """Rows one by one: a row that does not parse (bad JSON, nested too deep, a NUL or a
        lone surrogate, wrong types) is logged and skipped, never fatal to the extension."""
        assert self.db is not None
        cursor = self.db.execute(f"SELECT {_COLUMNS} FROM alert ORDER BY created")
        while True:
            try:
                row = cursor.fetchone()
            except sqlite3.Error as e:  # e.g. text that is not UTF-8: the rest is unreadable
                self.log.warning("costguard: stopped reading alerts at a bad row: %s", e)
                break
            if row is None:
                break
            try:
                a = _parse_row(row)
            except (ValueError, TypeError) as e:
                self.log.warning("costguard: alert row %r skipped: %s",
                                 row[0] if isinstance(row[0], str) else "?", e)
                continue
            self._alerts[a.id] = a
            self._persisted_updated[a.id] = a.updated
            if a.resolved is None:
                older = self._open.get((a.kind, a.key))
                if older is not None:  # cannot happen through this class; keep the newest
                    self._alerts[older].resolved = a.updated
                    self._dirty[older] = self._alerts[older]
                self._open[(a.kind, a.key)] = a.id

    # --- changes -------------------------------------------------------------------------

    def raise_alert(self, kind: str, key: str, severity: str, title: str, message: str,
                    **kw: Any) -> Alert:
        """Raise (or refresh) the alert for the condition `(kind, key)`; returns a copy."""
        return self.upsert(kind, key, severity, title, message, **kw)[0]

    def upsert(
        self,
        kind: str,
        key: str,
        severity: str,
        title: str,
        message: str,
        notebook: str | None = None,
        kernel_id: str | None = None,
        actions: list[dict[str, Any]] | None = None,
        details: dict[str, Any] | None = None,
        source: str = "guard",
    ) -> tuple[Alert, bool]:
        """`raise_alert`, also saying whether the alert is new (True) or was refreshed."""
        if severity not in SEVERITY_RANK:
            raise AlertError(f"severity must be one of {', '.join(SEVERITIES)}")
        if source not in SOURCES:
            raise AlertError(f"source must be one of {', '.join(SOURCES)}")
        actions = copy.deepcopy(actions or [])
        details = copy.deepcopy(details or {})
        with self._lock:
            now = self.clock()
            aid = self._open.get((kind, key))
            if aid is not None:
                a = self._alerts[aid]
                before = (a.severity, a.title, a.message, a.notebook, a.kernel_id, a.actions,
                          a.details, a.state)
                # an escalation is news: show again what the user dismissed or snoozed
                # (a budget at 100% after its 80% warning; a cull after an idle warning)
                if SEVERITY_RANK[severity] > SEVERITY_RANK[a.severity] \
                        and a.state in ("dismissed", "snoozed"):
                    a.state, a.snoozed_until = "active", None
                    self.log.warning("costguard alert %s [%s] escalated to %s: shown again",
                                     aid, kind, severity)
                a.severity, a.title, a.message = severity, title, message
                a.notebook, a.kernel_id = notebook, kernel_id
                a.actions, a.details = actions, details
                a.updated = max(a.updated, now)
                # a snooze that ran out is over: the alert is simply active again
                if a.state == "snoozed" and a.effective_state(now) == "active":
                    a.state, a.snoozed_until = "active", None
                changed = before != (a.severity, a.title, a.message, a.notebook, a.kernel_id,
                                     a.actions, a.details, a.state)
                if changed:
                    self.version += 1
                if changed or a.updated - self._persisted_updated.get(aid, 0.0) \
                        >= TOUCH_PERSIST_SECONDS:
                    self._mark(a)
                return a.copy(), False
            if source == "api":
                active_api = sum(1 for x in self._alerts.values()
                                 if x.source == "api" and x.is_active(now))
                if active_api >= MAX_ACTIVE_API:
                    raise AlertLimitError(
                        f"too many active alerts raised through the API ({MAX_ACTIVE_API}); "
                        "dismiss some first")
            aid = uuid.uuid4().hex[:12]
            while aid in self._alerts:
                aid = uuid.uuid4().hex[:12]
            a = Alert(id=aid, kind=kind, key=key, severity=severity, title=title,
                      message=message, notebook=notebook, kernel_id=kernel_id, actions=actions,
                      details=details, created=now, updated=now, source=source)
            self._alerts[aid] = a
            self._open[(kind, key)] = aid
            self.raised_total[kind] = self.raised_total.get(kind, 0) + 1
            self.version += 1
            self._mark(a)
            out = a.copy()
        level = logging.INFO if severity == "info" else logging.WARNING
        self.log.log(level, "costguard alert %s [%s, %s] for %s: %s: %s", aid, kind, severity,
                     notebook or (f"kernel {kernel_id}" if kernel_id else "the server"), title,
                     message)
        return out, True

    def dismiss(self, alert_id: str) -> Alert | None:
        """Hide the alert until its condition ends (idempotent); None if unknown."""
        with self._lock:
            a = self._alerts.get(alert_id)
            if a is None:
                return None
            if a.state != "dismissed":
                a.state, a.snoozed_until = "dismissed", None
                self.version += 1
                self._mark(a)
            return a.copy()

    def snooze(self, alert_id: str, seconds: float) -> Alert | None:
        """Hide the alert for `seconds` from now (idempotent; a later snooze replaces it)."""
        if not seconds > 0:
            raise AlertError("seconds must be positive")
        with self._lock:
            a = self._alerts.get(alert_id)
            if a is None:
                return None
            until = self.clock() + seconds
            if (a.state, a.snoozed_until) != ("snoozed", until):
                a.state, a.snoozed_until = "snoozed", until
                self.version += 1
                self._mark(a)
            return a.copy()

    def resolve(self, kind: str, key: str) -> Alert | None:
        """The condition `(kind, key)` ended: retire its alert (a later raise is a new one)."""
        with self._lock:
            aid = self._open.pop((kind, key), None)
            if aid is None:
                return None
            a = self._alerts[aid]
            a.resolved = max(self.clock(), a.updated)
            self.version += 1
            self._mark(a)
            return a.copy()

    def _mark(self, a: Alert) -> None:
        """Queue `a` for writing (lock held)."""
        self._dirty[a.id] = a
        self._request_flush()

    def _request_flush(self) -> None:
        if self.schedule is None or self._flush_pending or self.db is None:
            return
        self._flush_pending = True
        try:
            self.schedule(self.flush)
        except RuntimeError:  # the executor has shut down: close() has written everything
            self._flush_pending = False

    # --- reads (memory only) -------------------------------------------------------------

    def open_conditions(self, source: str = "guard") -> set[tuple[str, str]]:
        """(kind, key) of every unresolved alert raised by `source`."""
        with self._lock:
            return {c for c, aid in self._open.items() if self._alerts[aid].source == source}

    def get(self, alert_id: str) -> Alert | None:
        with self._lock:
            a = self._alerts.get(alert_id)
            return a.copy() if a is not None else None

    def find(self, kind: str, key: str) -> Alert | None:
        """The unresolved alert for `(kind, key)`, whatever its state."""
        with self._lock:
            aid = self._open.get((kind, key))
            return self._alerts[aid].copy() if aid is not None else None

    def _sorted(self, alerts: list[Alert]) -> list[Alert]:
        return sorted(alerts, key=lambda a: (-SEVERITY_RANK[a.severity], -a.created, a.id))

    def active(self, now: float | None = None, notebook: str | None = None) -> list[Alert]:
        """Alerts to show now (not dismissed, not snoozed, not resolved), most severe first."""
        with self._lock:
            now = self.clock() if now is None else now
            return [a.copy() for a in self._sorted([
                a for a in self._alerts.values()
                if a.is_active(now) and (notebook is None or a.notebook == notebook)])]

    def documents(self, now: float | None = None, notebook: str | None = None,
                  include_all: bool = False) -> list[dict[str, Any]]:
        """The API's alert list: active ones, or every alert still remembered."""
        with self._lock:
            now = self.clock() if now is None else now
            chosen = [a for a in self._alerts.values()
                      if (include_all or a.is_active(now))
                      and (notebook is None or a.notebook == notebook)]
            return [a.to_dict(now) for a in self._sorted(chosen)]

    def summary(self, now: float | None = None) -> dict[str, dict[str, Any]]:
        """Notebook path -> {"ids": active alert ids, "highest_severity": ...}."""
        out: dict[str, dict[str, Any]] = {}
        for a in self.active(now):
            if a.notebook is None:
                continue
            doc = out.setdefault(a.notebook, {"ids": [], "highest_severity": a.severity})
            doc["ids"].append(a.id)
        return out

    def counts(self, now: float | None = None) -> dict[tuple[str, str], int]:
        """(kind, severity) -> number of active alerts."""
        out: dict[tuple[str, str], int] = {}
        for a in self.active(now):
            out[(a.kind, a.severity)] = out.get((a.kind, a.severity), 0) + 1
        return out

    def raised(self) -> dict[str, int]:
        with self._lock:
            return dict(self.raised_total)

    # --- upkeep and the disk -------------------------------------------------------------

    def prune(self, now: float | None = None) -> int:
        """Forget resolved and dismissed alerts whose condition was last seen over the
        retention ago, then the oldest retired ones beyond `max_retired`. Returns how many."""
        with self._lock:
            now = self.clock() if now is None else now
            self._last_prune = now
            cutoff = now - self.retention_seconds

            def last_seen(a: Alert) -> float:
                return max(a.updated, a.resolved or 0.0)

            drop = [a for a in self._alerts.values()
                    if (a.resolved is not None or a.state == "dismissed")
                    and last_seen(a) < cutoff]
            retired = [a for a in self._alerts.values()
                       if a.resolved is not None and last_seen(a) >= cutoff]
            if len(retired) > self.max_retired:
                retired.sort(key=last_seen)
                drop += retired[:len(retired) - self.max_retired]
            for a in drop:
                del self._alerts[a.id]
                self._persisted_updated.pop(a.id, None)
                if self._open.get((a.kind, a.key)) == a.id:
                    del self._open[(a.kind, a.key)]
                self._dirty[a.id] = None
            if drop:
                self.version += 1
                self._request_flush()
            return len(drop)

    def flush(self) -> None:
        """Write every pending change in one transaction (the database's thread only)."""
        with self._io_lock:
            self._flush()

    def _flush(self) -> None:
        with self._lock:
            self._flush_pending = False
            if self.db is None:
                self._dirty.clear()
                return
            if self.clock() - self._last_prune > PRUNE_EVERY_SECONDS:
                self.prune()
            dirty = self._dirty
            self._dirty = {}
            upserts = [_row(a) for a in dirty.values() if a is not None]
            deletes = [(aid,) for aid, a in dirty.items() if a is None]
            written = {a.id: a.updated for a in dirty.values() if a is not None}
        if not upserts and not deletes:
            return
        db = self.db
        try:
            db.execute("BEGIN")
            try:
                if upserts:
                    db.executemany(
                        f"INSERT OR REPLACE INTO alert ({_COLUMNS}) VALUES "
                        "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", upserts)
                if deletes:
                    db.executemany("DELETE FROM alert WHERE id = ?", deletes)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        except Exception:
            self.log.exception("costguard: could not save alerts; will retry")
            with self._lock:  # newer changes win over what failed to be written
                for aid, a in dirty.items():
                    self._dirty.setdefault(aid, a)
            return
        with self._lock:
            self._persisted_updated.update(written)

    def close(self) -> None:
        with self._io_lock:
            self._flush()
            with self._lock:
                if self.db is not None:
                    self.db.close()
                    self.db = None


# --- validating what the API is sent -----------------------------------------------------
