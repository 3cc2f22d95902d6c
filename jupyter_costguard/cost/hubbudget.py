"""The budgets a JupyterHub gave this server at spawn (`COSTGUARD_HUB_BUDGET`, written by
`jupyter_costguard.hub.spawn`), kept current with this server's own spend since it started.

What other servers of the user (or the group's other members) spend after this one started is
not seen here; the hub's page has the whole figure. JupyterLab shows what is left.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

ENV_BUDGET = "COSTGUARD_HUB_BUDGET"
log = logging.getLogger("jupyter_costguard")


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


def budgets_doc(budgets: list[dict[str, Any]], spent_here: float, now: float,
                ) -> list[dict[str, Any]]:
    """Each budget with this server's spend since it started added; a budget whose period
    has ended (the server outlived it) is left out until the next spawn says more. A budget
    known only by what is left of it shrinks by this server's spend (floored at 0); its
    budget, spent and used stay null."""
    out = []
    here = max(0.0, spent_here)
    for b in budgets:
        if now >= b["period_end"]:
            continue
        if b["budget"] is None:
            out.append({**b, "budget": None, "spent": None, "used": None,
                        "remaining": round(max(0.0, b["remaining"] - here), 6)})
            continue
        spent = b["spent"] + here
        out.append({**b, "spent": round(spent, 6),
                    "remaining": round(max(0.0, b["budget"] - spent), 6),
                    "used": round(spent / b["budget"], 6) if b["budget"] > 0 else 0.0})
    return out
