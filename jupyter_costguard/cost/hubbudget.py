"""The budgets a JupyterHub gave this server at spawn (`COSTGUARD_HUB_BUDGET`, the contract in
`jupyter_costguard.common.hubbudget`), kept current with this server's own spend since it
started.

What other servers of the user (or the group's other members) spend after this one started is
not seen here; the hub's page has the whole figure. JupyterLab shows what is left.
"""

from __future__ import annotations

from typing import Any

# the contract itself (the variable, its parse) is the hub's and the server's: common.hubbudget
from jupyter_costguard.common.hubbudget import ENV_BUDGET as ENV_BUDGET
from jupyter_costguard.common.hubbudget import budgets_from_environ as budgets_from_environ


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
