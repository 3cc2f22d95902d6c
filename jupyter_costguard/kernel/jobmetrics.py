"""Metrics a batch job records about itself, pushed to the configured Pushgateway.

    from jupyter_costguard import jobmetrics
    jobmetrics.record("epoch_seconds", 12.3, epoch=3)

Exported as ``costguard_user_epoch_seconds{costguard_job="12", epoch="3"}`` (a gauge), in the
job's group next to what the runner and the server push (see
`jupyter_costguard.metrics.pushgateway`). The gateway and the job come from the job's
environment (`$COSTGUARD_PUSHGATEWAY_URL`, `$COSTGUARD_JOB_ID`); outside a job, or with no
gateway configured, `record` only keeps the value (one log line says so). It never raises: a
metric must not fail the training it measures.

Each `record` is one HTTP request (at most 5 s) carrying every value recorded so far, because
the gateway replaces a metric's whole family on each push; record per epoch, not per batch.
After a failed push the next ones wait a minute, so a dead gateway doesn't slow every call.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from typing import Any

from jupyter_costguard.offload.jobdir import ENV_JOB_ID, ENV_PUSHGATEWAY_URL

__all__ = ["PREFIX", "record", "values"]

PREFIX = "costguard_user_"
RETRY_AFTER_SECONDS = 60.0

log = logging.getLogger(__name__)

_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_lock = threading.Lock()
#: metric name -> (label names, {label values: value})
_values: dict[str, tuple[tuple[str, ...], dict[tuple[str, ...], float]]] = {}
_said_not_configured = False
_quiet_until = 0.0


def values() -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """What this process has recorded: metric name -> {((label, value), ...): value}."""
    with _lock:
        return {name: {tuple(zip(names, key)): v for key, v in series.items()}
                for name, (names, series) in _values.items()}


def record(name: str, value: float, **labels: Any) -> bool:
    """Record `value` for `name` (with `labels`) and push this job's user metrics.

    True when the gateway took them; False when not configured, unreachable or the arguments
    are unusable (logged). Never raises.
    """
    global _said_not_configured, _quiet_until
    try:
        if not isinstance(name, str):
            raise TypeError(f"the name must be a str, not {type(name).__name__}")
        full = name if name.startswith(PREFIX) else PREFIX + name
        if not _NAME.match(full):
            raise ValueError(f"not a valid metric name: {name!r}")
        number = float(value)
        names = tuple(sorted(labels))
        key = tuple(str(labels[k]) for k in names)
        with _lock:
            known, series = _values.setdefault(full, (names, {}))
            if known != names:
                raise ValueError(f"{name!r} was recorded with labels {list(known)}; keep the "
                                 f"same label names (got {list(names)})")
            series[key] = number
            samples = [(metric, f"Recorded by the job's code: {metric[len(PREFIX):]}.",
                        dict(zip(label_names, k)), v)
                       for metric, (label_names, s) in _values.items() for k, v in s.items()]
    except Exception as e:
        log.warning("costguard: jobmetrics.record(%r) ignored: %s: %s", name,
                    type(e).__name__, e)
        return False
    url = os.environ.get(ENV_PUSHGATEWAY_URL, "").strip()
    job_id = os.environ.get(ENV_JOB_ID, "").strip()
    if not url or not job_id:
        if not _said_not_configured:
            _said_not_configured = True
            missing = " and ".join(n for n, v in ((ENV_JOB_ID, job_id), (ENV_PUSHGATEWAY_URL, url))
                                   if not v)
            log.warning("costguard: jobmetrics: %s not set (not in a job, or no Pushgateway "
                        "configured); values are kept here, not pushed", missing)
        return False
    if time.monotonic() < _quiet_until:
        return False
    try:
        from jupyter_costguard.metrics.pushgateway import push_metrics

        ok = push_metrics(url, job_id, samples)
    except Exception as e:  # an import problem: still never the job's problem
        log.warning("costguard: jobmetrics: %s: %s", type(e).__name__, e)
        ok = False
    _quiet_until = 0.0 if ok else time.monotonic() + RETRY_AFTER_SECONDS
    return ok
