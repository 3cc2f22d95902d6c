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


def budgets_from_environ(environ: Mapping[str, str]) -> list[dict[str, Any]]:
    raw = environ.get(ENV_BUDGET)
    if not raw:
        return []
    try:
        docs = json.loads(raw)
        out = []
        for d in docs:
            out.append({"scope": str(d["scope"]), "name": str(d["name"]),
                        "budget": float(d["budget"]), "spent": float(d["spent"]),
                        "period": str(d["period"]), "period_start": float(d["period_start"]),
                        "period_end": float(d["period_end"])})
        return out
    except (ValueError, TypeError, KeyError) as e:
        log.warning("costguard: ignoring %s, which is not a list of budgets: %s",
                    ENV_BUDGET, e)
        return []


def budgets_doc(budgets: list[dict[str, Any]], spent_here: float, now: float,
                ) -> list[dict[str, Any]]:
    """Each budget with this server's spend since it started added; a budget whose period
    has ended (the server outlived it) is left out until the next spawn says more."""
    out = []
    for b in budgets:
        if now >= b["period_end"]:
            continue
        spent = b["spent"] + max(0.0, spent_here)
        out.append({**b, "spent": round(spent, 6),
                    "remaining": round(max(0.0, b["budget"] - spent), 6),
                    "used": round(spent / b["budget"], 6) if b["budget"] > 0 else 0.0})
    return out
