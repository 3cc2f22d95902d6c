"""One profile rule and one settings object for the hub service and the Hub's hooks: which
profile a spawn or a running server runs, whether it is a GPU one, its price, and what a
profile the site does not list gets (refused at spawn, counted fail-closed)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from tornado import web
from traitlets import TraitError

from jupyter_costguard.hub.meter import MeterConfigError, price_profiles
from jupyter_costguard.hub.settings import HubSettings
from jupyter_costguard.hub.siteprofiles import site_profiles
from jupyter_costguard.hub.spawn import check_budget, name_profile
from tests.test_hub_hardening import Spawner

TABLE = {"gpu": {"instance_type": "p4d.24xlarge"}, "cpu": {"instance_type": "m5.xlarge"},
         "small-gpu": {"hourly_rate": 1.5, "gpus": 1}, "flat": {"hourly_rate": 0.1}}


def site(**kw: Any) -> Any:
    return site_profiles(price_profiles(TABLE, currency="USD"), **kw)


def test_gpu_or_not_comes_from_the_price_table() -> None:
    s = site()
    assert s.of("gpu").gpus == 8 and s.of("gpu").gpu  # a p4d's 8 A100s
    assert not s.of("cpu").gpu  # an m5 has none
    assert s.of("small-gpu").gpus == 1
    assert not s.of("flat").gpu  # a plain rate that says no GPUs
    assert site(gpu_profiles={"flat"}).of("flat").gpu  # the older list adds it


def test_a_spawn_that_names_no_profile_runs_the_default() -> None:
    assert site().slug("") == "gpu" and site().of("").gpu  # the table's first
    assert site(default_profile="cpu").of(None).slug == "cpu"
    with_alias = site_profiles(price_profiles({**TABLE, "": TABLE["gpu"]}, currency="USD"))
    assert with_alias.slug("") == "" and with_alias.of("").gpu
    with pytest.raises(MeterConfigError, match="default_profile 'nope'"):
        site(default_profile="nope")


def test_a_profile_the_site_does_not_list_is_refused_and_counted_fail_closed() -> None:
    s = site()
    why = s.refusal("zzz")
    assert why is not None and "'zzz' is not one this hub offers" in why and "'gpu'" in why
    assert s.refusal("gpu") is None and s.refusal("") is None
    unlisted = s.of("zzz")
    assert not unlisted.listed and unlisted.gpu
    gpu, cpu = s.of("gpu").price, s.of("cpu").price
    assert gpu is not None and cpu is not None and unlisted.price is not None
    assert unlisted.price.rate_per_hour == gpu.rate_per_hour  # the dearest listed
    assert "not a profile this site lists" in unlisted.price.detail
    # culling policies judge it as the profile it is counted at; a listed one as itself
    assert unlisted.policy_slug == "gpu" and s.of("cpu").policy_slug == "cpu"
    assert s.rates(["zzz", "cpu"]) == {"zzz": gpu.rate_per_hour, "cpu": cpu.rate_per_hour}


def test_a_site_without_a_price_table_keeps_the_older_rule() -> None:
    s = site_profiles({}, gpu_profiles={"gpu"})
    assert s.of("gpu").gpu and not s.of("cpu").gpu and s.of("cpu").listed
    assert s.refusal("anything") is None
    assert not s.of("").gpu  # no default named: not a GPU profile


def test_gpu_profiles_may_not_contradict_the_table() -> None:
    with pytest.raises(MeterConfigError, match="holds no GPUs"):
        site(gpu_profiles={"cpu"})


def test_the_hooks_and_the_service_read_one_settings_object(tmp_path: Path) -> None:
    config = tmp_path / "costguard_hub_config.py"
    config.write_text("c = get_config()\nc.CostGuardHub.currency = 'eur'\n"
                      "c.CostGuardHub.profile_prices = {'gpu': {'hourly_rate': 2, 'gpus': 1}}\n")
    from jupyter_costguard.hub.app import CostGuardHub
    hook = HubSettings.load(config)
    service = CostGuardHub()
    service.load_config_file(str(config))
    for name in HubSettings.class_trait_names(config=True):
        assert getattr(hook, name) == getattr(service, name), name
    assert hook.currency == "EUR" and hook.cull_keeps_per_day == 3
    config.write_text("c = get_config()\nc.CostGuardHub.currency = 'dollars'\n")
    with pytest.raises(TraitError, match="ISO 4217"):
        HubSettings.load(config)
    config.write_text("c = get_config()\nc.CostGuardHub.budget_stop = 'sometimes'\n")
    with pytest.raises(TraitError):
        HubSettings.load(config)


def settings(tmp_path: Path, **more: Any) -> HubSettings:
    return HubSettings.of({"db_path": str(tmp_path / "none.sqlite"),
                           "profile_prices": TABLE, **more})


@pytest.mark.parametrize("options", [{"profile": "zzz"}, {"profile": "GPU"},
                                     {"profile": "gpu\n"}])
def test_the_spawn_hook_refuses_a_profile_the_site_does_not_list(
        tmp_path: Path, options: dict[str, Any]) -> None:
    with pytest.raises(web.HTTPError) as e:
        asyncio.run(check_budget(Spawner(user_options=options), settings(tmp_path)))
    assert e.value.status_code == 403
    assert "is not one this hub offers" in e.value.log_message


def test_a_spawn_with_no_profile_is_checked_and_recorded_as_the_default(tmp_path: Path) -> None:
    s = settings(tmp_path, default_user_budget=1.0)
    spawner = Spawner(user_options={})
    # the default (gpu) is a GPU profile: with an unreadable database it is refused (503),
    # as a named GPU spawn is; a CPU spawn is not
    with pytest.raises(web.HTTPError) as e:
        asyncio.run(check_budget(spawner, s))
    assert e.value.status_code == 503
    assert asyncio.run(check_budget(Spawner(user_options={"profile": "cpu"}), s)) == []
    assert asyncio.run(name_profile(spawner, s.site)) == "gpu"
    assert spawner.user_options == {"profile": "gpu"}
