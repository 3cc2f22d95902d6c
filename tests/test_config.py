"""Every guard setting is one trait of `c.Guard`, which the rules are given; the old
`c.CostGuard.<name>` reaches it too (with a warning, `test_config_moved.py`)."""

from __future__ import annotations

import pytest
from traitlets import TraitError
from traitlets.config import Config

from jupyter_costguard.app import CostGuard
from jupyter_costguard.guard import GuardConfig
from jupyter_costguard.guard.config import Guard


def test_the_rules_read_the_one_configurable_and_each_setting_is_written_once():
    assert GuardConfig is Guard
    names = Guard.class_trait_names(config=True)
    assert len(names) >= 25
    # no second home of the fields: CostGuard holds none of them
    assert set(names) & set(CostGuard.class_trait_names(config=True)) == {"enabled"}  # its own


def test_configured_values_reach_the_guard():
    c = Config()
    c.Guard.idle_kernel_seconds = 42.0
    c.Guard.shutdown_command = ["true", "x"]
    c.CostGuard.starved_min_busy_share = 0.25  # the old name, still read
    config = Guard(parent=CostGuard(config=c))
    assert config.idle_kernel_seconds == 42.0
    assert tuple(config.shutdown_command) == ("true", "x")
    assert config.starved_min_busy_share == 0.25
    assert config.replaced(idle_kernel_seconds=1.0).idle_kernel_seconds == 1.0
    assert config.idle_kernel_seconds == 42.0


@pytest.mark.parametrize("name, value, says", [
    ("idle_kernel_seconds", -1.0, "less than 0"),
    ("hibernate_idle_after_seconds", -60.0, "less than 0"),
    ("interactive_max_utilization_percent", 150.0, "greater than 100"),
    ("budget_warn_fraction", 1.5, "greater than 1"),
    ("training_min_gpus", -2, "less than 0"),
])
def test_a_setting_out_of_its_bounds_is_refused_naming_it(name: str, value: float,
                                                          says: str) -> None:
    """Bounds live in the one trait: a negative idle time or a percentage over 100 is an
    admin's typo, refused at start with the option's name, never a guard that acts at once."""
    c = Config()
    setattr(c.Guard, name, value)
    with pytest.raises(TraitError, match=f"{name}.*{says}"):
        Guard(parent=CostGuard(config=c))
    assert getattr(Guard(), name) is None or getattr(Guard(), name) >= 0  # defaults in bounds
