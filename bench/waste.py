#!/usr/bin/env python3
"""What costguard saves (issue 45 item 2): a replayed day of notebook work, under five
policies, through costguard's real decision, pricing, ledger and snapshot accounting code.

A seeded day for N users (default 50 users, an 8-hour working day, then the night until the
next morning): each user opens a notebook whose kernel holds one GPU, runs cells (GPU-busy
for a while, then the user thinks), breaks for lunch and meetings, sometimes starts training
in a background thread (the GPU works while the kernel is back at its prompt), and at the end
of the day shuts the kernel down, closes the tab leaving it running, or leaves the tab open
(a forgotten tab keeps a *connected* kernel); some leave training running overnight. Where
each shape and number comes from is in bench/README.md ("waste.py").

The same day is replayed under each policy, in simulated time (one sample every `--dt`
seconds per user's server):

- `none`: nothing stops a kernel but its user;
- `jupyter-server-cull`: jupyter_server's `MappingKernelManager.cull_idle_timeout=3600`,
  as `cull_kernel_if_idle` decides it (jupyter_server 2.x,
  services/kernels/kernelmanager.py): checked every `cull_interval` (300 s); a kernel is
  shut down when `now - last_activity > cull_idle_timeout` and (`cull_busy` False) its
  execution state is not "busy" and (`cull_connected` False) it has no connection: a
  forgotten open tab is never culled; a silent training thread is;
- `idle-culler`: jupyterhub-idle-culler `--timeout=3600` (jupyterhub_idle_culler 2.0,
  `cull_idle`/`handle_server`, `default_cull_arbiter`): every `cull_every` (default
  timeout // 2 = 1800 s) the whole server is stopped when the Hub's `last_activity` of it
  is at least `timeout` old. That `last_activity` is what the single-user server last
  reported (jupyterhub/singleuser/extension.py, every `hub_activity_interval` = 300 s) of
  jupyter_server's `web_app.last_activity()`: API requests (a visible JupyterLab tab polls
  /api/kernels and /api/sessions; a hidden one stands by) and kernel activity (any IOPub
  message: a cell, a training thread that prints);
- `costguard-defaults`: costguard's idle rule (`guard/idle.py`, `IdleKernelRule.evaluate`)
  with `GuardConfig()`'s defaults read at run time: when it asks `hibernate-kernel`, the
  kernel's variables are saved and its GPU freed; the user's next cell restores them first
  (resume on use), after a wait from `bench/hibernate.py`'s measured throughput. A kernel
  holding a value that cannot be saved (a generator, a socket: `--unsaveable` of kernels)
  is not shut down by an automatic hibernation (issue 44; unless
  `c.Hibernate.may_leave_behind`, whose default is read at run time, lets it leave
  the value behind: then that value counts as lost): the save answers an error, the rule
  hears it (`IdleKernelRule.heard`) and asks again after its back-off;
- `costguard-shortest`: the same with the shortest `hibernate_idle_after_seconds` of
  `--shortest-candidates` that loses nothing and interrupts nothing.

Money: each user's GPU is priced as one `--instance` (catalog, `cost/pricing.resolve_pricing`)
while a kernel holds it (a freed GPU goes back to the pool and is not billed); every sample's
cost is split by `cost/spend.split_interval` (costguard's waste split: GPU cost of a kernel
idle by every measure) and added to a real `cost/ledger.Ledger`, one per policy. The
idle-held spend is the ledger's waste. Each hibernation is a `hibernate/store.SnapshotRecord`
whose `waste_avoided` (the waste removed the product shows, capped at its horizon) and whose
rate × hibernated time (uncapped) are summed.

Invariants, checked in every run (exit 1 on a violation): the ledger's spend equals its
kernels' spend plus the unattributed part and equals rate × GPU-held time; costguard's
policies lose no variable, interrupt no busy GPU second and do all of none's GPU work;
every cent they remove is accounted for by their snapshots' hibernated time; no policy holds
GPUs longer than none; with `--live`, every variable came back.

    python bench/waste.py                           # 50 users, 8 h + night (~15 s)
    python bench/waste.py --quick --json out.json   # CI: 8 users, 3 h + 3 h night (~1 s)
    python bench/waste.py --quick --live            # and the live leg, a real server (~20 s)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from jupyter_costguard.cost.catalog import Catalog  # noqa: E402
from jupyter_costguard.cost.ledger import Ledger  # noqa: E402
from jupyter_costguard.cost.pricing import Pricing, resolve_pricing  # noqa: E402
from jupyter_costguard.cost.published import Published  # noqa: E402
from jupyter_costguard.cost.spend import IntervalCost, Share, split_interval  # noqa: E402
from jupyter_costguard.cost.viewrecords import Views  # noqa: E402
from jupyter_costguard.guard.base import Act, GuardContext, Outcome  # noqa: E402
from jupyter_costguard.guard.config import GuardConfig  # noqa: E402
from jupyter_costguard.guard.idle import IdleKernelRule  # noqa: E402
from jupyter_costguard.hibernate.store import SnapshotRecord  # noqa: E402
from jupyter_costguard.sampling.records import (  # noqa: E402
    GpuProcess,
    GpuReading,
    GpuSample,
    HostSample,
    KernelInfo,
    KernelSample,
    Sample,
)

HOUR = 3600.0
GIB = 1 << 30
#: where simulated time starts (the working day's first hour: 08:00)
T0 = 1_800_000_000.0
POLICIES = ("none", "jupyter-server-cull", "idle-culler", "costguard-defaults",
            "costguard-shortest")
#: utilisation a GPU reports while a cell or a training loop runs (percent)
BUSY_UTIL = 90.0


def may_leave_behind() -> bool:
    """`c.Hibernate.may_leave_behind`'s default, read from its config class (issue
    44 item 4): whether an automatic hibernation may leave a value that cannot live outside
    the process behind (lost) rather than keep the kernel running. False where the option
    does not exist yet (a tree before it: automatic hibernation saved what it could)."""
    try:
        from jupyter_costguard.hibernate import settings
    except ImportError:
        return False
    # c.Hibernate.may_leave_behind; in a tree before issue 47, c.CostGuard.hibernate_…
    cls = getattr(settings, "Hibernate", None) or getattr(settings, "HibernateTraits", None)
    if cls is None:
        return False
    trait = (cls.class_traits().get("may_leave_behind")
             or cls.class_traits().get("hibernate_may_leave_behind"))
    return bool(trait.default_value) if trait is not None else False


# --- the workload ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Params:
    """The day's shapes; bench/README.md ("waste.py") gives each one's source."""

    #: first cell after 08:00: normal (mean, sd) hours, clipped to [0, 2]
    arrival_h: tuple[float, float] = (0.75, 0.5)
    #: length of the working day: normal (sd) hours around `--hours`
    day_sd_h: float = 0.5
    #: lunch: starts 3.5–4.5 h after arrival, lasts 30–75 min
    lunch_after_h: tuple[float, float] = (3.5, 4.5)
    lunch_min: tuple[float, float] = (30.0, 75.0)
    #: meetings away from the desk: Poisson count per 8 h, each 30–90 min
    meetings_per_day: float = 1.0
    meeting_min: tuple[float, float] = (30.0, 90.0)
    #: a cell's GPU-busy time: lognormal (median s, sigma), capped
    cell_median_s: float = 20.0
    cell_sigma: float = 1.6
    cell_cap_s: float = 2 * HOUR
    #: think time between cells: lognormal (median s, sigma)
    think_median_s: float = 150.0
    think_sigma: float = 1.3
    #: share of users who start training in a background thread during the day;
    #: its length lognormal (median s, sigma); share of those that print progress
    train_share: float = 0.3
    train_median_s: float = 45 * 60.0
    train_sigma: float = 0.6
    train_prints: float = 0.5
    #: end of day: share that shut the kernel down, close the tab leaving it running;
    #: the rest leave the tab open (forgotten)
    end_shutdown: float = 0.35
    end_close_tab: float = 0.35
    #: share of users who start training at the end of the day and leave it overnight;
    #: its length uniform hours
    overnight_train: float = 0.15
    overnight_train_h: tuple[float, float] = (1.0, 6.0)
    #: share of cells that define a variable; its size lognormal (median bytes, sigma);
    #: a kernel's variables capped at this many bytes
    var_share: float = 0.5
    var_median_bytes: float = 64e6
    var_sigma: float = 1.5
    var_cap_bytes: float = 8 * GIB
    #: share of kernels holding a value that cannot be saved (a generator, a socket)
    unsaveable: float = 0.05


@dataclass
class Task:
    """GPU work: a cell (the kernel executes) or a training thread (the kernel is at its
    prompt)."""

    start: float
    end: float
    cell: bool
    prints: bool = True
    #: bytes of the variable it defines when it ends (0: none)
    var_bytes: int = 0


@dataclass
class User:
    name: str
    arrival: float
    departure: float
    #: intervals the user is at the desk with the tab visible (the tab polls the server)
    present: list[tuple[float, float]]
    tasks: list[Task]
    #: "shutdown" | "close-tab" | "open-tab"
    end: str
    unsaveable: bool

    def connected(self, t: float) -> bool:
        """Whether the notebook's tab is open (a websocket connection to the kernel)."""
        return self.arrival <= t and (t < self.departure or self.end == "open-tab")

    def polling(self, t: float) -> bool:
        return any(a <= t < b for a, b in self.present)


def _lognormal(rng: random.Random, median: float, sigma: float) -> float:
    return median * math.exp(rng.gauss(0.0, sigma))


def make_day(n_users: int, hours: float, seed: int, p: Params) -> list[User]:
    """The seeded day: every user's cells, threads, breaks and end of day (absolute times)."""
    rng = random.Random(seed)
    users = []
    scale = hours / 8.0
    for i in range(n_users):
        arrival = T0 + min(2.0, max(0.0, rng.gauss(*p.arrival_h))) * HOUR * scale
        departure = arrival + max(1.0, rng.gauss(hours, p.day_sd_h * scale)) * HOUR
        away: list[tuple[float, float]] = []
        lunch = arrival + rng.uniform(*p.lunch_after_h) * HOUR * scale
        away.append((lunch, lunch + rng.uniform(*p.lunch_min) * 60.0))
        meetings = _poisson(rng, p.meetings_per_day * hours / 8.0)
        for _ in range(meetings):
            m = rng.uniform(arrival, departure)
            away.append((m, m + rng.uniform(*p.meeting_min) * 60.0))
        away.sort()
        present = _subtract((arrival, departure), away)
        tasks: list[Task] = []
        train_at = rng.uniform(arrival, departure - HOUR) if rng.random() < p.train_share \
            else None
        t = arrival
        while t < departure:
            slot = next(((a, b) for a, b in present if b > t), None)
            if slot is None:
                break
            t = max(t, slot[0])
            busy = min(p.cell_cap_s, _lognormal(rng, p.cell_median_s, p.cell_sigma))
            nbytes = int(_lognormal(rng, p.var_median_bytes, p.var_sigma)) \
                if rng.random() < p.var_share else 0
            tasks.append(Task(t, t + busy, cell=True, var_bytes=nbytes))
            t += busy
            if train_at is not None and t >= train_at:
                length = _lognormal(rng, p.train_median_s, p.train_sigma)
                tasks.append(Task(t, t + length, cell=False,
                                  prints=rng.random() < p.train_prints))
                train_at = None
            t += _lognormal(rng, p.think_median_s, p.think_sigma)
        r = rng.random()
        end = ("shutdown" if r < p.end_shutdown else
               "close-tab" if r < p.end_shutdown + p.end_close_tab else "open-tab")
        if rng.random() < p.overnight_train:
            end = "close-tab" if end == "shutdown" else end  # it must keep running
            length = rng.uniform(*p.overnight_train_h) * HOUR
            last = max((x.end for x in tasks), default=departure)
            start = max(last, departure - 60.0)
            tasks.append(Task(start, start + length, cell=False,
                              prints=rng.random() < p.train_prints))
        users.append(User(f"user{i:03d}", arrival, departure, present, tasks, end,
                          rng.random() < p.unsaveable))
    return users


def _poisson(rng: random.Random, lam: float) -> int:
    n, acc, limit = 0, 1.0, math.exp(-lam)
    while True:
        acc *= rng.random()
        if acc < limit:
            return n
        n += 1


def _subtract(span: tuple[float, float],
              holes: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out, start = [], span[0]
    for a, b in holes:
        if a > start:
            out.append((start, min(a, span[1])))
        start = max(start, b)
    if start < span[1]:
        out.append((start, span[1]))
    return [(a, b) for a, b in out if b > a]


# --- restore and save times from bench/hibernate.py -----------------------------------------


@dataclass(frozen=True)
class Throughput:
    """bench/README.md, "hibernate.py", the 4 GB hibernate row of format 3 on a quieter
    machine: save 3.75 s and restore 1.14 s for 4.00 GB (warm page cache, two cores); a kernel
    start before a restore."""

    save_bytes_per_s: float = 4.0 * GIB / 3.75
    restore_bytes_per_s: float = 4.0 * GIB / 1.14
    kernel_start_s: float = 2.0

    def restore_wait(self, nbytes: int) -> float:
        return self.kernel_start_s + nbytes / self.restore_bytes_per_s

    def save_seconds(self, nbytes: int) -> float:
        return nbytes / self.save_bytes_per_s


# --- one policy's replay --------------------------------------------------------------------


@dataclass
class Result:
    """One policy's day."""

    name: str
    settings: dict[str, Any] = field(default_factory=dict)
    held_seconds: float = 0.0
    busy_seconds: float = 0.0
    spend: float = 0.0
    idle_held_spend: float = 0.0
    #: of it, the kernels holding a value that cannot be saved (auto-hibernation refused)
    idle_held_spend_unsaveable: float = 0.0
    #: of it, what hibernated kernels wasted before they were (the rule's own idle waste of
    #: the idle period it hibernated them in: `idle_waste` of its finding)
    idle_held_spend_before_hibernation: float = 0.0
    unattributed: float = 0.0
    kernels_spend: float = 0.0
    kernels_stopped: int = 0
    variables_lost: int = 0
    variables_lost_bytes: int = 0
    busy_seconds_interrupted: float = 0.0
    busy_seconds_not_run: float = 0.0
    hibernations: int = 0
    hibernations_refused: int = 0
    restores: int = 0
    variables_restored: int = 0
    restore_wait_seconds: list[float] = field(default_factory=list)
    #: what the product shows as waste removed (`SnapshotRecord.waste_avoided`: capped at
    #: its horizon) and the rate × every hibernated second (the accounting the invariant uses)
    waste_avoided: float = 0.0
    hibernated_spend: float = 0.0
    rate_per_hour: float = 0.0

    def doc(self, none: Result | None) -> dict[str, Any]:
        waits = sorted(self.restore_wait_seconds)
        removed = (1.0 - self.idle_held_spend / none.idle_held_spend
                   if none is not None and none.idle_held_spend > 0 else 0.0)
        return {
            "settings": self.settings,
            "gpu_hours_held": round(self.held_seconds / HOUR, 3),
            "gpu_hours_busy": round(self.busy_seconds / HOUR, 3),
            "spend": round(self.spend, 4),
            "idle_held_spend": round(self.idle_held_spend, 4),
            "idle_held_spend_unsaveable_kernels": round(self.idle_held_spend_unsaveable, 4),
            "idle_held_spend_before_hibernation": round(
                self.idle_held_spend_before_hibernation, 4),
            # the rest: idle gaps shorter than the threshold (the user thinking, a short
            # break), and waits after a refused hibernation (the rule's back-off)
            "idle_held_spend_other": round(
                self.idle_held_spend - self.idle_held_spend_unsaveable
                - self.idle_held_spend_before_hibernation, 4),
            "spend_removed": round((none.spend - self.spend) if none else 0.0, 4),
            "idle_held_spend_removed": round(
                (none.idle_held_spend - self.idle_held_spend) if none else 0.0, 4),
            "removed_share": round(removed, 4),
            "variables_lost": self.variables_lost,
            "variables_lost_bytes": self.variables_lost_bytes,
            "busy_seconds_interrupted": round(self.busy_seconds_interrupted, 1),
            "busy_seconds_not_run": round(self.busy_seconds_not_run, 1),
            "kernels_stopped": self.kernels_stopped,
            "hibernations": self.hibernations,
            "hibernations_refused": self.hibernations_refused,
            "restores": self.restores,
            "variables_restored": self.variables_restored,
            "restore_wait_seconds_total": round(sum(waits), 1),
            "restore_wait_seconds_median": round(waits[len(waits) // 2], 2) if waits else 0.0,
            "restore_wait_seconds_max": round(waits[-1], 2) if waits else 0.0,
            "waste_avoided": round(self.waste_avoided, 4),
            "hibernated_spend": round(self.hibernated_spend, 4),
        }


@dataclass
class Kernel:
    """A user's live kernel under one policy."""

    kid: str
    started: float
    last_activity: float
    variables: list[int] = field(default_factory=list)
    #: the hibernation asked for at the last sample, whose answer comes at the next
    hibernating: Act | None = None
    #: the idle waste the rule counted in the idle period it asked to hibernate in
    hibernating_waste: float = 0.0


class Replay:
    """One user's day under one policy; `step` is one sample of that user's server."""

    def __init__(self, user: User, policy: str, config: GuardConfig | None,
                 pricing: Pricing, tp: Throughput, result: Result,
                 leave_behind: bool = False) -> None:
        self.user = user
        self.leave_behind = leave_behind
        self.policy = policy
        self.pricing = pricing
        self.tp = tp
        self.r = result
        self.rule = IdleKernelRule(config) if config is not None else None
        self.kernel: Kernel | None = None
        self.generation = 0
        #: the tasks in order of start; the next one not yet begun; those under way
        self.tasks = sorted(user.tasks, key=lambda x: x.start)
        self.next_task = 0
        self.active: list[Task] = []
        #: when a stopped kernel cut a task short (its work ends there)
        self.cut: dict[int, float] = {}
        #: the cells whose variable was defined (once each)
        self.defined: set[int] = set()
        self.done_by_user = False
        self.snapshot: SnapshotRecord | None = None
        self.snapshot_vars: list[int] = []
        self.next_cull_check = user.arrival + 300.0  # jupyter_server's cull_interval
        #: the Hub's view of the server's last activity (reported every 300 s)
        self.hub_activity = user.arrival
        self.next_hub_report = user.arrival + 300.0
        self._last_cost = IntervalCost(total=0.0, unattributed=0.0, unattributed_gpu=0.0)

    def _end(self, x: Task) -> float:
        return min(x.end, self.cut.get(id(x), math.inf))

    # -- the policies' actions --------------------------------------------------------------

    def _stop(self, t: float) -> None:
        """Culling: the kernel and its variables are gone; its running work ends."""
        k = self.kernel
        assert k is not None
        self.r.kernels_stopped += 1
        self.r.variables_lost += len(k.variables)
        self.r.variables_lost_bytes += sum(k.variables)
        for x in self.active:
            end = self._end(x)
            if x.start <= t < end:
                self.r.busy_seconds_interrupted += t - x.start
                self.r.busy_seconds_not_run += end - t
                self.cut[id(x)] = t
        self.kernel = None

    def _start_kernel(self, t: float) -> None:
        self.generation += 1
        variables: list[int] = []
        if self.snapshot is not None:  # resume on use: restored before the cell runs
            variables = list(self.snapshot_vars)
            self.r.restores += 1
            self.r.variables_restored += len(variables)
            self.r.restore_wait_seconds.append(self.tp.restore_wait(sum(variables)))
            restored = dataclasses.replace(self.snapshot, restored=t)
            self._count(restored, t)
            self.snapshot = None
        self.kernel = Kernel(f"{self.user.name}-k{self.generation}", t, t, variables)
        self.hub_activity = max(self.hub_activity, t)  # a new server (idle-culler) is fresh

    def step(self, t: float, dt: float) -> IntervalCost | None:
        """One sample at t covering (t - dt, t]: the kernel's state, the policy's decision,
        the interval's cost (None when no kernel holds the GPU)."""
        u = self.user
        t0 = t - dt
        begun: list[Task] = []
        while self.next_task < len(self.tasks) and self.tasks[self.next_task].start <= t:
            begun.append(self.tasks[self.next_task])
            self.next_task += 1
        if begun and self.kernel is None and not self.done_by_user:
            # the user's next cell needs its kernel: start one (a snapshot restored first)
            self._start_kernel(begun[0].start)
        if self.kernel is None:  # nobody runs the work that began (the user stopped it)
            for x in begun:
                self.cut[id(x)] = x.start
        self.active += begun
        if (u.end == "shutdown" and not self.done_by_user and t >= u.departure
                and all(self._end(x) <= t for x in self.active)
                and self.next_task >= len(self.tasks)):
            self.kernel = None  # the user shuts it down at the end of the day: nothing lost
            self.done_by_user = True
        k = self.kernel
        if k is None:
            self.active = [x for x in self.active if self._end(x) > t]
            return None
        start = max(t0, k.started)
        held = t - start
        # GPU-busy seconds in (start, t], overlapping work counted once; IOPub activity
        spans = sorted((max(start, x.start), min(t, self._end(x))) for x in self.active)
        busy, edge = 0.0, start
        executing = False
        for a, b in spans:
            a = max(a, edge)
            if b > a:
                busy += b - a
                edge = b
        for x in self.active:
            end = self._end(x)
            if x.cell:
                executing = executing or x.start <= t < end
                if end <= t and x.var_bytes and id(x) not in self.defined:
                    self.defined.add(id(x))
                    if sum(k.variables) + x.var_bytes <= Params.var_cap_bytes:
                        k.variables.append(x.var_bytes)
            # a cell's messages and a printing thread's progress are kernel activity; a
            # silent thread's last message is the cell that started it
            seen = min(t, end) if (x.cell or x.prints) else x.start
            k.last_activity = max(k.last_activity, seen)
        util = min(100.0, BUSY_UTIL * busy / held) if held > 0 else 0.0
        sample = _sample(t, held, k, "busy" if executing else "idle", util,
                         1 if u.connected(t) else 0, u.name)
        cost = split_interval(sample, self.pricing.rate_per_hour, self.pricing.gpu_share)
        self.r.held_seconds += held
        self.r.busy_seconds += busy
        self._last_cost = cost
        self._decide(t, sample, cost, bool(begun))
        self.active = [x for x in self.active if self._end(x) > t]
        return cost

    def _decide(self, t: float, sample: Sample, cost: IntervalCost, used: bool) -> None:
        k = self.kernel
        assert k is not None
        u = self.user
        if self.policy == "jupyter-server-cull":
            while t >= self.next_cull_check:
                check = self.next_cull_check
                self.next_cull_check += 300.0
                info = sample.kernels[0].info
                if (check - k.last_activity > 3600.0 and info.execution_state != "busy"
                        and not u.connected(check)):
                    self._stop(check)
                    return
        elif self.policy == "idle-culler":
            while t >= self.next_hub_report:  # the single-user server reports its activity
                report = self.next_hub_report
                self.next_hub_report += 300.0
                seen = report if u.polling(report) else k.last_activity
                self.hub_activity = max(self.hub_activity, min(seen, report))
            # cull_every = timeout // 2 = 1800 s, on the Hub's clock
            if int(t // 1800.0) != int((t - sample.interval) // 1800.0):
                check = (t // 1800.0) * 1800.0
                if check - self.hub_activity >= 3600.0:
                    self._stop(check)
        elif self.rule is not None:
            if k.hibernating is not None:
                self._finish_hibernation(t, used)
                if self.kernel is None:
                    return
            published = Published(sample=sample, cost=cost, pricing=self.pricing,
                                  views=Views(time=t))
            ctx = GuardContext(now=t, published=published, ledger=_NO_LEDGER,
                               catalog=_CATALOG, config=self.rule.config)
            judged = self.rule.evaluate(ctx)
            for act in judged.acts:
                if act.action == "hibernate-kernel" and act.kernel_id == k.kid:
                    k.hibernating = act  # the save runs; its answer comes with the next sample
                    k.hibernating_waste = sum(
                        float(f.details.get("idle_waste") or 0.0) for f in judged.findings
                        if f.kind == IdleKernelRule.kind and f.kernel_id == k.kid)
                elif act.action == "shutdown-kernel":
                    self._stop(t)

    def _finish_hibernation(self, t: float, used: bool) -> None:
        """The save asked for at the last sample is done (a save of a few GB takes seconds,
        less than a sample's interval): the kernel is shut down only if it was not used
        meanwhile and every variable was saved (issue 44); otherwise it keeps running."""
        k = self.kernel
        assert k is not None and k.hibernating is not None and self.rule is not None
        act, k.hibernating = k.hibernating, None
        error = ("a cell ran while the snapshot was written: the kernel keeps running"
                 if used else
                 "not hibernated: `stream` (a generator) cannot be saved; the kernel keeps "
                 "running" if self.user.unsaveable and not self.leave_behind else None)
        if error is not None:
            self.r.hibernations_refused += 1
            self.rule.heard(Outcome(act=act, time=t, error=error))
            return
        if self.user.unsaveable:  # left behind, named (hibernate_may_leave_behind): lost
            self.r.variables_lost += 1
        nbytes = sum(k.variables)
        self.r.hibernations += 1
        # the saving sample is idle too (charged as waste, not hidden): counted with it
        self.r.idle_held_spend_before_hibernation += k.hibernating_waste + sum(
            sh.waste for sh in self._last_cost.shares.values())
        self.snapshot = SnapshotRecord(
            id=f"{k.kid}-snap", notebook=f"{self.user.name}.ipynb", created=t, bytes=nbytes,
            saved=[f"v{i}" for i in range(len(k.variables))], skipped=[],
            kernel_name="python3", user=self.user.name, gpus_held=1, digest="", mac="",
            rate_per_hour_held=self.pricing.rate_per_hour)
        self.snapshot_vars = list(k.variables)
        self.rule.heard(Outcome(act=act, time=t, result={
            "id": self.snapshot.id, "notebook": self.snapshot.notebook,
            "saved": self.snapshot.saved, "skipped": [], "gpus_freed": 1, "bytes": nbytes}))
        self.kernel = None

    def close(self, end: float) -> None:
        """The night is over: a snapshot still pending counts its hibernated time."""
        if self.snapshot is not None:
            self._count(self.snapshot, end)

    def _count(self, snapshot: SnapshotRecord, t: float) -> None:
        """A snapshot's waste removed as the product shows it, and its hibernated spend."""
        self.r.waste_avoided += snapshot.waste_avoided(t)
        self.r.hibernated_spend += \
            (snapshot.rate_per_hour_held or 0.0) * snapshot.hibernated_seconds(t) / 3600.0


_CATALOG = Catalog.load()
_NO_LEDGER: Any = None  # the idle rule reads the interval cost, not the ledger


def _sample(t: float, interval: float, k: Kernel, state: str, util: float,
            connections: int, user: str) -> Sample:
    """One user's server sampled: one GPU held by the notebook's kernel."""
    pid = 4242
    held = 12 * GIB
    gpu = GpuSample(index=0, uuid=f"GPU-{user}", name="Tesla V100-SXM2-16GB",
                    memory_total_bytes=16 * GIB, memory_used_bytes=held,
                    utilization_percent=util, power_watts=None,
                    processes=(GpuProcess(pid, held),))
    info = KernelInfo(kernel_id=k.kid, name="python3", pid=pid, execution_state=state,
                      last_activity=k.last_activity, connections=connections,
                      path=f"{user}.ipynb")
    kernel = KernelSample(info=info, pids=(pid,), cpu_seconds=0.0, rss_bytes=GIB,
                          gpu_memory_bytes={gpu.uuid: held})
    host = HostSample(cpu_count=8, cpu_percent=5.0, memory_total_bytes=61 * GIB,
                      memory_used_bytes=4 * GIB)
    return Sample(time=t, interval=interval, gpu=GpuReading(status="ok", gpus=(gpu,)),
                  host=host, kernels=(kernel,), simulated=True)


def _merge(costs: list[IntervalCost]) -> IntervalCost:
    shares: dict[str, Share] = {}
    for c in costs:
        shares.update(c.shares)
    return IntervalCost(total=sum(c.total for c in costs),
                        unattributed=sum(c.unattributed for c in costs),
                        unattributed_gpu=sum(c.unattributed_gpu for c in costs),
                        shares=shares)


def run_policy(name: str, users: list[User], config: GuardConfig | None, pricing: Pricing,
               tp: Throughput, span: float, dt: float, folder: Path) -> Result:
    """The day under one policy: every user's server sampled every `dt`, every interval's
    cost added to this policy's ledger."""
    result = Result(name, rate_per_hour=pricing.rate_per_hour or 0.0)
    if config is not None:
        result.settings = {"hibernate_idle_after_seconds": config.hibernate_idle_after_seconds,
                           "idle_kernel_seconds": config.idle_kernel_seconds,
                           "cull_idle_kernels": config.cull_idle_kernels}
    policy = "costguard" if name.startswith("costguard") else name
    leave = may_leave_behind()
    if config is not None:
        result.settings["hibernate_may_leave_behind"] = leave
    replays = [Replay(u, policy, config, pricing, tp, result, leave) for u in users]
    ledger = Ledger(folder / f"{name}.sqlite", now=T0)
    try:
        steps = math.ceil(span / dt)
        for i in range(1, steps + 1):
            t = T0 + i * dt
            costs = [c for r in replays if (c := r.step(t, dt)) is not None]
            if costs:
                merged = _merge(costs)
                ledger.record(t, dt, merged, paths={kid: kid.rsplit("-", 1)[0] + ".ipynb"
                                                    for kid in merged.shares},
                              names={kid: "python3" for kid in merged.shares})
        for r in replays:
            r.close(T0 + steps * dt)
        s = ledger.server
        result.spend = s.spend
        result.idle_held_spend = s.waste
        result.unattributed = s.unattributed
        result.kernels_spend = sum(tot.spend for tot in ledger.kernels.values())
        blocked = {f"{u.name}.ipynb" for u in users if u.unsaveable}
        result.idle_held_spend_unsaveable = sum(
            tot.waste for (_, path), tot in ledger.kernels.items() if path in blocked)
    finally:
        ledger.db.close()
    return result


# --- invariants -------------------------------------------------------------------------------


def invariants(results: dict[str, Result]) -> list[str]:
    """What must hold in every run; the violations, as sentences."""
    bad = []
    none = results["none"]
    for name, r in results.items():
        rate_time = r.rate_per_hour * r.held_seconds / HOUR
        if not math.isclose(r.spend, r.kernels_spend + r.unattributed, rel_tol=1e-9,
                            abs_tol=1e-6):
            bad.append(f"{name}: ledger spend {r.spend:.6f} != kernels "
                       f"{r.kernels_spend:.6f} + unattributed {r.unattributed:.6f}")
        if not math.isclose(r.spend, rate_time, rel_tol=1e-9, abs_tol=1e-6):
            bad.append(f"{name}: ledger spend {r.spend:.6f} != rate x GPU-held time "
                       f"{rate_time:.6f}")
        if r.held_seconds > none.held_seconds + 1e-6:
            bad.append(f"{name}: holds GPUs longer than no guard")
        if name.startswith("costguard") or name == "none":
            if r.variables_lost or r.busy_seconds_interrupted:
                bad.append(f"{name}: lost {r.variables_lost} variables and interrupted "
                           f"{r.busy_seconds_interrupted:.0f} busy GPU-seconds")
            removed = none.spend - r.spend
            if removed > r.hibernated_spend + 1e-6:
                bad.append(f"{name}: removed {removed:.4f} of spend but its snapshots' "
                           f"hibernated time accounts for {r.hibernated_spend:.4f} (it freed "
                           "GPUs otherwise)")
            if not math.isclose(r.busy_seconds, none.busy_seconds, rel_tol=1e-9,
                                abs_tol=1e-6):
                bad.append(f"{name}: busy GPU time {r.busy_seconds:.1f} s differs from no "
                           f"guard's {none.busy_seconds:.1f} s (work was cut or invented)")
    return bad


# --- the live leg: a real server, real kernels, the NVML stand-in --------------------------

#: the live notebook's variables, and a fingerprint of all of them (printed by both cells)
LIVE_SETUP = """
import os, hashlib, pickle
blob = os.urandom(8 << 20)
table = {i: str(i) * 3 for i in range(20000)}
weights = [i / 7 for i in range(200000)]
settings = {"lr": 0.1, "layers": [64, 32], "name": "live"}
class Model:
    def __init__(self, w): self.w = w
model = Model(weights[:10])
"""
LIVE_NAMES = {"blob", "table", "weights", "settings", "model", "Model"}
LIVE_CHECK = """
import hashlib, pickle, os
print(os.getpid(), hashlib.sha256(pickle.dumps(
    [blob, table, weights, settings, model.w])).hexdigest(), flush=True)
"""
LIVE_TRAIN = """
import threading, time, pathlib
def _train(go=pathlib.Path({go!r})):
    while not go.exists():
        time.sleep(0.05)
threading.Thread(target=_train, daemon=True).start()
"""


def live(seconds: float = 120.0) -> dict[str, Any]:
    """A real Jupyter server with costguard on the NVML stand-in (one GPU): a notebook's kernel
    defines variables, trains in a thread (its GPU at 90% while it waits at its prompt: never
    hibernated), goes idle and is hibernated by the idle rule; the notebook's next kernel
    (a new session, as a user reopening it) runs a cell that finds every variable back, by a
    fingerprint of them all. Opt-in (`--live`): it takes a minute."""
    from jupyter_client import BlockingKernelClient

    from tests.support.nvmlstub import Gpu, Proc, Scenario, subprocess_env
    from tests.support.server_proc import ServerProcess

    def wait(what: Any, why: str, timeout: float = seconds) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            found = what()
            if found:
                return found
            if time.monotonic() > deadline:
                raise RuntimeError(f"live: timed out waiting until {why}")
            time.sleep(0.1)

    after = 3.0
    with tempfile.TemporaryDirectory(prefix="costguard-waste-live-") as tmp:
        root = Path(tmp)
        gpu = Gpu(uuid="GPU-0000-live", name="Tesla V100-SXM2-16GB", mem_total=16 * GIB, util=0)
        scenario = root / "scenario.txt"
        Scenario(gpus=[gpu]).write(scenario)
        config = {"db_path": str(root / "ledger.sqlite"), "sample_interval": 0.25,
                  "instance_type": "p3.2xlarge", "hibernate_on_stop_seconds": 0,
                  "offload_warm_kernels": 0, "idle_kernel_seconds": 1.0,
                  "hibernate_idle_after_seconds": after}
        # loopback only: the server asks no cloud's metadata service, whoever runs the bench
        env = {**subprocess_env(scenario), "COSTGUARD_CLOUD_METADATA": "off",
               "AWS_EC2_METADATA_DISABLED": "true"}
        server = ServerProcess(root / "srv", config, env=env).start()

        def run(kid: str, code: str) -> str:
            conn = root / "srv" / "runtime" / f"kernel-{kid}.json"
            client = BlockingKernelClient(connection_file=str(conn))
            client.load_connection_file()
            client.start_channels()
            out: list[str] = []
            try:
                client.wait_for_ready(timeout=60)
                reply = client.execute_interactive(
                    code, timeout=120, output_hook=lambda m: out.append(
                        m["content"].get("text", "") if m["msg_type"] == "stream" else
                        f"{m['content'].get('ename')}: {m['content'].get('evalue')}"
                        if m["msg_type"] == "error" else ""))
            finally:
                client.stop_channels()
            if reply["content"]["status"] != "ok":
                raise RuntimeError(f"live: the cell failed: {''.join(out)}")
            return "".join(out).strip()

        def kernels() -> set[str]:
            return {k["id"] for k in server.get("api/kernels")}

        try:
            kid = server.start_session("live.ipynb")["kernel"]["id"]
            run(kid, LIVE_SETUP)
            pid, before = run(kid, LIVE_CHECK).split()
            go = root / "go"
            run(kid, LIVE_TRAIN.format(go=str(go)))
            # the kernel trains in a thread: its process on the GPU at 90% while it waits
            gpu.procs, gpu.mem_used, gpu.util = [Proc(int(pid), 4 * GIB)], 4 * GIB, 90
            Scenario(gpus=[gpu]).write(scenario)
            wait(lambda: any(k["kernel_id"] == kid and k["gpus"] == [gpu.uuid]
                             for k in server.get("costguard/api/kernels")["kernels"]),
                 "the kernel holds the GPU")
            time.sleep(3 * after)  # well past hibernate_idle_after_seconds of prompt time
            trained_through = kid in kernels()
            go.write_text("go")
            gpu.util = 0  # the training ended: now idle by every measure
            Scenario(gpus=[gpu]).write(scenario)
            started = time.monotonic()
            wait(lambda: kid not in kernels(), "the idle kernel is hibernated")
            hibernated_after = time.monotonic() - started
            snaps = server.get("costguard/api/snapshots?notebook=live.ipynb")["snapshots"]
            snap = snaps[0] if snaps else {}
            # the user reopens the notebook and runs a cell: resume on use restores first
            started = time.monotonic()
            fresh = server.start_session("live.ipynb")["kernel"]["id"]
            out = run(fresh, LIVE_CHECK)
            resumed_in = time.monotonic() - started
        finally:
            server.stop()
    after_pid, after_fp = out.split() if len(out.split()) == 2 else ("", out)
    saved = set(snap.get("saved") or [])
    return {"ok": (trained_through and after_fp == before and fresh != kid
                   and LIVE_NAMES <= saved),
            "never_hibernated_while_training": trained_through,
            "hibernated_seconds_after_idle": round(hibernated_after, 2),
            "variables_saved": sorted(saved),
            "snapshot_bytes": snap.get("bytes"),
            "fingerprint_before": before, "fingerprint_after": after_fp,
            "new_kernel": fresh != kid and after_pid != pid,
            "first_cell_seconds_after_reopen": round(resumed_in, 2)}


# --- the run ----------------------------------------------------------------------------------


def table(results: dict[str, Result], currency: str) -> str:
    none = results["none"]
    head = ("| policy | GPU-h held | GPU-h busy | idle-held spend (of it, kernels with an "
            "unsaveable value) | removed vs none | "
            "variables lost (bytes) | busy GPU-s interrupted | hibernations (refused) | "
            "restores: median / max wait |")
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in results.items():
        d = r.doc(none)
        lines.append(
            f"| {name} | {d['gpu_hours_held']:.1f} | {d['gpu_hours_busy']:.1f} | "
            f"{d['idle_held_spend']:.2f} {currency} "
            f"({d['idle_held_spend_unsaveable_kernels']:.2f}) | {100 * d['removed_share']:.1f}% | "
            f"{d['variables_lost']} ({d['variables_lost_bytes'] / GIB:.1f} GiB) | "
            f"{d['busy_seconds_interrupted']:.0f} | {d['hibernations']} "
            f"({d['hibernations_refused']}) | {d['restores']}: "
            f"{d['restore_wait_seconds_median']:.1f} s / {d['restore_wait_seconds_max']:.1f} s |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--users", type=int, default=50)
    ap.add_argument("--hours", type=float, default=8.0, help="the working day")
    ap.add_argument("--night", type=float, default=16.0,
                    help="hours simulated after the day (kernels left overnight)")
    ap.add_argument("--seed", type=int, default=45)
    ap.add_argument("--dt", type=float, default=30.0, help="seconds between samples")
    ap.add_argument("--instance", default="p3.2xlarge",
                    help="the catalog instance each user's GPU is priced as")
    ap.add_argument("--shortest-candidates", default="300,600,900,1200,1800",
                    help="hibernate_idle_after_seconds tried, shortest first")
    ap.add_argument("--unsaveable", type=float, default=Params.unsaveable,
                    help="share of kernels holding a value that cannot be saved")
    ap.add_argument("--quick", action="store_true",
                    help="CI: 8 users, a 3-hour day and a 3-hour night, 60 s samples")
    ap.add_argument("--json", type=Path, help="write every figure here")
    ap.add_argument("--live", action="store_true",
                    help="also a short live leg: a real server and kernels on the NVML "
                    "stand-in hibernate an idle kernel and resume it on use (a minute)")
    args = ap.parse_args(argv)
    if args.quick:
        args.users, args.hours, args.night, args.dt = 8, 3.0, 3.0, 60.0
    started = time.monotonic()
    params = Params(unsaveable=args.unsaveable)
    users = make_day(args.users, args.hours, args.seed, params)
    catalog = _CATALOG
    pricing = resolve_pricing(catalog, instance_type=args.instance, environ={}, gpu=None,
                              host=None, hourly_rate=None, market="on-demand")
    if not pricing.rate_per_hour:
        print(f"no price for {args.instance}: {pricing.detail}", file=sys.stderr)
        return 2
    tp = Throughput()
    span = (args.hours + args.night) * HOUR
    defaults = GuardConfig()
    results: dict[str, Result] = {}
    with tempfile.TemporaryDirectory(prefix="costguard-waste-") as tmp:
        folder = Path(tmp)
        for name in POLICIES[:4]:
            cfg = defaults if name == "costguard-defaults" else None
            results[name] = run_policy(name, users, cfg, pricing, tp, span, args.dt, folder)
        tried = []
        for after in (float(x) for x in args.shortest_candidates.split(",")):
            cfg = defaults.replaced(hibernate_idle_after_seconds=after)
            r = run_policy(f"costguard-shortest-{int(after)}", users, cfg, pricing, tp, span,
                           args.dt, folder)
            r.name = "costguard-shortest"
            tried.append(after)
            if r.variables_lost == 0 and r.busy_seconds_interrupted == 0:
                r.settings["tried"] = tried
                results["costguard-shortest"] = r
                break
        else:
            print("no candidate of --shortest-candidates loses nothing", file=sys.stderr)
            return 1
    none = results["none"]
    tasks = [x for u in users for x in u.tasks]
    workload = {
        "users": args.users, "hours": args.hours, "night_hours": args.night,
        "seed": args.seed, "dt_seconds": args.dt, "instance": args.instance,
        "rate_per_hour": pricing.rate_per_hour, "currency": pricing.currency,
        "gpu_share": pricing.gpu_share,
        "cells": sum(1 for x in tasks if x.cell),
        "training_threads": sum(1 for x in tasks if not x.cell),
        "end_of_day": {e: sum(1 for u in users if u.end == e)
                       for e in ("shutdown", "close-tab", "open-tab")},
        "unsaveable_share": args.unsaveable,
        "unsaveable_kernels": sum(1 for u in users if u.unsaveable),
        "busy_share_of_held_none": round(none.busy_seconds / none.held_seconds, 4)
        if none.held_seconds else 0.0,
        "guard_defaults": {"hibernate_idle_after_seconds":
                           defaults.hibernate_idle_after_seconds,
                           "idle_kernel_seconds": defaults.idle_kernel_seconds,
                           "cull_idle_kernels": defaults.cull_idle_kernels,
                           "hibernate_may_leave_behind": may_leave_behind()},
        "restore_throughput_bytes_per_s": tp.restore_bytes_per_s,
        "save_throughput_bytes_per_s": tp.save_bytes_per_s,
    }
    bad = invariants(results)
    live_doc: dict[str, Any] | None = None
    if args.live:
        try:
            live_doc = live()
        except Exception as e:  # said in the report, and a violation
            live_doc = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        if not live_doc["ok"]:
            bad.append(f"live: not every variable came back on use: {live_doc}")
    doc = {"workload": workload,
           "policies": {n: r.doc(none) for n, r in results.items()},
           "invariants": {"ok": not bad, "violations": bad},
           **({"live": live_doc} if live_doc is not None else {}),
           "seconds": round(time.monotonic() - started, 1)}
    cmd = "python bench/waste.py" + (" --quick" if args.quick else "")
    print(f"{cmd}: {args.users} users, {args.hours:g} h day + {args.night:g} h night, "
          f"{args.dt:g} s samples, seed {args.seed}; each GPU priced as {args.instance} "
          f"({pricing.rate_per_hour:.3f} {pricing.currency}/h); costguard defaults: "
          f"hibernate_idle_after_seconds={defaults.hibernate_idle_after_seconds}; "
          f"shortest: {results['costguard-shortest'].settings['hibernate_idle_after_seconds']}")
    print(f"GPU busy share of held time without a guard: "
          f"{100 * workload['busy_share_of_held_none']:.1f}%\n")
    print(table(results, pricing.currency))
    if live_doc is not None:
        print(f"\nlive: {json.dumps(live_doc, indent=1)}")
    if args.json:
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    if bad:
        print("\nINVARIANT VIOLATED:\n- " + "\n- ".join(bad), file=sys.stderr)
        return 1
    print(f"\ninvariants hold (conservation of spend; costguard loses nothing, interrupts "
          f"nothing) [{doc['seconds']} s]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
