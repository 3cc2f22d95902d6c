"""The tests' costguard options, written flat (`"db_path"`, `"Offload.jobs_dir"`), as the
server's config: a dotted name goes to its component's section (`c.Offload.jobs_dir`), a
plain one to `c.CostGuard`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def server_sections(options: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    sections: dict[str, dict[str, Any]] = {"CostGuard": {}}
    for key, value in options.items():
        section, _, name = key.rpartition(".")
        sections.setdefault(section or "CostGuard", {})[name] = value
    return sections
