"""Guard rule `budget`: spend against per-notebook and per-server budgets.

Budgets are amounts in the configured currency, compared with the ledger's running totals:
a notebook's spend over all the kernels that ever served it (persisted across restarts) and
the server's spend in `server_budget_period` (calendar month by default, UTC; "none": since
its ledger began, as before), counted from a mark the ledger keeps. A notebook's budget is
the number in its metadata, `{"costguard": {"budget": 12.5}}`, else `notebook_budget`; the
server's is `server_budget`. Budgets that are unset (None) or not positive are off.

At `budget_warn_fraction` of a budget the rule raises a warning; at 100% the same alert
(kind "budget", key "server" or "notebook:<path>") turns critical. With `budget_enforce`,
crossing 100% interrupts the busy kernels (the notebook's, or every kernel for the server's
budget) once per crossing, and `BudgetRule.refuses(path)` tells the offload code to refuse
new batch jobs. A crossing ends when spend falls back under the budget (the budget was
raised); only then can a later crossing interrupt again.

Notebooks are judged while they have a live kernel: a notebook's alert resolves when its
last kernel stops, and is raised again if it is reopened while still over its budget.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_costguard.common.periods import period_start
from jupyter_costguard.guard.base import Act, Finding, GuardContext, RuleResult
from jupyter_costguard.guard.config import GuardConfig
from jupyter_costguard.guard.wording import money
from jupyter_costguard.sampling.records import KernelSample

log = logging.getLogger("jupyter_costguard")

SERVER_KEY = "server"
NOTEBOOK_PREFIX = "notebook:"
#: Notebooks larger than this are not read for a budget (logged once).
MAX_NOTEBOOK_BYTES = 256 << 20
#: At most this many notebooks' overrides are cached.
MAX_CACHED = 10_000


def notebook_key(path: str) -> str:
    return NOTEBOOK_PREFIX + path


class BudgetRule:
    kind = "budget"

    #: notebook-metadata budgets are read in the background; give them a few samples
    settle_seconds = 10.0

    def __init__(self, config: GuardConfig) -> None:
        self.config = config
        #: keys over 100% whose crossing has been handled (interrupts sent)
        self._crossed: set[str] = set()
        #: how many kernels were interrupted at each key's crossing
        self._interrupted: dict[str, int] = {}
        #: key -> why offloads are refused, as of the latest sample; replaced whole each tick
        #: (read from the IO loop by `refuses`)
        self._refusals: dict[str, str] = {}

    # --- for the offload code ----------------------------------------------------------

    def refuses(self, notebook_path: str | None) -> str | None:
        """Why a new batch job from `notebook_path` must be refused (a sentence), or None.

        Only with `budget_enforce`; as of the latest sample. Thread-safe."""
        if not self.config.budget_enforce:
            return None
        refusals = self._refusals
        if SERVER_KEY in refusals:
            return refusals[SERVER_KEY]
        if notebook_path:
            return refusals.get(notebook_key(notebook_path.strip("/")))
        return None

    # --- the rule ------------------------------------------------------------------------

    def evaluate(self, ctx: GuardContext) -> RuleResult:
        result = RuleResult()
        sample = ctx.published.sample
        if sample is None:
            return result
        cfg = self.config
        currency = ctx.published.pricing.currency
        refusals = dict(self._refusals)
        live: dict[str, list[KernelSample]] = {}
        for k in sample.kernels:
            if k.info.path:
                live.setdefault(k.info.path, []).append(k)

        server_budget = _positive(cfg.server_budget)
        if server_budget is None:
            self._forget(SERVER_KEY, refusals)
        else:
            spend, source = self._server_spend(ctx, sample.time)
            self._judge(ctx, result, refusals, SERVER_KEY, None, spend, server_budget,
                        source, list(sample.kernels), currency)

        configured = _positive(cfg.notebook_budget)
        for path, kernels in sorted(live.items()):
            key = notebook_key(path)
            budget, source = self._budget_for(ctx, path, configured)
            if budget is None:
                self._forget(key, refusals)
                continue
            totals = ctx.ledger.notebooks.get(path)
            spend = totals.spend if totals is not None else 0.0
            self._judge(ctx, result, refusals, key, path, spend, budget, source, kernels,
                        currency)
        self._refusals = refusals
        return result

    def _server_spend(self, ctx: GuardContext, now: float) -> tuple[float, str]:
        """The server's spend in its budget period, and where the budget comes from."""
        period = self.config.server_budget_period
        if period == "none":
            return ctx.ledger.server.spend, "config"
        start = period_start(period, now)
        since = time.strftime("%Y-%m-%d", time.gmtime(start))
        return ctx.ledger.period_spend(start), f"config, per {period} since {since} UTC"

    @staticmethod
    def _budget_for(ctx: GuardContext, path: str,
                    configured: float | None) -> tuple[float | None, str]:
        """The notebook's budget, and where it comes from: its metadata, else the config."""
        try:
            override = ctx.notebook_budgets.get(path)
        except Exception:  # a broken reader must not take the config budget away
            log.exception("costguard: reading the budget of %s failed", path)
            override = None
        if override is not None:
            value = _positive(override)
            if value is not None:
                return value, "notebook metadata"
        return configured, "config"

    def _forget(self, key: str, refusals: dict[str, str]) -> None:
        self._crossed.discard(key)
        self._interrupted.pop(key, None)
        refusals.pop(key, None)

    def _judge(self, ctx: GuardContext, result: RuleResult, refusals: dict[str, str],
               key: str, path: str | None, spend: float, budget: float, source: str,
               kernels: list[KernelSample], currency: str) -> None:
        cfg = self.config
        fraction = spend / budget
        warn_at = min(1.0, max(0.0, cfg.budget_warn_fraction))
        over = fraction >= 1.0
        if not over:
            self._forget(key, refusals)
            if fraction < warn_at or warn_at >= 1.0:
                return
        busy = [k for k in kernels if k.info.execution_state == "busy"]
        if over and key not in self._crossed:
            self._crossed.add(key)
            interrupted = 0
            if cfg.budget_enforce:
                for k in busy:
                    result.acts.append(Act(
                        action="interrupt-kernel", kernel_id=k.info.kernel_id,
                        reason=f"{self._whose(path)} budget of {money(budget, currency)} "
                        f"is spent ({money(spend, currency)}; c.Guard.budget_enforce)"))
                    interrupted += 1
            self._interrupted[key] = interrupted
        if over and cfg.budget_enforce:
            refusals[key] = (
                f"{self._whose(path)} budget is spent: {spend:,.2f} of {money(budget, currency)} "
                f"(budget from {source}). New batch jobs are refused while "
                f"c.Guard.budget_enforce is on; raise the budget to continue.")
        result.findings.append(self._finding(key, path, spend, budget, source, fraction,
                                             kernels, busy, currency))

    @staticmethod
    def _whose(path: str | None) -> str:
        return f"{path}'s" if path else "The server's"

    def _finding(self, key: str, path: str | None, spend: float, budget: float, source: str,
                 fraction: float, kernels: list[KernelSample], busy: list[KernelSample],
                 currency: str) -> Finding:
        cfg = self.config
        who = path if path else "This server"
        name = path if path else "server"
        pct = math.floor(fraction * 100)
        over = fraction >= 1.0
        actions: list[dict[str, Any]] = [{"id": "open-panel", "label": "Open cost panel"}]
        kernel_id = kernels[0].info.kernel_id if path and len(kernels) == 1 else None
        if over:
            severity = "critical"
            title = f"Over budget: {name}"
            message = (f"{who} has spent {money(spend, currency)}, over its budget of "
                       f"{money(budget, currency)} ({pct}%).")
            if cfg.budget_enforce:
                n = self._interrupted.get(key, 0)
                if n:
                    message += (f" Costguard interrupted {n} running kernel"
                                f"{'s' if n != 1 else ''}")
                else:
                    message += " Nothing was running to interrupt"
                message += " and refuses new batch jobs until the budget is raised."
            if kernel_id is not None and busy:
                actions.append({"id": "interrupt-kernel", "label": "Interrupt kernel",
                                "args": {"kernel_id": kernel_id}})
        else:
            severity = "warning"
            title = f"{math.floor(cfg.budget_warn_fraction * 100)}% of budget spent: {name}"
            message = (f"{who} has spent {spend:,.2f} of its {money(budget, currency)} budget "
                       f"({pct}%).")
            if cfg.budget_enforce:
                message += " At 100% its running kernels are interrupted and new batch " \
                           "jobs refused."
        actions.append({"id": "snooze", "label": "Snooze"})
        details: dict[str, Any] = {
            "scope": "notebook" if path else "server",
            "spend": round(spend, 6),
            "budget": budget,
            "budget_source": source,
            "fraction": round(fraction, 6),
            "warn_fraction": cfg.budget_warn_fraction,
            "currency": currency,
            "enforce": cfg.budget_enforce,
            "kernel_ids": [k.info.kernel_id for k in kernels] if path else [],
        }
        if over and cfg.budget_enforce:
            details["interrupted_kernels"] = self._interrupted.get(key, 0)
            details["offloads_refused"] = True
        return Finding(kind=self.kind, key=key, severity=severity, title=title,
                       message=message, notebook=path, kernel_id=kernel_id,
                       actions=tuple(actions), details=details)


def _positive(value: Any) -> float | None:
    """A usable budget: a finite number above zero (bools are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    v = float(value)
    return v if math.isfinite(v) and v > 0 else None


# --- notebook metadata overrides ----------------------------------------------------------


@dataclass
class _Cached:
    stamp: tuple[int, int]  # (mtime_ns, size)
    budget: float | None


@dataclass(frozen=True)
class _Where:
    """Where a notebook path as asked for lives: its key in the cache and its file (None:
    no notebook inside the root), worked out once per path."""

    key: str
    file: str | None


class NotebookBudgets:
    """Budget overrides from notebook metadata, `{"costguard": {"budget": 12.5}}`.

    Wired as `GuardEngine.notebook_budgets`: calling it returns a read-through mapping (path ->
    budget) that reads a notebook file only when the budget rule asks for that path, which
    it does for notebooks with live kernels only, on the sampler thread (never the IO
    loop). Files are looked up relative to `root_dir`, re-read only when their mtime or
    size changes, and scanned for the word "costguard" before being parsed. A malformed
    value is logged once (per notebook and value) and ignored. Each sample costs one
    `stat` per live notebook: where a path's file is, and its budget while the file is
    unchanged, are remembered.
    """

    def __init__(self, root_dir: str | os.PathLike[str],
                 logger: logging.Logger | None = None) -> None:
        self.root = Path(root_dir).expanduser().resolve()
        self.log = logger or log
        self._cache: dict[str, _Cached] = {}
        self._where: dict[str, _Where] = {}
        self._logged: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def __call__(self) -> Mapping[str, float]:
        return _Overrides(self)

    def file_for(self, path: str) -> Path | None:
        """The notebook's file, or None when `path` is no notebook inside the root."""
        path = path.strip("/")
        if not path.endswith(".ipynb"):
            return None
        parts = path.split("/")
        if any(p in ("", ".", "..") for p in parts):
            return None
        return self.root.joinpath(*parts)

    def _locate(self, path: str) -> _Where:
        where = self._where.get(path)
        if where is None:
            key = path.strip("/")
            file = self.file_for(key)
            where = _Where(key, None if file is None else str(file))
            if len(self._where) >= MAX_CACHED:
                self._where.clear()
            self._where[path] = where
        return where

    def get(self, path: str) -> float | None:
        """The notebook's budget override, or None."""
        where = self._locate(path)
        if where.file is None:
            return None
        path = where.key
        try:
            st = os.stat(where.file)
        except OSError:
            if path in self._cache:
                with self._lock:
                    self._cache.pop(path, None)
            return None
        stamp = (st.st_mtime_ns, st.st_size)
        cached = self._cache.get(path)  # a dict read needs no lock; writes take it
        if cached is not None and cached.stamp == stamp:
            return cached.budget
        budget = self._read(path, Path(where.file), st.st_size, cached)
        with self._lock:
            if len(self._cache) >= MAX_CACHED and path not in self._cache:
                self._cache.pop(next(iter(self._cache)))
            self._cache[path] = _Cached(stamp, budget)
        return budget

    def cached(self) -> dict[str, float]:
        """What has been read so far (path -> budget), for the mapping's iteration."""
        with self._lock:
            return {p: c.budget for p, c in self._cache.items() if c.budget is not None}

    def _once(self, path: str, what: str, message: str, *args: Any) -> None:
        if (path, what) in self._logged:
            return
        if len(self._logged) > MAX_CACHED:
            self._logged.clear()
        self._logged.add((path, what))
        self.log.warning(message, *args)

    def _read(self, path: str, file: Path, size: int, previous: _Cached | None) -> float | None:
        if size > MAX_NOTEBOOK_BYTES:
            self._once(path, "size", "costguard: %s is too large (%d bytes) to read its "
                       "budget from; using the configured budget", path, size)
            return None
        try:
            data = file.read_bytes()
        except OSError as e:
            self._once(path, "read", "costguard: cannot read %s for its budget: %s", path, e)
            return previous.budget if previous else None
        if b"costguard" not in data:
            return None
        try:
            doc = json.loads(data)
        except ValueError as e:
            self._once(path, "json", "costguard: %s is not valid JSON (%s); its budget "
                       "override is ignored", path, e)
            return previous.budget if previous else None
        meta = doc.get("metadata") if isinstance(doc, dict) else None
        section = meta.get("costguard") if isinstance(meta, dict) else None
        if section is None:
            return None
        if not isinstance(section, dict):
            self._once(path, f"section:{section!r:.100}",
                       "costguard: %s: metadata costguard must be an object like "
                       '{"budget": 12.5}, not %r; ignored', path, section)
            return None
        if "budget" not in section or section["budget"] is None:
            return None
        value = section["budget"]
        budget = _positive(value)
        if budget is None:
            self._once(path, f"budget:{value!r:.100}",
                       "costguard: %s: metadata costguard.budget must be a positive number, "
                       "not %r; ignored (the configured budget applies)", path, value)
        return budget


class _Overrides(Mapping[str, float]):
    """Read-through view of `NotebookBudgets` (see there)."""

    def __init__(self, reader: NotebookBudgets) -> None:
        self._reader = reader

    def __getitem__(self, path: str) -> float:
        value = self._reader.get(path)
        if value is None:
            raise KeyError(path)
        return value

    def get(self, path: str, default: Any = None) -> Any:
        """What `__getitem__` finds, without raising and catching a KeyError per miss."""
        value = self._reader.get(path)
        return default if value is None else value

    def __iter__(self) -> Iterator[str]:
        return iter(self._reader.cached())

    def __len__(self) -> int:
        return len(self._reader.cached())
