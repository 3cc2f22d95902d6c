"""Budgets at spawn: a `c.Spawner.pre_spawn_hook` that refuses a profile the site does not
list, refuses a GPU server once the period's budget is spent, lets CPU servers through, tells
every server its budget, and names the profile the spawn runs in the Hub's record.

    from jupyter_costguard.hub.spawn import budget_hook
    c.Spawner.pre_spawn_hook = budget_hook("/srv/costguard/costguard_hub_config.py")

It builds the service's own settings from its config file (hub/settings.py: budgets, period,
the site's profiles) and reads the service's SQLite (the budget book: what each user and group
has spent this period, hub/budgetbook.py), so budgets are written once, decided by the
service's own code, and the check needs no network. An admitted GPU spawn reserves what it can
spend until the service counts it, in one transaction with its check, so spawns at the same
moment cannot all pass on the same budget. Runs in the Hub's process; the SQLite work runs
off its IO loop. A site with its own hook calls `check_budget(spawner, settings)` from it.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, NoReturn

from tornado import web

from jupyter_costguard.common import hubbudget
from jupyter_costguard.hub import budgetbook
from jupyter_costguard.hub.budgetbook import BudgetUnreadable
from jupyter_costguard.hub.budgets import (
    ADJECTIVE,
    BudgetState,
    day,
    shown,
    shown_to_member,
    spent_words,
)
from jupyter_costguard.hub.profiles import (
    RESOURCE_ATTRS,
    asks_for_gpu,
    profile_overrides,
    profile_slug,
)
from jupyter_costguard.hub.settings import HubSettings
from jupyter_costguard.hub.siteprofiles import SiteProfiles, site_profiles
from jupyter_costguard.hub.store import counted_sql

__all__ = ["ADJECTIVE", "BudgetUnreadable", "budget_hook", "check_budget", "load_settings"]

Settings = HubSettings | Mapping[str, Any]


def load_settings(config_file: str | Path) -> HubSettings:
    """The service's settings from its config file (hub/settings.py): the same defaults and
    checks as the service's."""
    return HubSettings.load(config_file)





async def resolved_profile_list(spawner: Any) -> Any:
    """KubeSpawner's `profile_list`: a list, a dict, or a (possibly async) callable taking the
    spawner; None when the spawner has none."""
    profiles = getattr(spawner, "profile_list", None)
    if callable(profiles):
        profiles = profiles(spawner)
        if inspect.isawaitable(profiles):
            profiles = await profiles
    return profiles


async def spawn_profile(spawner: Any, site: SiteProfiles) -> tuple[str, bool, str | None]:
    """The profile a spawn will run, whether it is a GPU one, and why it is refused (None:
    it is not), by the site's profiles (hub/siteprofiles.py). With KubeSpawner's
    profile_list the profile is the one KubeSpawner will run (its default when none was
    asked for), and it is a GPU one when the site's entry holds GPUs or, once its overrides
    are applied (here, on a copy: KubeSpawner applies them after the pre_spawn_hook), the
    resources it requests ask for one. Without a profile list, a spawn that names none runs
    the site's default, and one the site does not list is refused."""
    options = getattr(spawner, "user_options", None)
    options = options if isinstance(options, dict) else {}
    profiles = await resolved_profile_list(spawner)
    slug = site.slug(profile_slug(options, profiles))
    entry = site.of(slug)
    if profiles is None and not entry.listed:
        return slug, entry.gpu, site.refusal(slug)
    if entry.gpu:
        return slug, True, None
    overrides = profile_overrides(options, profiles) if profiles is not None else {}
    for attr in RESOURCE_ATTRS:
        own = getattr(spawner, attr, None)
        resources = dict(own) if isinstance(own, dict) else {}
        value = overrides.get(attr)
        if callable(value):  # KubeSpawner calls it with the spawner
            value = value(spawner)
        if isinstance(value, dict):  # and merges a dict into the spawner's own
            resources.update(value)
        if asks_for_gpu(resources):
            return slug, True, None
    return slug, False, None


async def is_gpu_spawn(spawner: Any, site: SiteProfiles | set[str]) -> bool:
    """Whether a spawn runs a GPU profile (`site`: the site's profiles, or the older set of
    GPU profile slugs)."""
    if not isinstance(site, SiteProfiles):
        site = site_profiles({}, gpu_profiles=site)
    return (await spawn_profile(spawner, site))[1]


def budgeted(settings: HubSettings, user: str, groups: list[str]) -> bool:
    """Whether any budget applies to the user (else the database is not needed)."""
    budgets = settings.budgets
    return budgets.for_user(user) is not None or any(
        budgets.for_group(g) is not None for g in groups)


def states_for(settings: Settings, user: str, groups: list[str], now: float,
               ) -> list[BudgetState]:
    """A user's budgets now (their groups: the Hub's), read-only from the service's
    database, from the book the service reads (hub/budgetbook.py)."""
    s = HubSettings.of(settings)
    if not budgeted(s, user, groups):
        return []
    return budgetbook.read(s.db_path, counted_sql(s.count), s.budgets, now).states(
        user, groups)


def reservation(settings: HubSettings, slug: str, start_timeout: float,
                ) -> tuple[float, float]:
    """What a GPU spawn of profile `slug` reserves, and for how long: what it can spend
    before the service next looks at the Hub (its rate x `poll_interval`; the site's dearest
    priced rate for a GPU profile without a price; nothing on a site that prices none), kept
    at most until its spawn has timed out and the service has looked twice since."""
    rate = settings.site.rates({slug}).get(slug)
    if rate is None:
        rate = max((p.price.rate_per_hour for p in settings.site.profiles.values()
                    if p.price is not None), default=0.0)
    ttl = max(60.0, start_timeout) + 2 * settings.poll_interval
    return rate * settings.poll_interval / 3600.0, ttl


def admit_for(settings: HubSettings, user: str, server: str, groups: list[str], slug: str,
              now: float, start_timeout: float) -> budgetbook.Admission:
    """The GPU spawn check with its reservation, in one transaction (hub/budgetbook.py)."""
    if not budgeted(settings, user, groups):
        return budgetbook.Admission([])
    amount, ttl = reservation(settings, slug, start_timeout)
    return budgetbook.admit(settings.db_path, counted_sql(settings.count), settings.budgets,
                            user, server, groups, now, amount, ttl)


def refusal(states: list[BudgetState], currency: str = "",
            view: str = "remaining") -> str | None:
    """Why a GPU server is refused, in the site's currency (never one a server reported),
    with only the figures the site's `member_group_view` lets a member see of a group's
    budget (budgets.shown: a refusal must not tell one member what the others spent, nor
    what the others' starting servers hold)."""
    spent = [s for s in states if s.exhausted]
    if spent:
        s = spent[0]
        words = spent_words(s, currency, view, whose="your" if s.scope == "user" else None)
        return (f"GPU servers are refused: {words}. It resets on {day(s.period_end)}; a "
                "CPU profile can still be started.")
    held = [s for s in states if s.full]
    if not held:
        return None
    s = held[0]
    whose = "your" if s.scope == "user" else f"group {s.name}'s"
    doc = shown(s, view)
    unit = f" {currency}" if currency else ""
    figures = "" if doc is None or doc["budget"] is None else (
        f" ({s.spent:.2f} of {s.budget:.2f}{unit} spent, {s.reserved:.2f}{unit} held)")
    return (f"GPU servers are refused for now: what is left of {whose} "
            f"{ADJECTIVE.get(s.period, s.period)} budget{figures} is held by GPU servers "
            "starting at this moment, for what they can spend before the hub counts them. "
            "Try again in a minute or two; a CPU profile can still be started.")


def _refuse(status: int, why: str) -> NoReturn:
    error = web.HTTPError(status, why)
    error.jupyterhub_message = why  # type: ignore[attr-defined]
    raise error


async def check_budget(spawner: Any, settings: Settings) -> list[BudgetState]:
    """Raise a 403 (shown on the spawn page) for a profile the site does not list and for a
    GPU spawn over budget (or whose budget other starting GPU servers hold: an admitted GPU
    spawn reserves what it can spend until the service meters it, hub/budgetbook.py), and a
    503 for a GPU spawn of a budgeted user while the service's database cannot be read
    (unless `budget_check_on_error` is "allow"); else give the server its budgets in
    `COSTGUARD_HUB_BUDGET` (group budgets as `member_group_view` lets members see them) and
    return them."""
    s = HubSettings.of(settings)
    user = spawner.user.name
    groups = sorted(g.name for g in getattr(spawner.user, "groups", []) or [])
    now = time.time()
    slug, gpu, unlisted = await spawn_profile(spawner, s.site)
    if unlisted is not None:
        spawner.log.warning("costguard: refusing %s's server: %s", user, unlisted)
        _refuse(403, unlisted)
    loop = asyncio.get_running_loop()
    try:
        if gpu:  # checked and reserved in one transaction: spawns at once are not all let in
            admission = await loop.run_in_executor(
                None, admit_for, s, user, str(getattr(spawner, "name", "") or ""), groups,
                slug, now, float(getattr(spawner, "start_timeout", 60) or 60))
            if admission.unreserved:
                spawner.log.warning("costguard: %s's GPU server reserves nothing: %s", user,
                                    admission.unreserved)
            elif admission.reserved:
                spawner.log.info("costguard: %s's GPU server reserves %.4f %s of its budgets "
                                 "until the service counts it", user, admission.reserved,
                                 s.currency)
            states = admission.states
        else:
            states = await loop.run_in_executor(None, states_for, s, user, groups, now)
    except BudgetUnreadable as e:
        if not gpu:  # a CPU server is never refused for a budget
            spawner.log.warning("costguard: %s's budget is not shown on the server: %s",
                                user, e)
            return []
        if s.budget_check_on_error == "allow":
            spawner.log.warning("costguard: starting %s's GPU server unchecked "
                                "(budget_check_on_error = allow): %s", user, e)
            return []
        unchecked = (f"GPU servers cannot be started now: your budget cannot be checked, "
                     f"because the costguard service's database cannot be read ({e}). A CPU "
                     "profile can still be started; tell your hub's administrators.")
        spawner.log.warning("costguard: refusing %s's GPU server: %s", user, unchecked)
        _refuse(503, unchecked)
    why = refusal(states, s.currency, s.member_group_view) if gpu else None
    if why is not None:
        spawner.log.warning("costguard: refusing %s's GPU server: %s", user, why)
        _refuse(403, why)
    spawner.environment = {**(spawner.environment or {}),
                           **hubbudget.encode(shown_to_member(states, s.member_group_view))}
    return states


async def name_profile(spawner: Any, site: SiteProfiles | None = None) -> str:
    """Name the profile a spawn runs in its user options, where the Hub's API shows it: the
    service reads every decision from it, and a spawn left at the default profile names
    none. Saved as the Hub saves chosen options (its own record of the spawn). Returns the
    slug."""
    options = getattr(spawner, "user_options", None)
    options = options if isinstance(options, dict) else {}
    asked = options.get("profile")
    if isinstance(asked, str) and asked:
        return asked
    slug = profile_slug(options, await resolved_profile_list(spawner))
    if site is not None:
        slug = site.slug(slug)
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
    settings.site  # noqa: B018 - price the profiles now: a bad table fails the Hub's start

    async def hook(spawner: Any) -> None:
        await check_budget(spawner, settings)
        await name_profile(spawner, settings.site)
        if then is not None:
            result = then(spawner)
            if asyncio.iscoroutine(result):
                await result

    return hook
