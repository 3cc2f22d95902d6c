"""The views of notebooks with no live kernel are kept between samples while their inputs
(the ledger's figures, the kernels seen, the alerts) stay the same, and remade when any
changes: what is served is always what a fresh build would serve."""

from __future__ import annotations

from pathlib import Path

from jupyter_costguard.cost.catalog import Catalog
from jupyter_costguard.cost.ledger import Ledger
from jupyter_costguard.cost.pricing import resolve_pricing
from jupyter_costguard.cost.sparklines import Sparklines, sparklines_of
from jupyter_costguard.cost.spend import IntervalCost, Share
from jupyter_costguard.cost.views import build_views

NOW = 1_700_000_000.0


def pricing():  # type: ignore[no-untyped-def]
    return resolve_pricing(Catalog.load(), instance_type=None, environ={}, gpu=None,
                           host=None, hourly_rate=1.0)


def record(ledger: Ledger, now: float, kid: str, path: str, spend: float) -> None:
    cost = IntervalCost(total=spend, unattributed=0.0, unattributed_gpu=0.0,
                        shares={kid: Share(gpu=spend, host=0.0, waste=spend / 2)})
    ledger.record(now, 2.0, cost, paths={kid: path}, names={kid: "python3"})


def fresh(ledger: Ledger, alerts: dict | None = None) -> dict:  # type: ignore[type-arg]
    """What a build with nothing remembered serves for every notebook."""
    kept = sparklines_of(ledger)
    from jupyter_costguard.cost import sparklines as sparklines_mod
    sparklines_mod._SPARKLINES[ledger] = Sparklines()
    try:
        return {p: nb.doc() for p, nb in
                build_views(None, None, pricing(), ledger, 2.0, 5.0, alerts=alerts)
                .notebooks.items()}
    finally:
        sparklines_mod._SPARKLINES[ledger] = kept


def test_a_quiet_notebook_is_reused_until_its_inputs_change(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "l.sqlite", now=NOW)
    record(ledger, NOW, "k1", "a.ipynb", 0.5)
    record(ledger, NOW, "k2", "b.ipynb", 0.25)
    first = build_views(None, None, pricing(), ledger, 2.0, 5.0)
    again = build_views(None, None, pricing(), ledger, 2.0, 5.0)
    assert again.notebooks["a.ipynb"] is first.notebooks["a.ipynb"]

    # the ledger's figures move (a kernel of the notebook recorded a share): remade
    record(ledger, NOW + 120, "k1", "a.ipynb", 0.5)
    moved = build_views(None, None, pricing(), ledger, 2.0, 5.0)
    assert moved.notebooks["a.ipynb"] is not first.notebooks["a.ipynb"]
    assert moved.notebooks["a.ipynb"].spend == 1.0
    assert len(moved.notebooks["a.ipynb"].history) == 2
    assert moved.notebooks["b.ipynb"] is first.notebooks["b.ipynb"]
    assert {p: nb.doc() for p, nb in moved.notebooks.items()} == fresh(ledger)

    # another kernel ran it, with no spend yet: kernels_seen changes
    record(ledger, NOW + 120, "k3", "b.ipynb", 0.0)
    seen = build_views(None, None, pricing(), ledger, 2.0, 5.0)
    assert seen.notebooks["b.ipynb"].kernels_seen == 2
    assert {p: nb.doc() for p, nb in seen.notebooks.items()} == fresh(ledger)

    # an alert is raised, then a second one, then all resolved
    for alerts in ({"a.ipynb": {"ids": [7], "highest_severity": "warning"}},
                   {"a.ipynb": {"ids": [7, 8], "highest_severity": "critical"}},
                   None):
        views = build_views(None, None, pricing(), ledger, 2.0, 5.0, alerts=alerts)
        assert {p: nb.doc() for p, nb in views.notebooks.items()} == fresh(ledger, alerts)
    assert views.notebooks["a.ipynb"].alerts == {"ids": [], "highest_severity": None}
    ledger.close()
