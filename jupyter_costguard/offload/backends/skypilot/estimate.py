"""What a SkyPilot job would cost before it is launched: the optimizer's choice (cloud, region,
instance, spot or not) for the task's resources, its hourly price, and the price cap.

The choice comes from SkyPilot's optimizer through the API server (``sky.optimize``), for the
same resources `launch` asks for (`task.resources`). SkyPilot 0.14's API server answers an
optimize request with no value (its result is only in the request's log, the table ``sky
launch`` prints), so the chosen row of that table is read (`parse_plan`); a SkyPilot that
answers the optimized DAG is read from its ``best_resources`` (`choice_of`). SkyPilot prices
Slurm and Kubernetes infra at 0: such a choice is priced at the site's
``cluster_rates["skypilot"]`` instead, and says so.

Everything but `ask_optimizer` is plain data and tested without SkyPilot. Answers are kept
`CACHE_SECONDS` per resources: the dialog asks again as the user types.
"""

from __future__ import annotations

import io
import json
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from jupyter_costguard.offload.backends.skypilot import task as sky_task
from jupyter_costguard.offload.backends.skypilot.task import SkyPilotSettings
from jupyter_costguard.offload.estimate import (
    SOURCE_CLUSTER_RATES,
    SOURCE_NONE,
    SOURCE_OPTIMIZER,
    Choice,
    Estimate,
    EstimateContext,
    rates_estimate,
)
from jupyter_costguard.offload.spec import Job, JobSpec, Resources

#: SkyPilot's catalog prices are in US dollars
SKYPILOT_CURRENCY = "USD"
CACHE_SECONDS = 60.0
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
#: the prefix SkyPilot's logger puts on every line when it shows one
_PREFIX = re.compile(r"^[DIWEC] \d\d-\d\d \d\d:\d\d:\d\d\.\d+ PID=\d+ \S+:\d+\] ")
_CELLS = re.compile(r"\s{2,}")
_INFRA = re.compile(r"^(?P<cloud>[^()]+?)\s*(?:\((?P<region>[^()]*)\))?$")
CHOSEN_MARK = "\u2714"


def stand_in_job(resources: Resources) -> Job:
    """A job asking `resources`, as `task.resources` reads one (nothing else of it is used)."""
    spec = JobSpec(notebook="", cwd="", kernel_name="", cells=(), resources=resources,
                   backend="skypilot")
    return Job(id=0, spec=spec, state="queued", phase="queued", created=0.0)


def estimate_config(resources: Resources, settings: SkyPilotSettings) -> dict[str, Any]:
    """The task the optimizer is asked about: the resources `launch` would ask for."""
    return {"name": "costguard-estimate",
            "resources": sky_task.resources(stand_in_job(resources), settings)}


def _choice_from_cells(row: dict[str, str]) -> Choice:
    infra = _INFRA.match(row.get("INFRA", "").strip())
    cloud = infra.group("cloud").strip() if infra else None
    region = (infra.group("region") or None) if infra else None
    instance = row.get("INSTANCE", "").strip()
    spot = instance.endswith("[Spot]")
    instance = instance.removesuffix("[Spot]").strip()
    gpus = row.get("GPUS", "").strip()
    return Choice(cloud=cloud or None, region=region, instance_type=instance
                  if instance not in ("", "-") else None,
                  accelerators=gpus if gpus not in ("", "-") else None, use_spot=spot)


def parse_plan(text: str) -> tuple[Choice, float | None] | None:
    """The chosen row of the optimizer's "Considered resources" table in a request's log
    (colours stripped), and its hourly cost in dollars; None when the log holds no table."""
    lines = [_PREFIX.sub("", _ANSI.sub("", line)).strip() for line in text.splitlines()]
    header: list[str] | None = None
    rows: list[dict[str, str]] = []
    for line in lines:
        if not line or set(line) <= set("-+=|"):
            continue
        cells = [c.strip() for c in _CELLS.split(line.strip("| "))]
        if "INFRA" in cells and "CHOSEN" in cells:
            header, rows = [c for c in cells], []
            continue
        if header is not None and len(cells) >= len(header) - 1:
            rows.append(dict(zip(header, cells)))
    if header is None or not rows:
        return None
    chosen = [r for r in rows if CHOSEN_MARK in r.get("CHOSEN", "")]
    row = chosen[0] if chosen else rows[0] if len(rows) == 1 else None
    if row is None:
        return None
    cost_key = next((k for k in header if k.startswith("COST")), None)
    try:
        hourly = float(row[cost_key]) if cost_key and row.get(cost_key) else None
    except ValueError:
        hourly = None
    return _choice_from_cells(row), hourly


def choice_of(best: Any) -> tuple[Choice, float | None]:
    """A SkyPilot ``Resources`` the optimizer chose, as a `Choice`, and its hourly cost."""
    accs = getattr(best, "accelerators", None) or {}
    acc = ", ".join(f"{k}:{v:g}" for k, v in accs.items()) if isinstance(accs, dict) else None
    try:
        hourly: float | None = float(best.get_cost(3600))
    except Exception:  # no instance type or price known
        hourly = None
    cloud = getattr(best, "cloud", None)
    return Choice(cloud=str(cloud) if cloud is not None else None,
                  region=getattr(best, "region", None),
                  instance_type=getattr(best, "instance_type", None),
                  accelerators=acc or None,
                  use_spot=bool(getattr(best, "use_spot", False))), hourly


def make_estimate(backend: str, choice: Choice, hourly: float | None, resources: Resources,
                  settings: SkyPilotSettings, context: EstimateContext) -> Estimate:
    """The record of the optimizer's choice: its price in dollars, or, where SkyPilot
    prices it at 0 (Slurm, Kubernetes), the site's `cluster_rates` for `backend`. The cap is
    checked as `launch` checks it: against the optimizer's price."""
    cap = settings.max_price_per_hour
    refusal = sky_task.price_refusal(hourly, cap, _where(choice))
    if hourly is not None and hourly > 0:
        return Estimate(backend, hourly, SKYPILOT_CURRENCY, resources.time_limit_seconds,
                        SOURCE_OPTIMIZER, f"SkyPilot optimizer: {_where(choice)}",
                        choice=choice, price_cap=cap, refusal=refusal)
    site = rates_estimate(backend, resources, context)
    said = "prices it at 0" if hourly == 0 else "gives it no price"
    if site.source == SOURCE_CLUSTER_RATES:
        detail = f"SkyPilot optimizer chose {_where(choice)}, which SkyPilot {said}: " \
                 f"{site.detail}"
        return Estimate(backend, site.hourly_price, site.currency, site.time_limit_seconds,
                        SOURCE_CLUSTER_RATES, detail, choice=choice, price_cap=cap,
                        refusal=refusal)
    return Estimate(backend, None, context.currency, resources.time_limit_seconds, SOURCE_NONE,
                    f"SkyPilot optimizer chose {_where(choice)}, which SkyPilot {said}, and "
                    f"c.Offload.cluster_rates has no entry for {backend!r}: not priced",
                    choice=choice, price_cap=cap, refusal=refusal)


def _where(choice: Choice) -> str:
    """"AWS us-east-1, p4d.24xlarge (A100:8), spot"."""
    place = " ".join(p for p in (choice.cloud, choice.region) if p) or "an unnamed place"
    what = choice.instance_type or ""
    if choice.accelerators:
        what = f"{what} ({choice.accelerators})" if what else choice.accelerators
    market = "spot" if choice.use_spot else "on-demand"
    return ", ".join(p for p in (place, what, market) if p)


def unpriced(backend: str, resources: Resources, settings: SkyPilotSettings,
             context: EstimateContext, why: str) -> Estimate:
    """No choice: the optimizer failed or did not say (the detail says why)."""
    return Estimate(backend, None, context.currency, resources.time_limit_seconds, SOURCE_NONE,
                    f"SkyPilot's optimizer gave no price: {why}",
                    price_cap=settings.max_price_per_hour)


def ask_optimizer(sky: Any, config: dict[str, Any]) -> tuple[Choice, float | None] | None:
    """The optimizer's choice for the task `config`, through the API server (seconds)."""
    task = sky.Task.from_yaml_config(config)
    with sky.Dag() as dag:
        dag.add(task)
    log = io.StringIO()
    answer = sky.stream_and_get(sky.optimize(dag), output_stream=log)
    tasks = getattr(answer, "tasks", None)
    best = getattr(tasks[0], "best_resources", None) if tasks else None
    if best is not None:
        return choice_of(best)
    return parse_plan(log.getvalue())


class Estimator:
    """Asks the optimizer for a backend's jobs; each choice is kept `CACHE_SECONDS` per task
    resources (the time limit, rates and cap are applied to it at each ask)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._kept: dict[str, tuple[float, tuple[Choice, float | None]]] = {}

    def estimate(self, sky: Callable[[], Any], backend: str, settings: SkyPilotSettings,
                 resources: Resources, context: EstimateContext) -> Estimate:
        """What a job asking `resources` would cost; a failure is an unpriced estimate that
        says why (never kept)."""
        try:
            config = estimate_config(resources, settings)
        except sky_task.TaskError as e:
            return unpriced(backend, resources, settings, context, str(e))
        key = json.dumps(config, sort_keys=True, default=str)
        now = self.clock()
        with self._lock:
            kept = self._kept.get(key)
        if kept is not None and now - kept[0] < CACHE_SECONDS:
            found = kept[1]
        else:
            try:
                asked = ask_optimizer(sky(), config)
            except Exception as e:
                text = str(e).strip() or type(e).__name__
                return unpriced(backend, resources, settings, context, text[:500])
            if asked is None:
                return unpriced(backend, resources, settings, context,
                                "its answer named no chosen resources")
            found = asked
            with self._lock:
                self._kept = {k: v for k, v in self._kept.items()
                              if now - v[0] < CACHE_SECONDS}
                self._kept[key] = (now, found)
        return make_estimate(backend, found[0], found[1], resources, settings, context)


#: one per process: the backend keeps no state of its own for estimates
ESTIMATOR = Estimator()
