"""The SkyPilot backend's options (`c.CostGuard.skypilot_*`); defaults are `SkyPilotSettings`'."""

from __future__ import annotations

from traitlets import Bool, Dict, Float, HasTraits, List, Unicode

from jupyter_costguard.offload.backends.base import Backend
from jupyter_costguard.offload.backends.skypilot.task import SkyPilotSettings

_S = SkyPilotSettings()


class SkyPilotTraits(HasTraits):
    """Mixed into the server extension; `skypilot_backend()` is what the job service gets."""

    skypilot_enabled = Bool(
        False, config=True,
        help="Offer the SkyPilot backend (jobs with backend 'skypilot'): managed jobs on the "
        "cheapest (spot) GPU SkyPilot finds. Needs the skypilot extra (pip install "
        "'.[skypilot]' in a clone of jupyter-costguard) and a cloud enabled in SkyPilot "
        "(sky check).")
    skypilot_api_server_url = Unicode(
        None, allow_none=True, config=True,
        help="A team's SkyPilot API server (None: the local one, started when needed).")
    skypilot_accelerator = Unicode(_S.accelerator, config=True,
                                   help="Accelerator type for jobs that ask for GPUs (A100, "
                                   "H100, L4, ...).")
    skypilot_use_spot = Bool(_S.use_spot, config=True,
                             help="Spot (preemptible) capacity, recovered when preempted.")
    skypilot_infra = List(Unicode(), config=True,
                          help="Allowed places as SkyPilot infra (['aws', 'gcp/us-central1']); "
                          "empty: any cloud enabled in SkyPilot.")
    skypilot_max_price_per_hour = Float(
        None, allow_none=True, config=True,
        help="Refuse a job whose cheapest place costs more per hour than this (the "
        "optimizer's choice, checked before launch).")
    skypilot_storage_url = Unicode(
        None, allow_none=True, config=True,
        help="fsspec URL (s3://bucket/costguard) the server and the remote machines both "
        "reach: status, log, outputs, results and checkpoints. Without it only SkyPilot's "
        "state comes back.")
    skypilot_python = Unicode(_S.python, config=True,
                              help="Python on the remote machine with jupyter_costguard "
                              "installed.")
    skypilot_setup = Unicode(
        None, allow_none=True, config=True,
        help="The task's setup commands, e.g. installing jupyter-costguard with its s3 "
        "extra and torch on the remote machine (the package is on no index: from your "
        "clone's git URL or a wheel).")
    skypilot_resources = Dict(config=True,
                              help="More of SkyPilot's resources YAML (disk_size, image_id).")
    skypilot_env = Dict(config=True, help="More environment of the task.")
    skypilot_recovery_strategy = Unicode(
        None, allow_none=True, config=True,
        help="SkyPilot's job_recovery strategy (EAGER_NEXT_REGION, FAILOVER).")
    skypilot_query_interval = Float(5.0, config=True,
                                    help="Seconds between two reads of SkyPilot's job queue.")

    def skypilot_settings(self) -> SkyPilotSettings:
        return SkyPilotSettings(
            accelerator=self.skypilot_accelerator, use_spot=self.skypilot_use_spot,
            infra=tuple(self.skypilot_infra),
            max_price_per_hour=self.skypilot_max_price_per_hour,
            storage_url=self.skypilot_storage_url, python=self.skypilot_python,
            setup=self.skypilot_setup, extra_resources=dict(self.skypilot_resources),
            env={str(k): str(v) for k, v in self.skypilot_env.items()},
            recovery_strategy=self.skypilot_recovery_strategy)

    def skypilot_backend(self) -> Backend | None:
        """The backend when it is offered (`skypilot_enabled`)."""
        if not self.skypilot_enabled:
            return None
        # imported here: skypilot is an optional dependency
        from jupyter_costguard.offload.backends.skypilot.backend import SkyPilotBackend

        return SkyPilotBackend(self.skypilot_settings(),
                               api_server_url=self.skypilot_api_server_url,
                               query_interval=self.skypilot_query_interval)
