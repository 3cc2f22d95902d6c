"""Guard rule `idle-gpu-kernel`: a kernel that holds a GPU and has done nothing for a while.

A kernel is idle only when it is idle by every measure: the one stop decision,
`common/gpuactivity.idleness` (through `cost/activity.kernel_idleness`), which the waste
split, auto-stop and the hub's culler ask too. It runs no code (its execution state is
anything but "busy": a kernel started without a client stays "starting" indefinitely) *and*
no GPU it holds is busy: a busy GPU is never idle whatever the kernel's state, so a kernel
back at its prompt whose training loop runs in a thread or a child process (telemetry puts
the kernel's whole process tree on its GPUs) is not warned, culled or hibernated. Its idle
time runs from the later of its `last_activity` and the last sample that saw it at work
(`cost/activity.WorkClock`; the `cost.views.idle_seconds` the API and the metric report too):
work that ended a moment ago is not hours of idleness. A kernel holds a GPU when telemetry
puts one of its processes on it (`KernelSample.gpu_memory_bytes` has an entry for that GPU,
even where the driver cannot say how much memory).

A kernel whose GPUs are of *unknown* activity (a MIG instance reports no utilisation, so work
started in the background cannot be seen) is not judged: no alert and no cull, since its GPU
cost is not waste either (`cost/spend.py`). It is not called busy; the API says "unknown" for
it.

After `idle_kernel_seconds` the rule raises a warning naming the notebook, the GPUs, the
memory held and what the kernel has wasted since it went idle. The money is the sum of the
kernel's per-interval waste (`IntervalCost.shares[kernel].waste`, the same deltas the ledger
adds to the kernel's total) over the samples this rule saw it idle: if the server started
after the kernel went idle, it covers only the part the server saw (`idle_waste_since`).

Culling is opt-in (`cull_idle_kernels`). At `cull_after_seconds - cull_warning_seconds` of
idle time the alert turns critical ("will be shut down at HH:MM unless used"); the kernel is
shut down once it has been idle `cull_after_seconds` *and* that critical warning has been up
for at least `cull_warning_seconds` (a warning that came late, e.g. after a restart of the
server, postpones the cull instead of shortening the notice). The shutdown is requested once
per idle period. Any activity (busy, a busy GPU, or a new `last_activity`) starts a new idle
period: the alert resolves and a pending cull is cancelled. The turn to critical shows a
dismissed or snoozed warning again (an escalation). Dismissing or snoozing the alert does not
cancel a cull: using the kernel does.

Hibernating is on by default (`hibernate_idle_after_seconds`, 30 minutes; None: off), for a
notebook's kernel only (its snapshot is restored into that notebook's next kernel), and the
idle warning says when it will happen: once idle that long the rule asks for it
(`hibernate-kernel`; the server saves the variables, then shuts the kernel down) and hears how
it went (`heard`). Done, it raises a notice ("kernel-hibernated": what was freed and kept);
failed, the kernel keeps running, the alert says why at once, and the rule asks again only
after a back-off that doubles with each failure of that kernel (`HIBERNATE_RETRY_SECONDS`): a
save that failed once (too big, an unpicklable value) usually fails again. No cull while a
hibernation is under way. Every idle-GPU alert offers Hibernate as its first action.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jupyter_costguard.common.gpuactivity import GPU_BUSY_PERCENT, IDLE
from jupyter_costguard.cost.activity import WorkClock, kernel_idleness
from jupyter_costguard.guard.base import Act, Finding, GuardContext, Outcome, RuleResult
from jupyter_costguard.guard.config import GuardConfig
from jupyter_costguard.guard.wording import clock_time, duration, gib, money
from jupyter_costguard.sampling.records import KernelSample

#: States in which the kernel manager is busy with the kernel itself: no cull then.
_NO_CULL_STATES = frozenset({"restarting", "autorestarting", "terminating", "dead"})
#: How long after a failed save the kernel's activity is still the save's own (seconds).
_OWN_ACTIVITY = 10.0
#: The notice a done hibernation raises (one per snapshot, until dismissed).
HIBERNATED_KIND = "kernel-hibernated"
#: After a failed hibernation, the first wait before asking again (seconds); it doubles
#: with each further failure of the same kernel, up to the second number.
HIBERNATE_RETRY_SECONDS = (300.0, 3600.0)


def hibernate_retry_after(failures: int) -> float:
    """Seconds to wait after the `failures`-th failed hibernation of one kernel."""
    first, most = HIBERNATE_RETRY_SECONDS
    return float(min(most, first * 2 ** max(0, failures - 1)))


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def hibernate_label(gpus: int) -> str:
    """The alert's Hibernate button: "Hibernate: free 4 GPUs, keep your variables"."""
    what = _plural(gpus, "GPU") if gpus > 0 else "its GPUs"
    return f"Hibernate: free {what}, keep your variables"


@dataclass
class _IdlePeriod:
    """One stretch of idleness of one kernel (identified by when it began: the later of the
    kernel's `last_activity` and the last sample that saw one of its GPUs busy)."""

    start: float
    #: when this rule started counting the waste (the first sample that saw it idle)
    since: float
    waste: float = 0.0
    #: when the critical "will be shut down" warning was first raised
    warned_at: float | None = None
    #: when the shutdown was requested
    culled_at: float | None = None


@dataclass
class _Hibernation:
    """The hibernations asked for one kernel, kept for the kernel's life: a save runs in the
    kernel (busy, then a new `last_activity`), so it would start a new idle period itself."""

    #: when one was asked for and not yet heard of (or heard done: the kernel is going)
    asked_at: float | None = None
    #: failed ones, the last one's reason and time, and when to ask again
    failures: int = 0
    error: str | None = None
    failed_at: float | None = None
    retry_at: float | None = None

    def just_failed(self, last_activity: float) -> bool:
        """Whether the kernel has not been used since the last failure (its last activity is
        the failed save's own, which ends a moment after the answer): the alert says so at
        once rather than after `idle_kernel_seconds`."""
        return self.failed_at is not None and last_activity <= self.failed_at + _OWN_ACTIVITY


class IdleKernelRule:
    kind = "idle-gpu-kernel"

    def __init__(self, config: GuardConfig, gpu_busy_percent: float = GPU_BUSY_PERCENT) -> None:
        self.config = config
        self.gpu_busy_percent = gpu_busy_percent
        self._periods: dict[str, _IdlePeriod] = {}
        self._hibernations: dict[str, _Hibernation] = {}
        #: when each kernel was last at work (its idle clock starts after; as the API's)
        self._work = WorkClock(gpu_busy_percent)
        #: outcomes of hibernations, heard on the IO loop, read at the next evaluation
        self._heard: list[Outcome] = []
        self._heard_lock = threading.Lock()

    def heard(self, outcome: Outcome) -> None:
        """Thread-safe: how a hibernation this rule asked for went."""
        if outcome.act.action == "hibernate-kernel":
            with self._heard_lock:
                self._heard.append(outcome)

    def _take_heard(self, result: RuleResult) -> None:
        with self._heard_lock:
            heard, self._heard = self._heard, []
        for outcome in heard:
            h = self._hibernations.get(outcome.act.kernel_id or "")
            if outcome.error is None:  # stays "asked" until the kernel is gone
                result.notices.append(self._hibernated(outcome))
            elif h is not None and h.asked_at is not None:
                h.asked_at = None
                h.failures += 1
                h.error, h.failed_at = outcome.error, outcome.time
                h.retry_at = outcome.time + hibernate_retry_after(h.failures)

    def evaluate(self, ctx: GuardContext) -> RuleResult:
        result = RuleResult()
        self._take_heard(result)
        sample = ctx.published.sample
        if sample is None:
            return result
        cost = ctx.published.cost
        self._work.observe(sample)
        seen: set[str] = set()
        for k in sample.kernels:
            kid = k.info.kernel_id
            if not k.gpu_memory_bytes:
                continue  # holds no GPU: any idle period (and cull) is over
            if kernel_idleness(k, sample.gpu.gpus, self.gpu_busy_percent) != IDLE:
                # executing, or a GPU it holds works (a training thread or child process
                # while the kernel waits at its prompt): any idle period (and cull, and
                # hibernation) is over; of unknown activity it may be working: not judged
                continue
            seen.add(kid)
            start = self._idle_from(k)
            period = self._periods.get(kid)
            if period is None or period.start != start:
                period = self._periods[kid] = _IdlePeriod(
                    start=start, since=max(start, ctx.now - sample.interval))
            share = cost.shares.get(kid) if cost is not None else None
            if share is not None:
                period.waste += share.waste
            self._judge(ctx, k, period, result)
        for kid in set(self._periods) - seen:
            del self._periods[kid]
        present = {k.info.kernel_id for k in sample.kernels}
        for kid in set(self._hibernations) - present:
            del self._hibernations[kid]
        return result

    def _idle_from(self, k: KernelSample) -> float:
        """When this kernel's idleness by every measure began: its last activity, or the last
        sample that saw a GPU it holds busy, whichever is later."""
        return self._work.idle_from(k.info)

    def _judge(self, ctx: GuardContext, k: KernelSample, period: _IdlePeriod,
               result: RuleResult) -> None:
        cfg = self.config
        now = ctx.now
        start = period.start
        idle = max(0.0, now - start)
        cull = cfg.cull_idle_kernels
        warn_from = max(0.0, cfg.cull_after_seconds - cfg.cull_warning_seconds)
        cull_warning = cull and idle >= warn_from
        h = self._hibernations.setdefault(k.info.kernel_id, _Hibernation())
        hibernate_at = self._hibernate_at(k, h)
        hibernate_due = hibernate_at is not None and now >= hibernate_at
        if not (idle >= cfg.idle_kernel_seconds or cull_warning or hibernate_due
                or h.just_failed(k.info.last_activity)):
            return
        if (hibernate_due and h.asked_at is None
                and k.info.execution_state not in _NO_CULL_STATES):
            h.asked_at = now
            result.acts.append(Act(
                action="hibernate-kernel", kernel_id=k.info.kernel_id,
                reason=f"{self._who(k)} idle for {duration(idle)} holding "
                f"{self._gpus_text(ctx, k)} (c.Guard.hibernate_idle_after_seconds)"))
        if cull_warning and period.warned_at is None:
            period.warned_at = now  # raised as an alert by the engine this very tick
        cull_at: float | None = None
        if cull:
            cull_at = start + cfg.cull_after_seconds
            if period.warned_at is not None:
                cull_at = max(cull_at, period.warned_at + cfg.cull_warning_seconds)
            if (period.culled_at is None and period.warned_at is not None and now >= cull_at
                    and h.asked_at is None
                    and k.info.execution_state not in _NO_CULL_STATES):
                period.culled_at = now
                result.acts.append(Act(
                    action="shutdown-kernel", kernel_id=k.info.kernel_id,
                    reason=f"{self._who(k)} idle for {duration(idle)} holding "
                    f"{self._gpus_text(ctx, k)} (c.Guard.cull_idle_kernels; warned at "
                    f"{clock_time(period.warned_at)})"))
        result.findings.append(self._finding(ctx, k, period, idle, cull_at, cull_warning,
                                             h, hibernate_at))

    def _hibernate_at(self, k: KernelSample, h: _Hibernation) -> float | None:
        """When this kernel is (next) to be hibernated; None when it is not to be: the
        option is off, or the kernel belongs to no notebook."""
        after = self.config.hibernate_idle_after_seconds
        if after is None or not k.info.path:
            return None
        at = self._idle_from(k) + after
        if h.retry_at is not None:
            at = max(at, h.retry_at)
        return at

    # --- wording -----------------------------------------------------------------------

    @staticmethod
    def _who(k: KernelSample) -> str:
        if k.info.path:
            return k.info.path
        return f"kernel {k.info.kernel_id[:8]} ({k.info.name or 'no notebook'})"

    @staticmethod
    def _gpu_docs(ctx: GuardContext, k: KernelSample) -> list[dict[str, Any]]:
        sample = ctx.published.sample
        by_uuid = {g.uuid: g for g in sample.gpu.gpus} if sample is not None else {}
        docs = []
        for uuid, nbytes in sorted(k.gpu_memory_bytes.items()):
            g = by_uuid.get(uuid)
            docs.append({"uuid": uuid, "index": g.index if g else None,
                         "name": g.name if g else None, "memory_bytes": nbytes})
        docs.sort(key=lambda d: (d["index"] is None, d["index"] or 0, d["uuid"]))
        return docs

    def _gpus_text(self, ctx: GuardContext, k: KernelSample) -> str:
        parts = []
        for d in self._gpu_docs(ctx, k):
            where = f"GPU {d['index']}" if d["index"] is not None else d["uuid"]
            if d["name"]:
                where += f" ({d['name']})"
            parts.append(f"{gib(d['memory_bytes'])} on {where}" if d["memory_bytes"]
                         else where)
        return ", ".join(parts)

    @staticmethod
    def _hibernate_text(period: _IdlePeriod, h: _Hibernation,
                        hibernate_at: float | None) -> str:
        if hibernate_at is None or period.culled_at is not None:
            return ""
        if h.asked_at is not None:
            return " It is being hibernated (its variables saved, then its GPUs freed)."
        if h.error is not None:
            return (f" Hibernating it failed, so it keeps running: {h.error} (tried "
                    f"{_plural(h.failures, 'time')}; next try at {clock_time(hibernate_at)} "
                    "unless used).")
        return (f" It will be hibernated at {clock_time(hibernate_at)} unless used (its "
                "variables kept, its GPUs freed).")

    def _hibernated(self, outcome: Outcome) -> Finding:
        """The notice of a done hibernation: what it freed and kept, and where to restore."""
        doc: Mapping[str, Any] = outcome.result
        kid = outcome.act.kernel_id
        notebook = str(doc.get("notebook") or "") or None
        who = notebook or f"kernel {str(kid)[:8]}"
        saved = len(doc.get("saved") or [])
        skipped = [str(s.get("name")) for s in doc.get("skipped") or []
                   if isinstance(s, Mapping)]
        gpus = int(doc.get("gpus_freed") or 0)
        nbytes = int(doc.get("bytes") or 0)
        message = (f"Hibernated {who}: freed {_plural(gpus, 'GPU')}, kept "
                   f"{_plural(saved, 'variable')} ({gib(nbytes)})")
        if skipped:
            shown = ", ".join(skipped[:3]) + (f" and {len(skipped) - 3} more"
                                               if len(skipped) > 3 else "")
            message += f"; not saved: {shown}"
        message += (". Running a cell in the notebook brings the variables back first (or "
                    "Restore from its banner).")
        return Finding(
            kind=HIBERNATED_KIND, key=str(doc.get("id") or kid), severity="info",
            title=f"Hibernated idle GPU kernel: {who}", message=message, notebook=notebook,
            kernel_id=kid, actions=({"id": "open-panel", "label": "Open cost panel"},),
            details={"snapshot_id": doc.get("id"), "kernel_id": kid, "gpus_freed": gpus,
                     "saved": saved, "skipped": skipped, "bytes": nbytes,
                     "hibernated_at": outcome.time, "reason": outcome.act.reason})

    def _finding(self, ctx: GuardContext, k: KernelSample, period: _IdlePeriod, idle: float,
                 cull_at: float | None, cull_warning: bool, h: _Hibernation,
                 hibernate_at: float | None) -> Finding:
        cfg = self.config
        currency = ctx.published.pricing.currency
        who = self._who(k)
        partial = period.since > period.start + 1.0
        wasted = (f"it has wasted {money(period.waste, currency)} "
                  + ("since the server started watching it" if partial else "while idle"))
        message = (f"{who} has been idle for {duration(idle)} holding "
                   f"{self._gpus_text(ctx, k)}; {wasted}.")
        if period.culled_at is not None:
            severity = "critical"
            title = f"Shutting down idle GPU kernel: {who}"
            message += f" It is being shut down (idle GPU kernels are shut down after " \
                       f"{duration(cfg.cull_after_seconds)})."
        elif cull_warning and cull_at is not None:
            severity = "critical"
            title = f"Idle GPU kernel will be shut down: {who}"
            message += (f" It will be shut down at {clock_time(cull_at)} unless used "
                        f"(in {duration(cull_at - ctx.now)}).")
        else:
            severity = "warning"
            title = f"Idle GPU kernel: {who}"
            if cull_at is not None:
                message += f" It will be shut down at {clock_time(cull_at)} unless used."
            elif hibernate_at is None:
                # the words name the alert's own buttons, in their order
                message += (" Hibernate it to free the GPU and keep its variables, or shut it "
                            "down or restart it." if k.info.path else
                            " Shut it down or restart it to free the GPU.")
        message += self._hibernate_text(period, h, hibernate_at)
        gpus = self._gpu_docs(ctx, k)
        kernel_args = {"kernel_id": k.info.kernel_id}
        # only a notebook's kernel can be hibernated: its snapshot is restored into it
        hibernate = ({"id": "hibernate", "label": hibernate_label(len(gpus)),
                      "args": kernel_args},) if k.info.path else ()
        actions = (
            *hibernate,
            {"id": "shutdown-kernel", "label": "Shut down kernel", "args": kernel_args},
            {"id": "restart-kernel", "label": "Restart kernel", "args": kernel_args},
            {"id": "snooze", "label": "Snooze"},
        )
        details: dict[str, Any] = {
            "kernel_id": k.info.kernel_id,
            "kernel_name": k.info.name,
            "execution_state": k.info.execution_state,
            "connections": k.info.connections,
            "last_activity": k.info.last_activity,
            "idle_seconds": round(idle, 3),
            "idle_threshold_seconds": cfg.idle_kernel_seconds,
            "gpus": gpus,
            "gpu_memory_bytes": sum(d["memory_bytes"] for d in gpus),
            "idle_waste": round(period.waste, 6),
            "idle_waste_since": period.since,
            "idle_waste_source": "ledger interval waste of this kernel, summed over the "
                                 "samples that saw it idle",
            "currency": currency,
            "cull": {
                "enabled": cfg.cull_idle_kernels,
                "after_seconds": cfg.cull_after_seconds,
                "warning_seconds": cfg.cull_warning_seconds,
                "at": cull_at,
                "warned_at": period.warned_at,
                "requested_at": period.culled_at,
            },
            "hibernate": {
                "enabled": cfg.hibernate_idle_after_seconds is not None,
                "after_seconds": cfg.hibernate_idle_after_seconds,
                "at": hibernate_at,
                "asked_at": h.asked_at,
                "failures": h.failures,
                "error": h.error,
            },
        }
        return Finding(kind=self.kind, key=k.info.kernel_id, severity=severity, title=title,
                       message=message, notebook=k.info.path, kernel_id=k.info.kernel_id,
                       actions=actions, details=details)
