"""The budgets a JupyterHub hands a server at spawn: `COSTGUARD_HUB_BUDGET`, a JSON list that
`hub.spawn` writes (`encode`) and the server reads (`budgets_from_environ`).

Each budget is ``{scope, name, budget, spent, used, remaining, period, period_start,
period_end}``; a group budget shown to a member may carry only what is left of it
(`budget`, `spent` and `used` null), as the site's `member_group_view` says.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

ENV_BUDGET = "COSTGUARD_HUB_BUDGET"
log = logging.getLogger("jupyter_costguard")


def encode(budgets: list[dict[str, Any]]) -> dict[str, str]:
    """The environment a spawner adds to hand a server these budget documents."""
    return {ENV_BUDGET: json.dumps(budgets)}


def _number(value: Any) -> float | None:
    """A figure, or None where the hub left it out (what a member may not see)."""
    if value is None:
        return None
    number = float(value)
    if number != number or number in (float("inf"), float("-inf")):
        raise ValueError(f"not a finite number: {value!r}")
    return number


def budgets_from_environ(environ: Mapping[str, str]) -> list[dict[str, Any]]:
    """The budgets the hub gave; a group budget may carry only what is left of it (`budget`
    and `spent` null: the site shows members no more of a group's spend)."""
    raw = environ.get(ENV_BUDGET)
    if not raw:
        return []
    try:
        docs = json.loads(raw)
        out = []
        for d in docs:
            budget, spent = _number(d.get("budget")), _number(d.get("spent"))
            remaining = _number(d.get("remaining"))
            if budget is None or spent is None:
                if remaining is None:
                    raise ValueError(f"budget {d.get('name')!r} has neither budget and spent "
                                     "nor remaining")
                budget = spent = None
            out.append({"scope": str(d["scope"]), "name": str(d["name"]),
                        "budget": budget, "spent": spent,
                        **({"remaining": remaining} if budget is None else {}),
                        "period": str(d["period"]), "period_start": float(d["period_start"]),
                        "period_end": float(d["period_end"])})
        return out
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        log.warning("costguard: ignoring %s, which is not a list of budgets: %s",
                    ENV_BUDGET, e)
        return []
