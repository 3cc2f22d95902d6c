"""What one sample produced, as every reader after the service sees it.

The service replaces the published snapshot whole after each sample; the guard, the REST
handlers and the Prometheus collector read it and never mutate it. It lives apart from the
service so that those readers depend on the data, not on the service that makes it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from jupyter_costguard.cost.pricing import Pricing
from jupyter_costguard.cost.spend import IntervalCost
from jupyter_costguard.cost.viewrecords import Views
from jupyter_costguard.sampling.records import Sample


@dataclass
class Published:
    """The latest sample's results; replaced whole, never mutated.

    The Prometheus families are built from it on first read (a scrape), at most once per
    snapshot, not on every sample: a server nobody scrapes pays nothing for its metrics,
    and one scraped every 15 s builds them once in 15 samples. A copy made with
    `dataclasses.replace` starts without them, so it never serves another snapshot's.
    """

    sample: Sample | None
    cost: IntervalCost | None
    pricing: Pricing
    views: Views
    samples_total: int = 0
    alert_counts: dict[tuple[str, str], int] = field(default_factory=dict)  # (kind, severity)
    alerts_raised: dict[str, int] = field(default_factory=dict)  # kind -> raised since start
    #: builds the Prometheus families of a snapshot (None: this snapshot has none)
    metrics_builder: Callable[[Published], list[Any]] | None = field(
        default=None, compare=False, repr=False)
    _metrics: list[Any] | None = field(default=None, init=False, compare=False, repr=False)
    _metrics_lock: threading.Lock = field(default_factory=threading.Lock, init=False,
                                          compare=False, repr=False)

    @property
    def metrics(self) -> list[Any]:
        """The snapshot's Prometheus families, built on first read (any thread)."""
        made = self._metrics
        if made is None:
            with self._metrics_lock:
                made = self._metrics
                if made is None:
                    builder = self.metrics_builder
                    made = self._metrics = builder(self) if builder is not None else []
        return made
