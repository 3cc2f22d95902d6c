"""A price as the API shows it: the catalog row, where the price came from and how old it is
(every price says both), for the status document, the jobs API and the CLI."""

from __future__ import annotations

import datetime as dt
from typing import Any

from jupyter_costguard.cost.pricing import Pricing


def instance_doc(pricing: Pricing) -> dict[str, Any] | None:
    i = pricing.instance
    if i is None:
        return None
    return {
        "provider": i.provider,
        "instance_type": i.instance_type,
        "gpu_model": i.gpu_model or None,
        "gpu_count": i.gpu_count,
        "gpu_memory_gib": i.gpu_memory_gib,
        "vcpus": i.vcpus,
        "memory_gib": i.memory_gib,
        "region": i.region,
        "on_demand_per_hour": i.on_demand_per_hour,
        "spot_per_hour": i.spot_per_hour,
        "source_url": i.source_url,
        "retrieved": i.retrieved,
    }


#: what to run when a price is old (the status document says it with the age)
REFRESH_HINT = "jupyter costguard catalog update"


def price_doc(pricing: Pricing, now: float, stale_after_days: int) -> dict[str, Any]:
    """Where the price comes from, how old it is, and the container's share of it."""
    i = pricing.instance
    retrieved = i.retrieved if i is not None else None
    age = None
    if retrieved:
        age = max(0, (dt.datetime.fromtimestamp(now, dt.timezone.utc).date()
                      - dt.date.fromisoformat(retrieved)).days)
    share = pricing.share
    rate, whole = pricing.rate_per_hour, pricing.instance_rate_per_hour
    return {
        "provider": pricing.provider or (i.provider if i is not None else None),
        "instance_type": i.instance_type if i is not None else None,
        "region": pricing.region,
        "region_source": pricing.region_source,
        "region_priced": (i.region or None) if i is not None else None,
        "region_note": pricing.region_note,
        "market": pricing.market,
        "market_source": pricing.market_source,
        "market_priced": pricing.market_priced,
        "market_note": pricing.market_note,
        "retrieved": retrieved,
        "age_days": age,
        "stale": age is not None and age > stale_after_days,
        "stale_after_days": stale_after_days,
        "refresh_hint": REFRESH_HINT,
        "converted_from": i.converted_from if i is not None else None,
        "instance_rate_per_hour": whole,
        "share": None if share is None else {
            "gpus_held": share.gpus_held, "gpus_instance": share.gpus_instance,
            "cpu_share": share.cpu_share, "memory_share": share.memory_share,
            "host_share": share.host_share,
            "fraction": (rate / whole) if rate is not None and whole else 0.0,
            "detail": share.detail,
        },
        "tried": list(pricing.tried),
    }
