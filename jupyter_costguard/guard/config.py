"""The guard's settings: plain data for the rules, and the traits that set it (c.CostGuard.…).

Each default is written once, on `GuardConfig`; the traits take theirs from it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from traitlets import Bool, Enum, Float, HasTraits, Int, List, Unicode


@dataclass(frozen=True)
class GuardConfig:
    # --- training-sized instance used interactively ------------------------------------
    #: an instance is training-sized with at least this many GPUs, ...
    training_min_gpus: int = 4
    #: ... or a GPU with at least this much memory (GiB), ...
    training_min_gpu_memory_gib: float = 40.0
    #: ... or a rate of at least this much per hour (None: no rate rule)
    training_min_rate_per_hour: float | None = 10.0
    #: the sliding window over which interactive use is judged (seconds)
    interactive_window_seconds: float = 1800.0
    #: GPUs averaging below this utilisation over the window are "idle"
    interactive_max_utilization_percent: float = 20.0
    #: the rule speaks only once the window is at least this full (fraction of it sampled)
    interactive_min_coverage: float = 0.5
    #: suggest cheaper instances of the same provider only
    suggest_same_provider: bool = True

    # --- idle GPU kernels -------------------------------------------------------------
    idle_kernel_seconds: float = 900.0
    #: opt-in: shut idle GPU kernels down after a grace period, warning first
    cull_idle_kernels: bool = False
    cull_after_seconds: float = 3600.0
    cull_warning_seconds: float = 600.0
    #: hibernate (save the variables, then shut down) a notebook's idle GPU kernel after this
    #: long idle, warned from `idle_kernel_seconds` on (None: off); on by default, since a
    #: hibernated notebook's next kernel starts with its variables (resume on use)
    hibernate_idle_after_seconds: float | None = 1800.0

    # --- budgets ----------------------------------------------------------------------
    notebook_budget: float | None = None
    server_budget: float | None = None
    #: the server budget is per calendar month (UTC), ISO week or day; "none": since the
    #: ledger began
    server_budget_period: str = "month"
    budget_warn_fraction: float = 0.8
    #: at 100%: interrupt the notebook's kernels and refuse new offloads
    budget_enforce: bool = False

    # --- auto-stop ---------------------------------------------------------------------
    #: stop after this long with no busy kernel, no running job and no activity (None: off)
    auto_stop_idle_seconds: float | None = None
    auto_stop_countdown_seconds: float = 300.0
    #: run this (argv) when the countdown ends; empty: stop the Jupyter server instead
    shutdown_command: tuple[str, ...] = ()

    # --- starved GPU ------------------------------------------------------------------
    starved_window_seconds: float = 600.0
    #: a busy kernel whose GPUs stay below this utilisation is waiting on data
    starved_max_utilization_percent: float = 30.0
    #: ... for at least this share of its busy time in the window
    starved_min_busy_share: float = 0.5
    starved_min_busy_seconds: float = 120.0


_D = GuardConfig()


class GuardTraits(HasTraits):
    """The guard's options, mixed into the server extension (`c.CostGuard.<name>`)."""

    guard_enabled = Bool(True, config=True, help="Run the guard's rules after each sample.")
    training_min_gpus = Int(_D.training_min_gpus, config=True,
                            help="An instance with at least this many GPUs is training-sized.")
    training_min_gpu_memory_gib = Float(_D.training_min_gpu_memory_gib, config=True,
        help="An instance with a GPU this large (GiB) is training-sized.")
    training_min_rate_per_hour = Float(_D.training_min_rate_per_hour, allow_none=True, config=True,
        help="An instance at least this expensive per hour is training-sized (None: off).")
    interactive_window_seconds = Float(_D.interactive_window_seconds, config=True,
        help="Window over which interactive use is judged (seconds).")
    interactive_max_utilization_percent = Float(_D.interactive_max_utilization_percent, config=True,
        help="GPUs averaging below this over the window are idle.")
    interactive_min_coverage = Float(_D.interactive_min_coverage, config=True,
        help="Judge interactive use once this share of the window is sampled.")
    suggest_same_provider = Bool(_D.suggest_same_provider, config=True,
        help="Suggest cheaper instances of the same provider only.")
    starved_min_busy_seconds = Float(_D.starved_min_busy_seconds, config=True,
        help="A kernel must be busy this long before it can be starved.")
    starved_min_busy_share = Float(_D.starved_min_busy_share, config=True,
        help="Share of busy time the GPU must wait to call it starved.")
    idle_kernel_seconds = Float(_D.idle_kernel_seconds, config=True,
        help="A kernel holding GPU memory idle this long raises an alert.")
    cull_idle_kernels = Bool(_D.cull_idle_kernels, config=True,
        help="Shut idle GPU kernels down (after a warning). Opt-in.")
    cull_after_seconds = Float(_D.cull_after_seconds, config=True,
        help="Idle time after which an idle GPU kernel is shut down.")
    cull_warning_seconds = Float(_D.cull_warning_seconds, config=True,
        help="How long before a cull the warning comes (seconds).")
    hibernate_idle_after_seconds = Float(
        _D.hibernate_idle_after_seconds, allow_none=True, config=True,
        help="Hibernate a notebook's kernel that holds GPUs once the idle-GPU rule has found "
        "it idle this long (seconds): its variables are saved, then it is shut down and its "
        "GPUs freed; the notebook's next kernel starts with them (resume on use), and its "
        "banner offers them too. The idle-GPU alert (from idle_kernel_seconds) says when it "
        "will happen unless the kernel is used. A kernel whose variables cannot be saved "
        "keeps running (the alert says why; tried again later, less and less often). "
        "Kernels on GPUs that report no utilisation (MIG) are never hibernated by this. "
        "Default 1800 (30 minutes); None: off. Independent of cull_idle_kernels (set it "
        "below cull_after_seconds so that the cull only stops kernels that could not be "
        "saved).")
    notebook_budget = Float(_D.notebook_budget, allow_none=True, config=True,
        help="Budget per notebook (currency units); a notebook's metadata "
        "costguard.budget overrides it.")
    server_budget = Float(_D.server_budget, allow_none=True, config=True,
                          help="Budget for the whole server (currency units), per "
                          "server_budget_period.")
    server_budget_period = Enum(["month", "week", "day", "none"],
                                _D.server_budget_period, config=True,
                                help="The server budget's period: calendar month, ISO week "
                                "or day (UTC), or none (since the ledger began).")
    budget_warn_fraction = Float(_D.budget_warn_fraction, config=True,
                                 help="Warn when this fraction of a budget is spent.")
    budget_enforce = Bool(_D.budget_enforce, config=True,
        help="At 100% of a budget, interrupt the notebook's kernels and refuse offloads.")
    auto_stop_idle_seconds = Float(_D.auto_stop_idle_seconds, allow_none=True, config=True,
        help="Stop after this long with nothing running and no activity (None: off).")
    auto_stop_countdown_seconds = Float(_D.auto_stop_countdown_seconds, config=True,
        help="Countdown announced before auto-stop (cancellable).")
    shutdown_command = List(
        Unicode(), config=True,
        help="Command (argv) auto-stop runs, e.g. ['sudo', 'shutdown', '-h', 'now']; "
        "empty: stop the Jupyter server.")
    starved_window_seconds = Float(_D.starved_window_seconds, config=True,
                                   help="Window over which a starved GPU is judged.")
    starved_max_utilization_percent = Float(_D.starved_max_utilization_percent, config=True,
        help="A busy kernel's GPU below this is waiting on data.")

    def guard_config(self) -> GuardConfig:
        names = {f.name for f in dataclasses.fields(GuardConfig)}
        values = {n: getattr(self, n) for n in names}
        values["shutdown_command"] = tuple(self.shutdown_command)
        return GuardConfig(**values)
