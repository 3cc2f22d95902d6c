"""The SkyPilot backend's options (`c.SkyPilotBackend.<name>`); defaults are `SkyPilotSettings`'."""

from __future__ import annotations

from typing import ClassVar

from traitlets import Bool, Dict, Float, List, Unicode
from traitlets.config import Configurable

from jupyter_costguard.offload.backends.base import Backend
from jupyter_costguard.offload.backends.skypilot.task import SkyPilotSettings

_S = SkyPilotSettings()


class SkyPilotBackend(Configurable):
    """Created by the server extension (parent=); `backend()` is what the job service gets."""

    #: the old names (`c.CostGuard.<old>`), which still work for a release
    moved_from_costguard: ClassVar[dict[str, str]] = {
        "skypilot_enabled": "enabled",
        "skypilot_api_server_url": "api_server_url",
        "skypilot_accelerator": "accelerator",
        "skypilot_use_spot": "use_spot",
        "skypilot_infra": "infra",
        "skypilot_max_price_per_hour": "max_price_per_hour",
        "skypilot_storage_url": "storage_url",
        "skypilot_python": "python",
        "skypilot_setup": "setup",
        "skypilot_resources": "resources",
        "skypilot_env": "env",
        "skypilot_recovery_strategy": "recovery_strategy",
        "skypilot_query_interval": "query_interval",
    }

    enabled = Bool(
        False, config=True,
        help="Offer the SkyPilot backend (jobs with backend 'skypilot'): managed jobs on the "
        "cheapest (spot) GPU SkyPilot finds. Needs the skypilot extra (pip install "
        "'.[skypilot]' in a clone of jupyter-costguard) and a cloud enabled in SkyPilot "
        "(sky check).")
    api_server_url = Unicode(
        None, allow_none=True, config=True,
        help="A team's SkyPilot API server (None: the local one, started when needed).")
    accelerator = Unicode(_S.accelerator, config=True,
                                   help="Accelerator type for jobs that ask for GPUs (A100, "
                                   "H100, L4, ...).")
    use_spot = Bool(_S.use_spot, config=True,
                             help="Spot (preemptible) capacity, recovered when preempted.")
    infra = List(Unicode(), config=True,
                          help="Allowed places as SkyPilot infra (['aws', 'gcp/us-central1']); "
                          "empty: any cloud enabled in SkyPilot.")
    max_price_per_hour = Float(
        None, allow_none=True, config=True,
        help="Refuse a job whose cheapest place costs more per hour than this (the "
        "optimizer's choice, checked before launch).")
    storage_url = Unicode(
        None, allow_none=True, config=True,
        help="fsspec URL (s3://bucket/costguard) the server and the remote machines both "
        "reach: status, log, outputs, results and checkpoints. Without it only SkyPilot's "
        "state comes back.")
    python = Unicode(_S.python, config=True,
                              help="Python on the remote machine with jupyter_costguard "
                              "installed.")
    setup = Unicode(
        None, allow_none=True, config=True,
        help="The task's setup commands, e.g. installing jupyter-costguard with its s3 "
        "extra and torch on the remote machine (the package is on no index: from your "
        "clone's git URL or a wheel).")
    resources = Dict(config=True,
                              help="More of SkyPilot's resources YAML (disk_size, image_id).")
    env = Dict(config=True, help="More environment of the task.")
    recovery_strategy = Unicode(
        None, allow_none=True, config=True,
        help="SkyPilot's job_recovery strategy (EAGER_NEXT_REGION, FAILOVER).")
    query_interval = Float(5.0, config=True,
                                    help="Seconds between two reads of SkyPilot's job queue.")

    def settings(self) -> SkyPilotSettings:
        return SkyPilotSettings(
            accelerator=self.accelerator, use_spot=self.use_spot,
            infra=tuple(self.infra),
            max_price_per_hour=self.max_price_per_hour,
            storage_url=self.storage_url, python=self.python,
            setup=self.setup, extra_resources=dict(self.resources),
            env={str(k): str(v) for k, v in self.env.items()},
            recovery_strategy=self.recovery_strategy)

    def backend(self) -> Backend | None:
        """The backend when it is offered (`enabled`)."""
        if not self.enabled:
            return None
        # imported here: skypilot is an optional dependency
        from jupyter_costguard.offload.backends.skypilot.backend import SkyPilotExecutor

        return SkyPilotExecutor(self.settings(),
                               api_server_url=self.api_server_url,
                               query_interval=self.query_interval)
