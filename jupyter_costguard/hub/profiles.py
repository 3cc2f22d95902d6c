"""Which KubeSpawner profile a server runs, and what it will request, worked out the way
KubeSpawner does it, before KubeSpawner has done it.

At `pre_spawn_hook` time KubeSpawner has not yet applied the chosen profile's
`kubespawner_override`, and a spawn left at the defaults sends no `profile` at all; so the
spawn hook (budgets) and the service (culling by profile) both resolve the profile here, with
one rule. Stdlib only: the Hub's process and the service's both import it, and it imports
nothing of theirs.

The rule is KubeSpawner's own (`load_user_options`, `_get_profile`, `_load_profile`,
`_apply_overrides`): `profile_list` may be a dict (its values, sorted by key); the profile
whose `slug` (or, without one, its slugified `display_name`) is `user_options["profile"]`,
else the one marked `default: True`, else the first; then that profile's
`kubespawner_override`, then for each of its `profile_options` the override of the choice
named by `user_options[<option>]` (what KubeSpawner keeps of the form's
`profile-option-<slug>--<option>`; a bare `profile-option-<option>` is read too), or of the
option's `unlisted_choice` with `{value}` filled in from
`user_options["<option>--unlisted-choice"]`, else of the choice marked `default: True`, else
the first. A dict value merges into what is there; any other value replaces it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

#: the GPU resource names a KubeSpawner profile asks for
GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")
#: the spawner attributes that ask the scheduler for accelerators
RESOURCE_ATTRS = ("extra_resource_limits", "extra_resource_guarantees")


def slugify(text: str) -> str:
    """KubeSpawner's slug of a display name: lower case, other runs of characters as `-`."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def slug_of(profile: Mapping[str, Any]) -> str:
    slug = profile.get("slug")
    if isinstance(slug, str) and slug:
        return slug
    return slugify(str(profile.get("display_name", "")))


def profiles_of(profile_list: Any) -> list[Mapping[str, Any]]:
    """The profiles of an already-called `profile_list` (a list, or a dict sorted by key)."""
    if isinstance(profile_list, Mapping):
        profile_list = [profile_list[k] for k in sorted(profile_list)]
    if not isinstance(profile_list, (list, tuple)):
        return []
    return [p for p in profile_list if isinstance(p, Mapping)]


def chosen_profile(user_options: Mapping[str, Any] | None, profile_list: Any,
                   ) -> Mapping[str, Any] | None:
    """The profile a spawn will run; None without a profile list."""
    profiles = profiles_of(profile_list)
    if not profiles:
        return None
    asked = (user_options or {}).get("profile")
    if isinstance(asked, str) and asked:
        for p in profiles:
            if slug_of(p) == asked:
                return p
    return next((p for p in profiles if p.get("default")), profiles[0])


def profile_slug(user_options: Mapping[str, Any] | None, profile_list: Any) -> str:
    """The slug of the profile a spawn runs (the default one when none was asked for); without
    a profile list, the `profile` user option as sent (other spawners' forms), else ""."""
    chosen = chosen_profile(user_options, profile_list)
    if chosen is not None:
        return slug_of(chosen)
    asked = (user_options or {}).get("profile")
    return asked if isinstance(asked, str) else ""


def _fill(value: Any, typed: str) -> Any:
    """An unlisted choice's override with the user's `{value}` filled in."""
    if isinstance(value, str):
        return value.replace("{value}", typed)
    if isinstance(value, Mapping):
        return {_fill(k, typed): _fill(v, typed) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, typed) for v in value]
    return value


def _merge(into: dict[str, Any], override: Any) -> None:
    if not isinstance(override, Mapping):
        return
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), Mapping):
            into[key] = {**into[key], **value}
        else:
            into[key] = value


def _option_override(name: str, option: Mapping[str, Any], slug: str,
                     options: Mapping[str, Any]) -> Any:
    typed = options.get(f"{name}--unlisted-choice")
    unlisted = option.get("unlisted_choice") or {}
    if typed and isinstance(unlisted, Mapping) and unlisted.get("enabled"):
        return _fill(unlisted.get("kubespawner_override") or {}, str(typed))
    choices = option.get("choices") or {}
    if not isinstance(choices, Mapping) or not choices:
        return {}
    for key in (name, f"profile-option-{slug}--{name}", f"profile-option-{name}"):
        asked = options.get(key)
        if isinstance(asked, str) and asked in choices:
            choice = choices[asked]
            break
    else:
        choice = next((c for c in choices.values() if isinstance(c, Mapping)
                       and c.get("default")), next(iter(choices.values())))
    return choice.get("kubespawner_override") if isinstance(choice, Mapping) else {}


def profile_overrides(user_options: Mapping[str, Any] | None, profile_list: Any,
                      ) -> dict[str, Any]:
    """The spawner attributes the chosen profile and its chosen options set ({} when none).
    Values KubeSpawner would call with the spawner are left as the callables they are."""
    profile = chosen_profile(user_options, profile_list)
    if profile is None:
        return {}
    options = user_options or {}
    slug = slug_of(profile)
    out: dict[str, Any] = {}
    _merge(out, profile.get("kubespawner_override"))
    profile_options = profile.get("profile_options") or {}
    if isinstance(profile_options, Mapping):
        for name, option in profile_options.items():
            if isinstance(option, Mapping):
                _merge(out, _option_override(str(name), option, slug, options))
    return out


def asks_for_gpu(resources: Any) -> bool:
    """Whether resource limits or guarantees ask for at least one accelerator."""
    if not isinstance(resources, Mapping):
        return False
    for name in GPU_RESOURCES:
        try:
            if float(resources.get(name, 0) or 0) > 0:
                return True
        except (TypeError, ValueError):
            continue
    return False
