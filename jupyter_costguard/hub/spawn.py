"""Budgets at spawn: a `c.Spawner.pre_spawn_hook` that refuses a GPU server once the period's
budget is spent, lets CPU servers through, and tells every server its budget.

    from jupyter_costguard.hub.spawn import budget_hook
    c.Spawner.pre_spawn_hook = budget_hook("/srv/costguard/costguard_hub_config.py")

It reads the service's own config file (budgets, period, which profiles are GPU ones) and
the service's SQLite (what each user has spent this period), so budgets are written once and
the check needs no network. Runs in the Hub's process; the SQLite read runs off its IO loop.
A site with its own hook calls `check_budget(spawner)` from it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from tornado import web
from traitlets.config import Config, PyFileConfigLoader

from jupyter_costguard.hub.budgets import Budgets, BudgetState, budget_states
from jupyter_costguard.hub.store import hour_bounds, read_only
from jupyter_costguard.periods import period_start

#: what the user's server reads to show the budget in JupyterLab
ENV_BUDGET = "COSTGUARD_HUB_BUDGET"
#: the GPU resource names a KubeSpawner profile asks for
GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")
ADJECTIVE = {"month": "monthly", "week": "weekly", "day": "daily"}


def load_settings(config_file: str | Path) -> dict[str, Any]:
    path = Path(config_file)
    loader = PyFileConfigLoader(path.name, path=str(path.parent))
    config: Config = loader.load_config()
    return dict(config.get("CostGuardHub", {}))


def is_gpu_spawn(spawner: Any, gpu_profiles: set[str]) -> bool:
    """A GPU server: its profile is one of `gpu_profiles`, or it asks for a GPU resource
    (KubeSpawner's `extra_resource_limits`), or its environment names GPUs to use."""
    options = getattr(spawner, "user_options", None) or {}
    profile = options.get("profile") if isinstance(options, dict) else None
    if isinstance(profile, str) and profile in gpu_profiles:
        return True
    for attr in ("extra_resource_limits", "extra_resource_guarantees"):
        limits = getattr(spawner, attr, None) or {}
        if any(float(limits.get(r, 0) or 0) > 0 for r in GPU_RESOURCES):
            return True
    return False


def spent_this_period(db_path: str | Path, users: list[str], since: float) -> dict[str, float]:
    """Each user's spend in the hours from `since` (nothing before the service wrote any)."""
    marks = ",".join("?" * len(users))
    found = read_only(db_path, (
        f"SELECT user, SUM(spend) FROM hours WHERE hour >= ? AND user IN ({marks}) "
        "GROUP BY user", (hour_bounds(since, None)[0], *users)))
    return {} if found is None else {u: float(s) for u, s in found[0]}


def members_of(db_path: str | Path, groups: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {g: [] for g in groups}
    if not groups:
        return out
    marks = ",".join("?" * len(groups))
    found = read_only(db_path, (
        f"SELECT user, grp FROM memberships WHERE grp IN ({marks})", groups))
    for user, grp in found[0] if found else []:
        out[grp].append(user)
    return out


def currency_of(db_path: str | Path) -> str:
    """The currency the servers report their money in ("" before any has been read)."""
    found = read_only(db_path, (
        "SELECT currency FROM servers WHERE currency IS NOT NULL LIMIT 1", ()))
    return str(found[0][0][0]) if found and found[0] else ""


def states_for(settings: dict[str, Any], user: str, groups: list[str], now: float,
               ) -> list[BudgetState]:
    budgets = Budgets(settings.get("budget_period", "month"),
                      settings.get("user_budgets") or {}, settings.get("group_budgets") or {},
                      settings.get("default_user_budget"))
    db = settings.get("db_path", "costguard_hub.sqlite")
    start = period_start(budgets.period, now)
    budgeted = [g for g in groups if budgets.for_group(g) is not None]
    members = members_of(db, budgeted)
    everyone = sorted({user, *(u for us in members.values() for u in us)})
    spent = spent_this_period(db, everyone, start)
    group_spend = {g: sum(spent.get(u, 0.0) for u in set(us) | {user})
                   for g, us in members.items()}
    return budget_states(budgets, user, groups, spent.get(user, 0.0), group_spend, now)


def refusal(states: list[BudgetState], currency: str = "") -> str | None:
    spent = [s for s in states if s.exhausted]
    if not spent:
        return None
    s = spent[0]
    whose = "your" if s.scope == "user" else f"group {s.name}'s"
    unit = f" {currency}" if currency else ""
    return (f"GPU servers are refused: {whose} {ADJECTIVE[s.period]} budget of "
            f"{s.budget:.2f}{unit} is spent ({s.spent:.2f}{unit} since "
            f"{time.strftime('%Y-%m-%d', time.gmtime(s.period_start))} UTC). It resets on "
            f"{time.strftime('%Y-%m-%d', time.gmtime(s.period_end))}; a CPU profile can "
            "still be started.")


async def check_budget(spawner: Any, settings: dict[str, Any]) -> list[BudgetState]:
    """Raise a 403 (shown on the spawn page) for a GPU spawn over budget; else give the
    server its budgets in `COSTGUARD_HUB_BUDGET` and return them."""
    user = spawner.user.name
    groups = sorted(g.name for g in getattr(spawner.user, "groups", []) or [])
    now = time.time()
    states = await asyncio.get_running_loop().run_in_executor(
        None, states_for, settings, user, groups, now)
    gpu = is_gpu_spawn(spawner, set(settings.get("gpu_profiles") or ()))
    why = None
    if gpu:
        currency = await asyncio.get_running_loop().run_in_executor(
            None, currency_of, settings.get("db_path", "costguard_hub.sqlite"))
        why = refusal(states, currency)
    if why is not None:
        spawner.log.warning("costguard: refusing %s's GPU server: %s", user, why)
        error = web.HTTPError(403, why)
        error.jupyterhub_message = why  # type: ignore[attr-defined]
        raise error
    spawner.environment = {**(spawner.environment or {}),
                           ENV_BUDGET: json.dumps([s.doc() for s in states])}
    return states


def budget_hook(config_file: str | Path, then: Callable[[Any], Any] | None = None,
                ) -> Callable[[Any], Awaitable[None]]:
    """A pre_spawn_hook that checks budgets, then runs the site's own hook `then`."""
    settings = load_settings(config_file)

    async def hook(spawner: Any) -> None:
        await check_budget(spawner, settings)
        if then is not None:
            result = then(spawner)
            if asyncio.iscoroutine(result):
                await result

    return hook
