"""Options that moved off `c.CostGuard` onto their component's own class (`c.SlurmBackend`,
`c.Guard`, …). An old name keeps working for a release: before the extension reads its
config, each old name is moved to its new place (unless that is set too) and the admin is
told once where it lives now. traitlets has no trait-move mechanism, so this does what
nbclassic's NotebookApp → ServerApp shim does: rewrite the config, then warn."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any


def moves_of(classes: Iterable[type]) -> dict[str, tuple[str, str]]:
    """old CostGuard name -> (new section, new name), from each class's
    ``moved_from_costguard``."""
    moves: dict[str, tuple[str, str]] = {}
    for cls in classes:
        for old, new in getattr(cls, "moved_from_costguard", {}).items():
            moves[old] = (cls.__name__, new)
    return moves


def forward_moved(config: Any, section: str, moves: Mapping[str, tuple[str, str]],
                  warned: set[str], warn: Callable[[str], None]) -> None:
    """Move each old `config[section][old]` to its new place in `config` (in place; a value
    already set at the new place wins) and warn once per old name (`warned` remembers)."""
    if section not in config:
        return
    old_section = config[section]
    for old in [name for name in list(old_section) if name in moves]:
        new_section, new = moves[old]
        value = old_section.pop(old)
        target = config[new_section]
        if new not in target:
            target[new] = value
        if old not in warned:
            warned.add(old)
            warn(f"c.{section}.{old} is deprecated and will be removed in a future release: "
                 f"set c.{new_section}.{new} instead (--{new_section}.{new} on the command "
                 "line)")
