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
import inspect
import sqlite3
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from tornado import web
from traitlets.config import Config, PyFileConfigLoader

from jupyter_costguard.common import hubbudget
from jupyter_costguard.common.periods import period_start
from jupyter_costguard.hub.budgets import Budgets, BudgetState, budget_states, shown_to_member
from jupyter_costguard.hub.profiles import (
    RESOURCE_ATTRS,
    asks_for_gpu,
    profile_overrides,
    profile_slug,
)
from jupyter_costguard.hub.store import counted_sql, hour_bounds

ADJECTIVE = {"month": "monthly", "week": "weekly", "day": "daily"}


def load_settings(config_file: str | Path) -> dict[str, Any]:
    path = Path(config_file)
    loader = PyFileConfigLoader(path.name, path=str(path.parent))
    config: Config = loader.load_config()
    return dict(config.get("CostGuardHub", {}))


class BudgetUnreadable(Exception):
    """The service's database cannot be read: spend is unknown, not zero."""


def read_db(db_path: str | Path, *queries: tuple[str, Sequence[Any]],
            ) -> list[list[tuple[Any, ...]]]:
    """Each query's rows from the service's SQLite, opened read-only. A file that is missing,
    unreadable, corrupt or without the service's tables raises `BudgetUnreadable`: only
    "no rows" means nothing was spent."""
    path = Path(db_path)
    if not path.is_file():
        raise BudgetUnreadable(f"{path} does not exist (has the costguard service run?)")
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error as e:
        raise BudgetUnreadable(f"{path}: {e}") from e
    try:
        return [db.execute(sql, tuple(params)).fetchall() for sql, params in queries]
    except sqlite3.Error as e:
        raise BudgetUnreadable(f"{path}: {e}") from e
    finally:
        db.close()


async def resolved_profile_list(spawner: Any) -> Any:
    """KubeSpawner's `profile_list`: a list, a dict, or a (possibly async) callable taking the
    spawner; None when the spawner has none."""
    profiles = getattr(spawner, "profile_list", None)
    if callable(profiles):
        profiles = profiles(spawner)
        if inspect.isawaitable(profiles):
            profiles = await profiles
    return profiles


async def is_gpu_spawn(spawner: Any, gpu_profiles: set[str]) -> bool:
    """A GPU server: the profile it will run (the default one when none was asked for) is one
    of `gpu_profiles`, or the resources it will request once KubeSpawner has applied that
    profile's overrides ask for a GPU. The overrides are applied here, on a copy: KubeSpawner
    applies them only after the pre_spawn_hook."""
    options = getattr(spawner, "user_options", None)
    options = options if isinstance(options, dict) else {}
    profiles = await resolved_profile_list(spawner)
    asked = options.get("profile")
    if profile_slug(options, profiles) in gpu_profiles or (
            isinstance(asked, str) and asked in gpu_profiles):
        return True
    overrides = profile_overrides(options, profiles)
    for attr in RESOURCE_ATTRS:
        own = getattr(spawner, attr, None)
        resources = dict(own) if isinstance(own, dict) else {}
        value = overrides.get(attr)
        if callable(value):  # KubeSpawner calls it with the spawner
            value = value(spawner)
        if isinstance(value, dict):  # and merges a dict into the spawner's own
            resources.update(value)
        if asks_for_gpu(resources):
            return True
    return False


def spent_this_period(db_path: str | Path, users: list[str], since: float,
                      count: str = "metered") -> dict[str, float]:
    """Each user's spend in the hours from `since` (nothing before the service wrote any), the
    figure the service counts (`count`: the meter by default, see hub/store.py)."""
    marks = ",".join("?" * len(users))
    columns = {r[1] for r in read_db(db_path, ("PRAGMA table_info(hours)", ()))[0]}
    # a database the service has not yet upgraded (the Hub restarted first) has no meter:
    # what servers reported is all there is until the service runs
    counted = counted_sql(count) if "priced" in columns else "spend"
    found = read_db(db_path, (
        f"SELECT user, SUM({counted}) FROM hours WHERE hour >= ? "
        f"AND user IN ({marks}) "
        "GROUP BY user", (hour_bounds(since, None)[0], *users)))
    return {u: float(s) for u, s in found[0]}


def members_of(db_path: str | Path, groups: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {g: [] for g in groups}
    if not groups:
        return out
    marks = ",".join("?" * len(groups))
    found = read_db(db_path, (
        f"SELECT user, grp FROM memberships WHERE grp IN ({marks})", groups))
    for user, grp in found[0]:
        out[grp].append(user)
    return out


def budgets_from(settings: dict[str, Any]) -> Budgets:
    return Budgets(settings.get("budget_period", "month"),
                   settings.get("user_budgets") or {}, settings.get("group_budgets") or {},
                   settings.get("default_user_budget"))


def has_budget(settings: dict[str, Any], user: str, groups: list[str]) -> bool:
    """Whether any budget applies to the user: only then does a spawn need the database."""
    budgets = budgets_from(settings)
    return budgets.for_user(user) is not None or any(
        budgets.for_group(g) is not None for g in groups)


def states_for(settings: dict[str, Any], user: str, groups: list[str], now: float,
               ) -> list[BudgetState]:
    budgets = budgets_from(settings)
    if not has_budget(settings, user, groups):
        return []
    db = settings.get("db_path", "costguard_hub.sqlite")
    start = period_start(budgets.period, now)
    budgeted = [g for g in groups if budgets.for_group(g) is not None]
    members = members_of(db, budgeted)
    everyone = sorted({user, *(u for us in members.values() for u in us)})
    spent = spent_this_period(db, everyone, start, str(settings.get("count", "metered")))
    group_spend = {g: sum(spent.get(u, 0.0) for u in set(us) | {user})
                   for g, us in members.items()}
    return budget_states(budgets, user, groups, spent.get(user, 0.0), group_spend, now)


def refusal(states: list[BudgetState], currency: str = "") -> str | None:
    """Why a GPU server is refused, in the site's currency (never one a server reported)."""
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


def _refuse(status: int, why: str) -> NoReturn:
    error = web.HTTPError(status, why)
    error.jupyterhub_message = why  # type: ignore[attr-defined]
    raise error


async def check_budget(spawner: Any, settings: dict[str, Any]) -> list[BudgetState]:
    """Raise a 403 (shown on the spawn page) for a GPU spawn over budget, and a 503 for a GPU
    spawn of a budgeted user while the service's database cannot be read (unless
    `budget_check_on_error` is "allow"); else give the server its budgets in
    `COSTGUARD_HUB_BUDGET` (group budgets as `member_group_view` lets members see them)
    and return them."""
    user = spawner.user.name
    groups = sorted(g.name for g in getattr(spawner.user, "groups", []) or [])
    now = time.time()
    gpu = await is_gpu_spawn(spawner, set(settings.get("gpu_profiles") or ()))
    try:
        states = await asyncio.get_running_loop().run_in_executor(
            None, states_for, settings, user, groups, now)
    except BudgetUnreadable as e:
        if not gpu:  # a CPU server is never refused for a budget
            spawner.log.warning("costguard: %s's budget is not shown on the server: %s",
                                user, e)
            return []
        if settings.get("budget_check_on_error", "refuse") == "allow":
            spawner.log.warning("costguard: starting %s's GPU server unchecked "
                                "(budget_check_on_error = allow): %s", user, e)
            return []
        unchecked = (f"GPU servers cannot be started now: your budget cannot be checked, "
                     f"because the costguard service's database cannot be read ({e}). A CPU "
                     "profile can still be started; tell your hub's administrators.")
        spawner.log.warning("costguard: refusing %s's GPU server: %s", user, unchecked)
        _refuse(503, unchecked)
    why = refusal(states, str(settings.get("currency", "USD"))) if gpu else None
    if why is not None:
        spawner.log.warning("costguard: refusing %s's GPU server: %s", user, why)
        _refuse(403, why)
    view = settings.get("member_group_view", "remaining")
    spawner.environment = {**(spawner.environment or {}),
                           **hubbudget.encode(shown_to_member(states, view))}
    return states


async def name_profile(spawner: Any) -> str:
    """Name the profile a spawn runs in its user options, where the Hub's API shows it: the
    service matches cull policies on it, and a spawn left at the default profile names none.
    Saved as the Hub saves chosen options (its own record of the spawn). Returns the slug."""
    options = getattr(spawner, "user_options", None)
    if not isinstance(options, dict) or options.get("profile"):
        return str(options.get("profile")) if isinstance(options, dict) else ""
    slug = profile_slug(options, await resolved_profile_list(spawner))
    if not slug:
        return ""
    spawner.user_options = {**options, "profile": slug}
    orm = getattr(spawner, "orm_spawner", None)
    if orm is not None:
        orm.user_options = dict(spawner.user_options)
        db = getattr(spawner, "db", None)
        if db is not None:
            db.commit()
    return slug


def budget_hook(config_file: str | Path, then: Callable[[Any], Any] | None = None,
                ) -> Callable[[Any], Awaitable[None]]:
    """A pre_spawn_hook that checks budgets and names the profile the spawn runs, then runs
    the site's own hook `then`."""
    settings = load_settings(config_file)

    async def hook(spawner: Any) -> None:
        await check_budget(spawner, settings)
        await name_profile(spawner)
        if then is not None:
            result = then(spawner)
            if asyncio.iscoroutine(result):
                await result

    return hook
