"""The sparkline points served with each notebook and with the status document.

A notebook's last `SPARKLINE_POINTS` minutes of spend and waste, rendered once per ledger and
reused: the ledger only ever adds to the newest minute, so each sample renders that point
again and keeps the rest (`Sparklines`, one per ledger for as long as it lives).
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from jupyter_costguard.cost.ledger import HISTORY_BUCKET_SECONDS, HistoryPoint, Ledger
from jupyter_costguard.cost.money import round_money

if TYPE_CHECKING:
    from jupyter_costguard.cost.viewrecords import NotebookView

#: Minute points included with each notebook in list responses (sparklines).
SPARKLINE_POINTS = 30


def point_doc(p: HistoryPoint) -> dict[str, float]:
    return {"time": float(p.bucket * HISTORY_BUCKET_SECONDS), "spend": round_money(p.spend),
            "waste": round_money(p.waste)}


def history_doc(points: list[HistoryPoint], limit: int) -> list[dict[str, float]]:
    return [point_doc(p) for p in points[-limit:]]


class Sparklines:
    """The sparkline points of each notebook, rendered once: the ledger only ever adds to
    the newest minute, so each sample renders that one point again and reuses the rest."""

    def __init__(self) -> None:
        #: path -> (bucket of the first and of the last reused point, their documents)
        self._done: dict[str, tuple[int, int, list[dict[str, float]]]] = {}
        #: path -> (what its view was made from, the view): notebooks with no live kernel,
        #: whose view stays the same until their totals or alerts change
        self.quiet: dict[str, tuple[tuple[Any, ...], NotebookView]] = {}

    def doc(self, path: str, points: list[HistoryPoint]) -> list[dict[str, float]]:
        tail = points[-SPARKLINE_POINTS:]
        if len(tail) < 2:
            return [point_doc(p) for p in tail]
        first, last = tail[0].bucket, tail[-2].bucket
        done = self._done.get(path)
        if done is None or done[0] != first or done[1] != last:
            done = self._done[path] = (first, last, [point_doc(p) for p in tail[:-1]])
        return [*done[2], point_doc(tail[-1])]

    def keep_only(self, paths: Mapping[str, object]) -> None:
        """Forget notebooks the ledger no longer holds (the server's points, path '',
        are kept)."""
        if len(self._done) > len(paths) + ("" in self._done):
            for path in [p for p in self._done if p not in paths and p]:
                del self._done[path]
        if len(self.quiet) > len(paths):
            for path in [p for p in self.quiet if p not in paths]:
                del self.quiet[path]


#: the rendered sparklines of each ledger, for as long as it lives
_SPARKLINES: weakref.WeakKeyDictionary[Ledger, Sparklines] = weakref.WeakKeyDictionary()


def sparklines_of(ledger: Ledger) -> Sparklines:
    found = _SPARKLINES.get(ledger)
    if found is None:
        found = _SPARKLINES[ledger] = Sparklines()
    return found
