"""What one sample produced, as every reader after the service sees it.

The service replaces the published snapshot whole after each sample; the guard, the REST
handlers and the Prometheus collector read it and never mutate it. It lives apart from the
service so that those readers depend on the data, not on the service that makes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from jupyter_costguard.cost.pricing import Pricing
from jupyter_costguard.cost.spend import IntervalCost
from jupyter_costguard.cost.views import Views
from jupyter_costguard.sampling.records import Sample


@dataclass
class Published:
    """The latest sample's results; replaced whole, never mutated."""

    sample: Sample | None
    cost: IntervalCost | None
    pricing: Pricing
    views: Views
    metrics: list[Any] = field(default_factory=list)
    samples_total: int = 0
    alert_counts: dict[tuple[str, str], int] = field(default_factory=dict)  # (kind, severity)
    alerts_raised: dict[str, int] = field(default_factory=dict)  # kind -> raised since start
