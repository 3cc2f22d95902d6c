"""Guard rule `auto-stop`: when nothing has run for a while, stop the server (or the instance).

Off unless `auto_stop_idle_seconds` is set. "Nothing has run" means the server was idle by
every measure for that long: the one stop decision (`common/gpuactivity.idleness`, which the
idle-kernel rule, the waste split and the hub's culler ask too) called the server's kernels,
jobs and GPUs together idle on every sample (a busy GPU is never idle, whatever the kernels'
states), and nothing else happened:

- no kernel busy (executing) and no kernel activity (the newest `last_activity` over the
  kernels: jupyter_server moves it on every IOPub message a kernel sends); a kernel starting
  or restarting counts as activity too (something the user just did);
- no kernel started or stopped;
- no batch job running (`ctx.running_jobs`);
- no GPU that may be doing work, whoever runs on it (a training script started from a
  terminal or outside Jupyter keeps the instance up): busy by the one rule
  (`common/gpuactivity.py`, at or above `gpu_busy_percent`), or of *unknown* activity while
  something holds it. A MIG instance reports no utilisation, so a process on one may be
  working: it is not called idle and keeps the instance up (never busy either: the alert
  says "activity unknown"). A device that stopped answering (`faulty`) counts for nothing;
- no terminal activity, when the app passes `server_activity` (input or output in a Jupyter
  terminal). The server's general `last_activity` is deliberately *not* used: every
  authenticated API request moves it, including the polls an open JupyterLab tab makes every
  few seconds (kernel and session lists, costguard's own status bar), so a forgotten tab
  would keep an idle GPU instance up forever, the very case auto-stop exists for.

The server starting counts as activity. Once idle that long, the rule announces a countdown
(a critical alert, key "server", refreshed every tick with the time left, "Cancel auto-stop"
= dismiss). When the countdown ends with no cancellation and no new activity it emits exactly
one act: "run-command" with `shutdown_command` when configured, else "stop-server"; after
that it never acts again in this process. Dismissing (or snoozing) the alert cancels: the
rule keeps the (hidden) alert until activity resumes, then resolves it and waits for a whole
new idle period. Activity during the countdown cancels it and resolves the alert.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from jupyter_costguard.common.gpuactivity import (
    BUSY,
    GPU_BUSY_PERCENT,
    IDLE,
    UNKNOWN,
    Activity,
    combined_activity,
    executing,
    idleness,
)
from jupyter_costguard.cost.activity import activity_of
from jupyter_costguard.guard.base import Act, Finding, GuardContext, RuleResult
from jupyter_costguard.guard.config import GuardConfig
from jupyter_costguard.guard.wording import duration
from jupyter_costguard.sampling.records import Sample

log = logging.getLogger("jupyter_costguard")

KEY = "server"
#: Kernel states that count as activity though the kernel executes nothing of the user's yet:
#: a start or restart is something the user just did (executing is `executing`'s to say).
LIFECYCLE_STATES = frozenset({"starting", "restarting"})
#: Alert states in which the user has cancelled the countdown.
CANCELLED_STATES = frozenset({"dismissed", "snoozed"})

_ACTIONS: tuple[dict[str, Any], ...] = (
    {"id": "dismiss", "label": "Cancel auto-stop"},
    {"id": "open-panel", "label": "Details"},
)


def terminal_activity(serverapp: Any) -> Callable[[], float | None]:
    """The newest Jupyter terminal activity (epoch seconds), read from the server's settings.

    Attribute reads only, safe from the sampler thread. Terminals update `last_activity` on
    every read from their pty (output, even with no browser attached), and the server setting
    `terminal_last_activity` on every websocket message."""

    def read() -> float | None:
        settings = getattr(getattr(serverapp, "web_app", None), "settings", None) or {}
        times: list[Any] = [settings.get("terminal_last_activity")]
        manager = settings.get("terminal_manager")
        terminals = getattr(manager, "terminals", None) or {}
        try:
            times.extend(getattr(t, "last_activity", None) for t in list(terminals.values()))
        except RuntimeError:  # changed while we looked (another thread); the next tick will do
            pass
        stamps = [t.timestamp() for t in times if isinstance(t, datetime)]
        return max(stamps) if stamps else None

    return read


class AutoStopRule:
    kind = "auto-stop"

    def __init__(self, config: GuardConfig,
                 server_activity: Callable[[], float | None] | None = None,
                 gpu_busy_percent: float = GPU_BUSY_PERCENT) -> None:
        self.config = config
        #: newest activity the server knows of beyond kernels (terminals), epoch seconds
        self.server_activity = server_activity
        self.gpu_busy_percent = gpu_busy_percent
        #: init -> (clearing ->) watching -> counting -> done | cancelled | watching
        self.phase = "init"
        self.last_activity: float | None = None
        self.last_reason = ""
        self._kernel_ids: frozenset[str] | None = None
        self._countdown_start = 0.0
        self._deadline = 0.0
        self._cancelled_idle = 0.0
        self._server_activity_broken = False

    @property
    def enabled(self) -> bool:
        idle = self.config.auto_stop_idle_seconds
        return idle is not None and idle > 0

    @property
    def _target(self) -> str:
        return "the instance" if self.config.shutdown_command else "this Jupyter server"

    def evaluate(self, ctx: GuardContext) -> RuleResult:
        sample = ctx.published.sample
        if sample is None:
            return RuleResult()
        if self.phase == "init":
            self.phase = "watching"
            if ctx.alert_state(self.kind, KEY) is not None:
                # Left open by an earlier run of the server (alerts persist). A restart is
                # activity, and a dismissal from then must not cancel this run's first
                # countdown: raise it once, so the engine holds it and resolves it next tick.
                log.info("costguard: auto-stop: clearing the countdown alert left by an "
                         "earlier run of the server")
                self.phase = "clearing"
                return RuleResult(findings=[self._restarted_finding()])
        if self.phase == "clearing":
            self.phase = "watching"
            return RuleResult()
        if self.phase == "done" or not self.enabled:
            return RuleResult()
        return self._step(ctx, sample)

    # --- the state machine ---------------------------------------------------------------

    def _step(self, ctx: GuardContext, sample: Sample) -> RuleResult:
        now = ctx.now
        last = self._observe(ctx, sample)
        idle_for = now - last
        idle_after = float(self.config.auto_stop_idle_seconds or 0.0)

        if self.phase == "cancelled":
            if last > self._countdown_start:
                log.info("costguard: auto-stop: re-armed by new activity (%s); it counts down "
                         "again after %s with nothing running", self.last_reason,
                         duration(idle_after))
                self.phase = "watching"
                return RuleResult()  # resolves the dismissed alert
            return RuleResult(findings=[self._cancelled_finding()])

        if self.phase == "counting":
            if last > self._countdown_start:
                log.warning("costguard: auto-stop: countdown cancelled by activity (%s)",
                            self.last_reason)
                self.phase = "watching"
                return RuleResult()  # resolves the countdown alert
            state = ctx.alert_state(self.kind, KEY)
            if state in CANCELLED_STATES:
                log.warning("costguard: auto-stop: cancelled by the user (alert %s); it re-arms "
                            "after new activity", state)
                self.phase = "cancelled"
                self._cancelled_idle = idle_for
                return RuleResult(findings=[self._cancelled_finding()])
            if now >= self._deadline:
                return self._act(idle_for)
            return RuleResult(findings=[self._countdown_finding(now, idle_for)])

        # watching
        if idle_for < idle_after:
            return RuleResult()
        countdown = max(0.0, self.config.auto_stop_countdown_seconds)
        self.phase = "counting"
        self._countdown_start = now
        self._deadline = now + countdown
        log.warning("costguard: auto-stop: nothing has run for %s (last: %s); stopping %s in "
                    "%s unless cancelled or something runs", duration(idle_for), self.last_reason,
                    self._target, duration(countdown, round_up=True))
        if now >= self._deadline:  # no countdown configured
            return self._act(idle_for)
        return RuleResult(findings=[self._countdown_finding(now, idle_for)])

    def _act(self, idle_for: float) -> RuleResult:
        self.phase = "done"  # never again in this process, whatever the act does
        reason = (f"auto-stop: nothing has run for {duration(idle_for)} "
                  f"(idle limit {duration(float(self.config.auto_stop_idle_seconds or 0))}, "
                  f"countdown {duration(self.config.auto_stop_countdown_seconds, round_up=True)})")
        if self.config.shutdown_command:
            act = Act("run-command", reason, command=tuple(self.config.shutdown_command))
            log.warning("costguard: auto-stop: countdown ended; running the shutdown command")
        else:
            act = Act("stop-server", reason)
            log.warning("costguard: auto-stop: countdown ended; stopping the Jupyter server")
        return RuleResult(acts=[act])

    def _observe(self, ctx: GuardContext, sample: Sample) -> float:
        """Fold this sample's signs of activity into `last_activity`; returns it."""
        now = ctx.now
        if self.last_activity is None:
            self.last_activity, self.last_reason = now, "the server started"
        seen: list[tuple[float, str]] = []
        ids = frozenset(k.info.kernel_id for k in sample.kernels)
        if self._kernel_ids is not None and ids != self._kernel_ids:
            started, stopped = len(ids - self._kernel_ids), len(self._kernel_ids - ids)
            seen.append((now, f"{started} kernel(s) started, {stopped} stopped"))
        self._kernel_ids = ids
        running: list[str] = []  # what executes now, by the one rule's measures
        for k in sample.kernels:
            state = k.info.execution_state
            if executing(state):
                running.append(f"kernel {k.info.kernel_id} {state}")
            elif state in LIFECYCLE_STATES:
                seen.append((now, f"kernel {k.info.kernel_id} {state}"))
            seen.append((k.info.last_activity, f"kernel {k.info.kernel_id} activity"))
        if ctx.running_jobs > 0:
            running.append(f"{ctx.running_jobs} batch job(s) running")
        working: list[str] = []  # GPUs that may be doing work, whoever runs on them
        activities: list[Activity] = []
        for g in sample.gpu.gpus:
            if g.faulty is not None:
                continue
            activity = activity_of(g, self.gpu_busy_percent)
            if activity == BUSY:
                working.append(f"GPU {g.index} at {g.utilization_percent:.0f}% utilisation")
            elif activity == UNKNOWN and g.processes:
                working.append(f"GPU {g.index} in use, its activity unknown (no "
                               "utilisation reported, e.g. MIG)")
            else:
                activity = IDLE  # nothing on it cannot be working, whatever it reports
            activities.append(activity)
        if idleness(bool(running), combined_activity(activities)) != IDLE:
            seen.extend((now, why) for why in running + working)
        server = self._server_activity()
        if server is not None:
            seen.append((server, "terminal activity"))
        for when, why in seen:
            when = min(when, now)  # a clock ahead of ours must not postpone auto-stop
            if when > self.last_activity:
                self.last_activity, self.last_reason = when, why
        return self.last_activity

    def _server_activity(self) -> float | None:
        if self.server_activity is None:
            return None
        try:
            return self.server_activity()
        except Exception:
            if not self._server_activity_broken:
                self._server_activity_broken = True
                log.warning("costguard: auto-stop: cannot read the server's terminal activity",
                            exc_info=True)
            return None

    # --- what the alert says -------------------------------------------------------------

    def _details(self, phase: str) -> dict[str, Any]:
        return {
            "phase": phase,
            "action": "run-command" if self.config.shutdown_command else "stop-server",
            "idle_seconds": self.config.auto_stop_idle_seconds,
            "countdown_seconds": self.config.auto_stop_countdown_seconds,
            "idle_since": self.last_activity,
            "last_activity": self.last_reason,
            "countdown_started": self._countdown_start or None,
            "deadline": self._deadline or None,
        }

    def _countdown_finding(self, now: float, idle_for: float) -> Finding:
        remaining = duration(self._deadline - now, round_up=True)
        idle = duration(idle_for)
        what = ("run the configured shutdown command" if self.config.shutdown_command
                else "stop this Jupyter server")
        return Finding(
            kind=self.kind, key=KEY, severity="critical",
            title=f"Stopping {self._target} in {remaining}: nothing has run for {idle}",
            message=(f"No kernel has been busy, no batch job has run and there has been no "
                     f"kernel or terminal activity for {idle}, so costguard will {what} in "
                     f"{remaining}. Unsaved work in open notebooks may be lost. Cancel "
                     f"auto-stop to keep it running; running anything also cancels it."),
            actions=_ACTIONS, details=self._details("countdown"))

    def _cancelled_finding(self) -> Finding:
        return Finding(
            kind=self.kind, key=KEY, severity="info",
            title="Auto-stop cancelled",
            message=(f"Auto-stop was cancelled after {duration(self._cancelled_idle)} with nothing "
                     f"running. It re-arms after new activity followed by another "
                     f"{duration(float(self.config.auto_stop_idle_seconds or 0))} with nothing "
                     "running."),
            actions=({"id": "open-panel", "label": "Details"},),
            details=self._details("cancelled"))

    def _restarted_finding(self) -> Finding:
        return Finding(
            kind=self.kind, key=KEY, severity="info", title="Auto-stop re-armed",
            message="The server restarted; an earlier auto-stop countdown no longer applies.",
            details={"phase": "restarted"})
