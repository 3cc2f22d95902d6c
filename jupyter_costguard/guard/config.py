"""The guard's settings, as plain data (traitlets stay at the configuration edge, app.py)."""

from __future__ import annotations

from dataclasses import dataclass


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

    # --- budgets ----------------------------------------------------------------------
    notebook_budget: float | None = None
    server_budget: float | None = None
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
