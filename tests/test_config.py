"""Every guard setting is reachable as c.CostGuard.<name>, with the same default."""

from __future__ import annotations

import dataclasses

from traitlets.config import Config

from jupyter_costguard.app import CostGuard
from jupyter_costguard.guard import GuardConfig


def test_every_guard_field_is_a_configurable_trait_with_the_same_default():
    app = CostGuard()
    defaults = GuardConfig()
    for f in dataclasses.fields(GuardConfig):
        assert app.has_trait(f.name), f"c.CostGuard.{f.name} is missing"
        assert getattr(app.guard_config(), f.name) == getattr(defaults, f.name), f.name


def test_configured_values_reach_the_guard():
    c = Config()
    c.CostGuard.idle_kernel_seconds = 42.0
    c.CostGuard.shutdown_command = ["true", "x"]
    c.CostGuard.starved_min_busy_share = 0.25
    config = CostGuard(config=c).guard_config()
    assert config.idle_kernel_seconds == 42.0
    assert config.shutdown_command == ("true", "x")
    assert config.starved_min_busy_share == 0.25
