"""The report a user's server pushes to the hub service, the service's answer, and the checks.

This is the server <-> service contract's one home: the server extension builds its report
with `report_doc` and reads the answer with `parse_answer`; the service checks every report
with `check_report`. Standard library only, so both sides import it (as the runner imports
`offload/jobdir.py`).

Trust: a user controls their server's process and configuration, so the service believes
nothing in a report that it can check otherwise. Who reports comes from the token (through
the Hub), never from the body; every number is finite and bounded, times are consistent with
the service's clock and the Hub's record of when the server started, and a report's spend
cannot grow faster than the most expensive rate a site allows.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

#: the path under the service's prefix that takes reports
REPORT_PATH = "api/report"
#: where a server finds the service (the site sets it in the spawner's environment)
ENV_HUB_URL = "COSTGUARD_HUB_URL"
VERSION = 1
#: a report body is never larger than this; bigger ones are refused unread
MAX_BODY_BYTES = 256 * 1024
#: how far the server's clock may be from the service's, in seconds
CLOCK_SKEW_SECONDS = 300.0
#: GPUs one server may claim, and the most batch jobs it may say it runs
MAX_GPUS = 64
MAX_JOBS = 10_000
#: the most warnings a server may say the user kept at once
MAX_KEPT = 16
MAX_KEY = 200
#: the alert kind of the cull warnings in the user's JupyterLab
WARNING_KIND = "hub-cull"
#: whole-text patterns (`\Z`: `$` would also accept a trailing newline)
CURRENCY = re.compile(r"[A-Z]{3}\Z")
SERVER_NAME = re.compile(r"[^\x00-\x1f/]{0,255}\Z")
FIELDS = {"version", "server", "time", "since", "spend", "waste", "unattributed", "currency",
          "simulated", "rate_per_hour", "gpu_count", "gpus_held", "gpus_busy",
          "gpu_idle_since", "active_jobs", "kept", "waste_removed"}
#: a report's `waste_removed` is at most this many hours of the site's dearest rate (a year):
#: a display figure the service does not check against anything, bounded so that one server
#: cannot fill the page with an absurd number
MAX_WASTE_REMOVED_HOURS = 24 * 366


class ReportError(ValueError):
    """A report the service refuses: the message names the reason (answered as a 4xx)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Limits:
    """The service's bounds for one report (its settings and the Hub's record)."""

    now: float
    #: when the Hub says this server started (epoch seconds); None: not known
    started: float | None = None
    #: the most a server may cost per hour on this site
    max_rate_per_hour: float = 1000.0
    skew: float = CLOCK_SKEW_SECONDS


@dataclass(frozen=True)
class Report:
    """One checked report: what this run of the server has spent since it started. The
    service keeps one epoch per run of a server as the Hub records it, whatever `since` a
    report gives, so a run's spend is capped once, not once per report."""

    server: str
    time: float
    since: float
    spend: float
    waste: float
    currency: str
    simulated: bool
    rate_per_hour: float
    gpu_count: int
    gpus_held: int
    gpus_busy: int
    gpu_idle_since: float | None
    active_jobs: int = 0
    kept: tuple[str, ...] = field(default_factory=tuple)
    #: what no kernel spent (GPUs nobody held, the host's unused share): neither active nor
    #: waste, so the pages draw it as its own band; 0 from a server of an earlier release
    unattributed: float = 0.0
    #: the waste its hibernations removed, as the server says (hibernate/store.waste_removed
    #: over its kept snapshots): shown, labelled "reported by the server", and never used for
    #: money or a stop; 0 from a server of an earlier release
    waste_removed: float = 0.0


def report_doc(*, server: str, time: float, since: float, spend: float, waste: float,
               currency: str, simulated: bool, rate_per_hour: float, gpu_count: int,
               gpus_held: int, gpus_busy: int, gpu_idle_since: float | None,
               active_jobs: int = 0, kept: list[str] | tuple[str, ...] = (),
               unattributed: float = 0.0, waste_removed: float = 0.0) -> dict[str, Any]:
    """The document a server sends (the server side's builder)."""
    return {"version": VERSION, "server": server, "time": time, "since": since,
            "spend": spend, "waste": waste, "unattributed": unattributed,
            "waste_removed": waste_removed,
            "currency": currency, "simulated": simulated,
            "rate_per_hour": rate_per_hour, "gpu_count": gpu_count, "gpus_held": gpus_held,
            "gpus_busy": gpus_busy, "gpu_idle_since": gpu_idle_since,
            "active_jobs": active_jobs, "kept": list(kept)[:MAX_KEPT]}


def parse_body(body: bytes) -> Any:
    """JSON of at most MAX_BODY_BYTES, or ReportError. Deep nesting ends in the parser's
    RecursionError, answered like any other bad JSON; the fields' checks refuse any nesting
    a report does not have."""
    if len(body) > MAX_BODY_BYTES:
        raise ReportError(f"the report is {len(body)} bytes; at most {MAX_BODY_BYTES}", 413)
    try:
        return json.loads(body, parse_constant=_no_constant)
    except ReportError:
        raise
    except (ValueError, RecursionError) as e:
        raise ReportError(f"the report is not JSON ({e})") from None


def _no_constant(name: str) -> Any:
    raise ReportError(f"the report holds {name}, which is not a number")


def _number(doc: dict[str, Any], name: str, lo: float, hi: float) -> float:
    """A bounded finite number, or ReportError (never another exception: an integer of
    hundreds of digits, which JSON allows, does not fit a float)."""
    value = doc.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ReportError(f"{name} must be a number")
    try:
        value = float(value)
    except OverflowError:
        raise ReportError(f"{name} must be within [{lo:g}, {hi:g}], not an integer "
                          "too large for a number") from None
    if not math.isfinite(value):
        raise ReportError(f"{name} must be finite")
    if not lo <= value <= hi:
        raise ReportError(f"{name} must be within [{lo:g}, {hi:g}], not {value:g}")
    return value


def _integer(doc: dict[str, Any], name: str, hi: int) -> int:
    value = doc.get(name, 0)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ReportError(f"{name} must be an integer")
    if not 0 <= value <= hi:
        raise ReportError(f"{name} must be within [0, {hi}], not {value}")
    return value


def check_report(doc: Any, limits: Limits) -> Report:
    """The checked report, or ReportError naming the first thing wrong with it."""
    if not isinstance(doc, dict):
        raise ReportError("the report must be a JSON object")
    unknown = set(doc) - FIELDS
    if unknown:
        raise ReportError(f"unknown field(s): {', '.join(sorted(unknown)[:5])}")
    if doc.get("version") != VERSION:
        raise ReportError(f"version must be {VERSION}")
    server = doc.get("server", "")
    if not isinstance(server, str) or not SERVER_NAME.match(server):
        raise ReportError("server must be a server name")
    now, skew = limits.now, limits.skew
    t = _number(doc, "time", now - skew, now + skew)
    earliest = 0.0 if limits.started is None else limits.started - skew
    since = _number(doc, "since", earliest, t)
    rate = _number(doc, "rate_per_hour", 0.0, limits.max_rate_per_hour)
    # a run cannot have cost more than the site's dearest rate for as long as it has run:
    # by the Hub's record and the service's clock where known (the skew allowed for `time`
    # and `since` widens nothing), else by the report's own times
    ran = now - limits.started if limits.started is not None else t - since
    cap = limits.max_rate_per_hour * max(0.0, ran) / 3600.0 * 1.01 + 1e-6
    spend = _number(doc, "spend", 0.0, cap)
    waste = _number(doc, "waste", 0.0, spend)
    # spend = active + waste + unattributed; float sums may overshoot by a hair
    unattributed = min(spend - waste, _number(doc, "unattributed", 0.0, spend - waste + 1e-6)
                       ) if "unattributed" in doc else 0.0
    removed = _number(doc, "waste_removed", 0.0,
                      limits.max_rate_per_hour * MAX_WASTE_REMOVED_HOURS) \
        if "waste_removed" in doc else 0.0
    currency = doc.get("currency")
    if not isinstance(currency, str) or not CURRENCY.match(currency):
        raise ReportError("currency must be an ISO 4217 code (three capital letters)")
    simulated = doc.get("simulated", False)
    if not isinstance(simulated, bool):
        raise ReportError("simulated must be true or false")
    gpu_count = _integer(doc, "gpu_count", MAX_GPUS)
    held = _integer(doc, "gpus_held", gpu_count)
    # busy is bounded by the GPUs, not by those held: NVML shows no processes in many
    # containers, and a GPU can be busy with a process the server does not see
    busy = _integer(doc, "gpus_busy", gpu_count)
    idle_since = doc.get("gpu_idle_since")
    if idle_since is not None:
        idle_since = _number(doc, "gpu_idle_since", since - skew, t)
    jobs = _integer(doc, "active_jobs", MAX_JOBS)
    kept = doc.get("kept", [])
    if not isinstance(kept, list) or len(kept) > MAX_KEPT or not all(
            isinstance(k, str) and 0 < len(k) <= MAX_KEY for k in kept):
        raise ReportError(f"kept must be a list of at most {MAX_KEPT} warning keys")
    return Report(server=server, time=t, since=since, spend=spend, waste=waste,
                  currency=currency, simulated=simulated, rate_per_hour=rate,
                  gpu_count=gpu_count, gpus_held=held, gpus_busy=busy,
                  gpu_idle_since=idle_since, active_jobs=jobs, kept=tuple(kept),
                  unattributed=max(0.0, unattributed), waste_removed=removed)


# --- the answer ---------------------------------------------------------------------------

def warning_doc(key: str, title: str, message: str, severity: str,
                details: dict[str, Any], actions: list[dict[str, str]] | None = None,
                ) -> dict[str, Any]:
    """A warning of the service (a cull, a spent budget) as the server raises it in the
    user's JupyterLab (an alert); its one action dismisses it ("Keep running" for a cull)."""
    return {"kind": WARNING_KIND, "key": key, "severity": severity, "title": title,
            "message": message,
            "actions": actions or [{"id": "dismiss", "label": "Keep running"}],
            "details": details}


def answer_doc(now: float, interval: float, warnings: list[dict[str, Any]]) -> dict[str, Any]:
    """What the service answers an accepted report: its clock, how often to report, and the
    warnings that stand for this server now (any other earlier warning is withdrawn)."""
    return {"accepted": True, "time": now, "interval": interval, "warnings": warnings}


@dataclass(frozen=True)
class Answer:
    interval: float
    warnings: tuple[dict[str, Any], ...]


def parse_answer(doc: Any, default_interval: float) -> Answer:
    """The service's answer as the server reads it; the interval bounded to 1 s .. 10 min."""
    if not isinstance(doc, dict):
        raise ValueError("the service's answer is not a JSON object")
    interval = doc.get("interval", default_interval)
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) \
            or not math.isfinite(interval):
        interval = default_interval
    warnings = doc.get("warnings") or []
    if not isinstance(warnings, list):
        raise ValueError("warnings must be a list")
    kept = tuple(w for w in warnings[:MAX_KEPT] if isinstance(w, dict)
                 and w.get("kind") == WARNING_KIND and isinstance(w.get("key"), str))
    return Answer(min(600.0, max(1.0, float(interval))), kept)
