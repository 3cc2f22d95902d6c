"""Batch jobs' metrics to a Prometheus Pushgateway.

A job may end between two scrapes, so what it measured goes to a Pushgateway instead, grouped
by ``{job="costguard", costguard_job="<id>"}``. Three writers add to one group, each with POST
(``pushadd``), which replaces only the metric names it sends:

- the runner, when the job ends: duration, attempts, outcome (`push_runner_metrics`);
- the server, when it sees the job end: spend and GPU utilisation (`push_finished_job`);
- the job's own code: anything it records with `jupyter_costguard.jobmetrics`.

`delete_job_metrics` removes the group (Prometheus keeps what it scraped). Pushing never raises:
a gateway that can't be reached is logged, and the job goes on as if none were configured.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "GROUP_LABEL",
    "JOB_LABEL",
    "JOB_METRICS",
    "delete_job_metrics",
    "push_finished_job",
    "push_job_metrics",
    "push_metrics",
    "push_runner_metrics",
]

#: Prometheus's `job` label of every group (with honor_labels it is kept as is)
JOB_LABEL = "costguard"
#: the grouping key: the costguard job id
GROUP_LABEL = "costguard_job"
TIMEOUT_SECONDS = 5.0

#: short names accepted by `push_job_metrics` -> (metric name, help). All gauges: a pushed
#: value is the job's final figure, not something Prometheus should rate().
JOB_METRICS: dict[str, tuple[str, str]] = {
    "duration_seconds": ("costguard_job_duration_seconds",
                         "Wall time from the job's first start to its end, over all attempts."),
    "attempts": ("costguard_job_attempts", "Attempts the job made (1 plus the retries used)."),
    "succeeded": ("costguard_job_succeeded",
                  "1 when the job succeeded; 0 when it failed, was cancelled or was lost."),
    "end_time_seconds": ("costguard_job_end_time_seconds", "Unix time at which the job ended."),
    "spend": ("costguard_job_spend", "Money the job cost, in the labelled currency."),
    "gpu_utilization_ratio": ("costguard_job_gpu_utilization_ratio",
                              "Mean utilisation (0-1) of the GPUs the job held while it ran."),
    "gpus": ("costguard_job_gpus", "GPUs the job held."),
}

_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
#: labels Prometheus or the grouping key own; a metric can't carry them itself
_RESERVED_LABELS = frozenset({"job", "instance", GROUP_LABEL})

log = logging.getLogger(__name__)

#: one metric: name, help, labels, value
Sample = tuple[str, str, Mapping[str, str], float]


def _grouping(job_id: int | str, grouping: Mapping[str, str] | None) -> dict[str, str]:
    key = {GROUP_LABEL: str(job_id)}
    for k, v in (grouping or {}).items():
        key[str(k)] = str(v)
    return key


def _registry(samples: Sequence[Sample]) -> Any:
    """A fresh registry holding `samples` as gauges; one family per name, label names checked
    to agree (Prometheus would reject the push otherwise)."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.registry import Collector

    families: dict[str, GaugeMetricFamily] = {}
    label_names: dict[str, tuple[str, ...]] = {}
    for name, help_text, labels, value in samples:
        if not _METRIC_NAME.match(name) or name.startswith("__"):
            raise ValueError(f"not a valid metric name: {name!r}")
        names = tuple(sorted(labels))
        for label in names:
            if not _LABEL_NAME.match(label) or label.startswith("__"):
                raise ValueError(f"not a valid label name: {label!r}")
            if label in _RESERVED_LABELS:
                raise ValueError(f"label {label!r} is set by the gateway's grouping key")
        if name not in families:
            families[name] = GaugeMetricFamily(name, help_text, labels=list(names))
            label_names[name] = names
        elif label_names[name] != names:
            raise ValueError(f"metric {name!r} pushed with labels {list(names)}, earlier with "
                             f"{list(label_names[name])}")
        families[name].add_metric([str(labels[k]) for k in names], float(value))

    class Fixed(Collector):
        def collect(self) -> Any:
            return iter(families.values())

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed())
    return registry


def push_metrics(url: str, job_id: int | str, samples: Sequence[Sample], *,
                 grouping: Mapping[str, str] | None = None,
                 timeout: float = TIMEOUT_SECONDS) -> bool:
    """Add `samples` to the job's group (POST: other writers' metrics stay). False, and a log
    line, when anything goes wrong; never raises."""
    try:
        from prometheus_client import pushadd_to_gateway

        registry = _registry(samples)
        pushadd_to_gateway(url, job=JOB_LABEL, registry=registry,
                           grouping_key=_grouping(job_id, grouping), timeout=timeout)
        return True
    except Exception as e:
        log.warning("costguard: could not push metrics of job %s to the Pushgateway at %s: "
                    "%s: %s", job_id, url, type(e).__name__, e)
        return False


def push_job_metrics(url: str, job_id: int | str, metrics: Mapping[str, float | None], *,
                     labels: Mapping[str, str] | None = None, currency: str = "USD",
                     grouping: Mapping[str, str] | None = None,
                     timeout: float = TIMEOUT_SECONDS) -> bool:
    """Push a job's figures, keyed by the short names of `JOB_METRICS` (None values are left
    out). `labels` go on every metric (say notebook, backend); `spend` also gets `currency`.
    Returns whether the gateway took them; never raises."""
    try:
        samples: list[Sample] = []
        common = {str(k): str(v) for k, v in (labels or {}).items()}
        for key, value in metrics.items():
            if value is None:
                continue
            if key not in JOB_METRICS:
                raise ValueError(f"unknown job metric {key!r} (known: {', '.join(JOB_METRICS)})")
            name, help_text = JOB_METRICS[key]
            own = dict(common, currency=currency) if key == "spend" else common
            samples.append((name, help_text, own, float(value)))
    except Exception as e:
        log.warning("costguard: not pushing metrics of job %s: %s: %s", job_id,
                    type(e).__name__, e)
        return False
    if not samples:
        return True
    return push_metrics(url, job_id, samples, grouping=grouping, timeout=timeout)


def delete_job_metrics(url: str, job_id: int | str, *, grouping: Mapping[str, str] | None = None,
                       timeout: float = TIMEOUT_SECONDS) -> bool:
    """Delete the job's whole group from the gateway (every writer's metrics). Never raises."""
    try:
        from prometheus_client import delete_from_gateway

        delete_from_gateway(url, job=JOB_LABEL, grouping_key=_grouping(job_id, grouping),
                            timeout=timeout)
        return True
    except Exception as e:
        log.warning("costguard: could not delete metrics of job %s from the Pushgateway at %s: "
                    "%s: %s", job_id, url, type(e).__name__, e)
        return False


def push_runner_metrics(url: str, job_id: int | str, status: Mapping[str, Any], *,
                        notebook: str, backend: str) -> bool:
    """What the runner knows when a job ends, from its status document: duration (first start
    to done), attempts and outcome."""
    times = status.get("phase_times") or {}
    start, done = times.get("starting"), times.get("done")
    duration = float(done) - float(start) if start is not None and done is not None else None
    state = str(status.get("state", ""))
    return push_job_metrics(url, job_id, {
        "duration_seconds": duration,
        "attempts": float(status.get("attempt", 0)),
        "succeeded": 1.0 if state == "succeeded" else 0.0,
        "end_time_seconds": float(done) if done is not None else None,
    }, labels={"notebook": notebook, "backend": backend, "state": state})


def push_finished_job(url: str, job: Any, *, currency: str,
                      gpu_utilization_ratio: float | None = None, background: bool = True,
                      timeout: float = TIMEOUT_SECONDS,
                      extra_labels: Mapping[str, str] | None = None) -> threading.Thread | None:
    """What the server knows when it sees a job end (a `spec.Job`): its spend and, when known,
    the mean utilisation of its GPUs. Meant for `JobService.listeners`; with `background` the
    HTTP request runs on a thread of its own, so the follower never waits on the gateway.
    ``extra_labels`` go on every series (whose job it is, under JupyterHub)."""
    labels = {"notebook": job.spec.notebook, "backend": job.spec.backend, "state": job.state}
    labels.update(extra_labels or {})
    gpus = job.spec.resources.gpus
    metrics: dict[str, float | None] = {
        "spend": float(job.spend),
        "gpu_utilization_ratio": gpu_utilization_ratio,
        "gpus": float(gpus) if gpus is not None else None,
    }

    def push() -> None:
        push_job_metrics(url, job.id, metrics, labels=labels, currency=currency,
                         timeout=timeout)

    if not background:
        push()
        return None
    thread = threading.Thread(target=push, name=f"costguard-push-job-{job.id}", daemon=True)
    thread.start()
    return thread
