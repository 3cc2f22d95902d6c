"""The guard's settings (`c.Guard.<name>`): one Configurable, each setting's type, default,
bounds and help written once, on its trait. The rules are given that object (`GuardConfig` is
its name where they read it; tests build one with keyword arguments)."""

from __future__ import annotations

from typing import Any, ClassVar

from traitlets import Bool, Enum, Float, Int, List, Unicode
from traitlets.config import Configurable


class Guard(Configurable):
    """The guard's options: created by the server extension with it as parent."""

    #: the old names (`c.CostGuard.<old>`), which still work for a release
    moved_from_costguard: ClassVar[dict[str, str]] = {
        "auto_stop_countdown_seconds": "auto_stop_countdown_seconds",
        "auto_stop_idle_seconds": "auto_stop_idle_seconds",
        "budget_enforce": "budget_enforce",
        "budget_warn_fraction": "budget_warn_fraction",
        "cull_after_seconds": "cull_after_seconds",
        "cull_idle_kernels": "cull_idle_kernels",
        "cull_warning_seconds": "cull_warning_seconds",
        "guard_enabled": "enabled",
        "hibernate_idle_after_seconds": "hibernate_idle_after_seconds",
        "idle_kernel_seconds": "idle_kernel_seconds",
        "interactive_max_utilization_percent": "interactive_max_utilization_percent",
        "interactive_min_coverage": "interactive_min_coverage",
        "interactive_window_seconds": "interactive_window_seconds",
        "notebook_budget": "notebook_budget",
        "server_budget": "server_budget",
        "server_budget_period": "server_budget_period",
        "shutdown_command": "shutdown_command",
        "starved_max_utilization_percent": "starved_max_utilization_percent",
        "starved_min_busy_seconds": "starved_min_busy_seconds",
        "starved_min_busy_share": "starved_min_busy_share",
        "starved_window_seconds": "starved_window_seconds",
        "suggest_same_provider": "suggest_same_provider",
        "training_min_gpu_memory_gib": "training_min_gpu_memory_gib",
        "training_min_gpus": "training_min_gpus",
        "training_min_rate_per_hour": "training_min_rate_per_hour",
    }

    enabled = Bool(True, config=True, help="Run the guard's rules after each sample.")
    training_min_gpus = Int(4, min=0, config=True,
                            help="An instance with at least this many GPUs is training-sized.")
    training_min_gpu_memory_gib = Float(40.0, min=0.0, config=True,
        help="An instance with a GPU this large (GiB) is training-sized.")
    training_min_rate_per_hour = Float(10.0, min=0.0, allow_none=True, config=True,
        help="An instance at least this expensive per hour is training-sized (None: off).")
    interactive_window_seconds = Float(1800.0, min=0.0, config=True,
        help="Window over which interactive use is judged (seconds).")
    interactive_max_utilization_percent = Float(20.0, min=0.0, max=100.0, config=True,
        help="GPUs averaging below this over the window are idle.")
    interactive_min_coverage = Float(0.5, min=0.0, max=1.0, config=True,
        help="Judge interactive use once this share of the window is sampled.")
    suggest_same_provider = Bool(True, config=True,
        help="Suggest cheaper instances of the same provider only.")
    starved_min_busy_seconds = Float(120.0, min=0.0, config=True,
        help="A kernel must be busy this long before it can be starved.")
    starved_min_busy_share = Float(0.5, min=0.0, max=1.0, config=True,
        help="Share of busy time the GPU must wait to call it starved.")
    idle_kernel_seconds = Float(900.0, min=0.0, config=True,
        help="A kernel holding GPU memory idle this long raises an alert.")
    cull_idle_kernels = Bool(False, config=True,
        help="Shut idle GPU kernels down (after a warning). Opt-in.")
    cull_after_seconds = Float(3600.0, min=0.0, config=True,
        help="Idle time after which an idle GPU kernel is shut down.")
    cull_warning_seconds = Float(600.0, min=0.0, config=True,
        help="How long before a cull the warning comes (seconds).")
    hibernate_idle_after_seconds = Float(
        1800.0, min=0.0, allow_none=True, config=True,
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
    notebook_budget = Float(None, min=0.0, allow_none=True, config=True,
        help="Budget per notebook (currency units); a notebook's metadata "
        "costguard.budget overrides it.")
    server_budget = Float(None, min=0.0, allow_none=True, config=True,
                          help="Budget for the whole server (currency units), per "
                          "server_budget_period.")
    server_budget_period = Enum(["month", "week", "day", "none"],
                                'month', config=True,
                                help="The server budget's period: calendar month, ISO week "
                                "or day (UTC), or none (since the ledger began).")
    budget_warn_fraction = Float(0.8, min=0.0, max=1.0, config=True,
                                 help="Warn when this fraction of a budget is spent.")
    budget_enforce = Bool(False, config=True,
        help="At 100% of a budget, interrupt the notebook's kernels and refuse offloads.")
    auto_stop_idle_seconds = Float(None, min=0.0, allow_none=True, config=True,
        help="Stop after this long with nothing running and no activity (None: off).")
    auto_stop_countdown_seconds = Float(300.0, min=0.0, config=True,
        help="Countdown announced before auto-stop (cancellable).")
    shutdown_command = List(
        Unicode(), config=True,
        help="Command (argv) auto-stop runs, e.g. ['sudo', 'shutdown', '-h', 'now']; "
        "empty: stop the Jupyter server.")
    starved_window_seconds = Float(600.0, min=0.0, config=True,
                                   help="Window over which a starved GPU is judged.")
    starved_max_utilization_percent = Float(30.0, min=0.0, max=100.0, config=True,
        help="A busy kernel's GPU below this is waiting on data.")


    def replaced(self, **changes: Any) -> Guard:
        """A copy with `changes` (a setting for one test or one run of the bench)."""
        values = {n: getattr(self, n) for n in self.trait_names(config=True)}
        return Guard(**{**values, **changes})


#: what the rules are given: the one settings object
GuardConfig = Guard
