"""The hub service's settings (`c.CostGuardHub.<name>` in its config file): one object, with
its defaults and checks, that the service and the Hub's hooks (spawn, idle culler) all build
from the same file, so a default changed here changes for every process at once.

    settings = HubSettings.load("/srv/costguard/costguard_hub_config.py")

`CostGuardHub`, the service's application, is these settings; the hooks build them alone
(`load`), from the file's `c.CostGuardHub` section. The catalog options are the server's own
(cost/catalogtraits.py).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Any

from traitlets import Bool, Dict, Enum, Float, Integer, List, Set, Unicode
from traitlets.config import Config, Configurable, PyFileConfigLoader

from jupyter_costguard.common.gpuactivity import GPU_BUSY_PERCENT
from jupyter_costguard.common.hubprotocol import CLOCK_SKEW_SECONDS
from jupyter_costguard.common.periods import PERIODS
from jupyter_costguard.cost.catalogtraits import CatalogTraits
from jupyter_costguard.hub.budgethold import MODES as BUDGET_STOP_MODES
from jupyter_costguard.hub.budgets import Budgets
from jupyter_costguard.hub.meter import ProfilePrice, price_profiles
from jupyter_costguard.hub.siteprofiles import SiteProfiles, site_profiles
from jupyter_costguard.hub.store import COUNTS
from jupyter_costguard.hub.storerows import fresh_window

#: the config file's section
SECTION = "CostGuardHub"


class HubSettings(CatalogTraits, Configurable):
    """Every c.CostGuardHub option but the service's own listen address."""

    db_path = Unicode("costguard_hub.sqlite", config=True,
                      help="The service's SQLite: per-server epochs, hourly spend, events.")
    poll_interval = Float(30.0, config=True,
                          help="Seconds between looks at the Hub's list of running servers "
                               "(stale marks and culling decisions follow each).")
    report_interval = Float(30.0, config=True,
                            help="Seconds between a server's reports (told to every server "
                                 "in each answer); a server silent for two is stale.")
    fresh_seconds = Float(None, allow_none=True, config=True,
                          help="How old a server's accepted report, or the node's reading of "
                               "its pod, may be and still decide culling (older: the culler "
                               "defers) and stand for its GPU figures on the pages. The "
                               "service's culler and the idle culler's arbiter hook read this "
                               "one window. Default: two of the longer of poll_interval and "
                               "report_interval, and 10 s (70 s at the defaults).")
    hub_timeout = Float(10.0, config=True, help="Seconds the Hub's API may take to answer.")
    max_rate_per_hour = Float(1000.0, config=True,
                              help="The most one server may cost per hour on this site: a "
                                   "report claiming more, or more spend than this rate for "
                                   "as long as the server ran, is refused.")
    clock_skew_seconds = Float(CLOCK_SKEW_SECONDS, config=True,
                               help="How far a server's clock may be from the service's.")
    member_group_view = Enum(["remaining", "full", "none"], "remaining", config=True,
                             help="What a member sees of a group budget (api/me, JupyterLab): "
                                  "its remaining amount only, the group's whole figures, or "
                                  "nothing. Admins always see everything.")
    budget_check_on_error = Enum(["refuse", "allow"], "refuse", config=True,
                                 help="The spawn hook, when it cannot read the service's "
                                      "database: refuse a budgeted GPU spawn (with the "
                                      "reason), or allow it with a warning in the Hub's log.")
    trusted_proxies = List(Unicode(), config=True,
                           help="Addresses of the proxies in front of the service whose "
                                "X-Forwarded-For / X-Real-Ip headers are believed. Empty: "
                                "no forwarded header is believed.")
    page_max_age_seconds = Float(None, allow_none=True, config=True,
                                 help="How old the figures a page or export is answered with "
                                      "may be (default: poll_interval): it is answered from "
                                      "the last computation while a fresh one runs in the "
                                      "background, so opening a page costs next to nothing "
                                      "at any scale. 0: computed afresh whenever a report "
                                      "changed something.")
    token_cache_seconds = Integer(300, config=True,
                                  help="How long the Hub's answer about a token is kept (each "
                                       "server's token is checked once per this period).")
    admin_users = Set(Unicode(), config=True,
                      help="Users who see everyone's figures (besides holders of the "
                           "custom:costguard:admin scope).")
    admin_groups = Set(Unicode(), config=True, help="Groups whose members see everything.")
    budget_period = Enum(list(PERIODS), "month", config=True,
                         help="Budgets are per calendar month (UTC), ISO week or day.")
    user_budgets = Dict(config=True, help="user name -> budget.")
    group_budgets = Dict(config=True, help="group name -> budget for all its members.")
    default_user_budget = Float(None, allow_none=True, config=True,
                                help="Budget of a user with no entry in user_budgets.")
    gpu_profiles = Set(Unicode(), config=True,
                       help="Older: spawner profiles that run on GPUs. A GPU profile is one "
                            "whose profile_prices entry holds GPUs; this adds only profiles "
                            "whose entry does not say (a plain hourly_rate), or names the "
                            "GPU profiles of a site without profile_prices.")
    default_profile = Unicode("", config=True,
                              help="The profile a spawn that names none runs (a spawn through "
                                   "the REST API, a form left at its default) for every "
                                   "decision: budgets, the meter, culling. Empty: the "
                                   "profile_prices entry \"\", else its first profile. "
                                   "KubeSpawner's own default profile is found by the hook.")
    cull_policies = List(Dict(), config=True,
                         help="GPU culling policies, first match wins: {name, profiles, "
                              "groups, idle_minutes, warn_minutes} (see hub/cull.py). "
                              "Empty: no culling.")
    budget_stop = Enum(list(BUDGET_STOP_MODES), "off", config=True,
                       help="Budgets held while servers run: a running GPU server (a GPU "
                            "profile, hub/siteprofiles.py) whose user's or group's budget is "
                            "spent is warned, "
                            "then stopped after budget_grace_minutes ('on'), or only recorded "
                            "('dry-run'). 'off': budgets are checked at spawn only.")
    budget_grace_minutes = Float(15.0, config=True,
                                 help="Minutes between the budget warning reaching the user "
                                      "and the server's stop.")
    cull_keeps_per_day = Integer(3, min=0, config=True,
                                 help="The most times a day (the last 24 h) a server's user "
                                      "may answer a cull warning with Keep running: a script "
                                      "that answers every warning cannot keep an idle GPU "
                                      "for ever. Past it the warning stands and the server "
                                      "is stopped at its time.")
    cull_keep_ceiling_minutes = Float(240.0, min=0.0, config=True,
                                      help="Where the node's GPU metrics are read "
                                           "(prometheus_url): once they show every GPU of a "
                                           "server idle this long, a Keep running no longer "
                                           "restarts its idle clock. 0: never.")
    cull_dry_run = Bool(False, config=True,
                        help="Log and record what would be stopped instead of stopping it.")
    profile_prices = Dict(config=True,
                          help="The meter's price table: profile slug -> {instance_type, "
                               "market, region, gpus, cpus, memory, gpu_share} (a share of "
                               "a catalog instance, priced as the servers price themselves) "
                               "or {hourly_rate, gpus} in the site's currency (hub/meter.py). "
                               "A running server of a priced profile is metered by the "
                               "service: rate x time since the Hub started it. It is also "
                               "the site's list of profiles: list every one, CPU ones too; a "
                               "spawn of one it does not list is refused.")
    count = Enum(list(COUNTS), "metered", config=True,
                 help="What budgets, pages, exports and metrics count: the service's meter "
                      "(where the profile is priced; what the server reports otherwise), "
                      "what servers report, or the larger of the two, hour by hour.")
    reconcile_tolerance = Float(0.05, config=True,
                                help="A server whose reported rate, or spend for its run, is "
                                     "below its meter by more than this fraction is flagged "
                                     "on the admin page.")
    reconcile_grace_seconds = Float(None, allow_none=True, config=True,
                                    help="How far behind its meter a server's spend for its "
                                         "run may be before it is flagged (it starts "
                                         "reporting after the Hub starts it). Default: two "
                                         "report intervals and a minute.")
    prometheus_url = Unicode("", config=True,
                             help="Prometheus that scrapes NVIDIA's dcgm-exporter (with "
                                  "honorLabels, so each GPU's series names its pod): culling "
                                  "and idle GPU hours then go by the node's GPU activity of "
                                  "each server's pod, not by the server's report. Empty: off.")
    prometheus_timeout = Float(5.0, config=True,
                               help="Seconds a Prometheus query may take.")
    gpu_busy_percent = Float(GPU_BUSY_PERCENT, config=True,
                             help="A GPU whose node activity is at or above this percent is "
                                  "busy, below it idle; one whose series has no number "
                                  "(NaN, a blank) is of unknown activity, never idle.")
    pod_name_template = Unicode("jupyter-{user_server}", config=True,
                                help="KubeSpawner's pod_name_template (as the Hub is "
                                     "configured), to name each server's pod.")
    pod_namespace = Unicode(os.environ.get("POD_NAMESPACE", ""), config=True,
                            help="The namespace of the user pods (default: $POD_NAMESPACE, "
                                 "which Zero to JupyterHub sets to the Hub's).")
    pod_slug_scheme = Enum(["safe", "escape"], "safe", config=True,
                           help="KubeSpawner's slug_scheme (7+: safe; earlier: escape).")

    @classmethod
    def load(cls, config_file: str | Path) -> HubSettings:
        """The settings of a config file's `c.CostGuardHub` section, checked as the service
        checks them (a TraitError names a bad value)."""
        path = Path(config_file)
        config = PyFileConfigLoader(path.name, path=str(path.parent)).load_config()
        return cls.of(dict(config.get(SECTION, {})))

    @classmethod
    def of(cls, settings: HubSettings | Mapping[str, Any]) -> HubSettings:
        """Settings as they are, or built from a plain mapping of option -> value."""
        if isinstance(settings, HubSettings):
            return settings
        return cls(config=Config({cls.__name__: dict(settings)}))

    @property
    def fresh(self) -> float:
        """The one freshness window: `fresh_seconds`, or its default from the intervals."""
        if self.fresh_seconds is not None:
            return max(0.0, float(self.fresh_seconds))
        return fresh_window(self.poll_interval, self.report_interval)

    @cached_property
    def budgets(self) -> Budgets:
        return Budgets(self.budget_period, dict(self.user_budgets), dict(self.group_budgets),
                       self.default_user_budget)

    @cached_property
    def prices(self) -> dict[str, ProfilePrice]:
        """The meter's price of each profile (MeterConfigError names what cannot be priced)."""
        return price_profiles(
            self.profile_prices, currency=self.currency, catalog_files=self.catalog_files,
            exchange_rates=self.exchange_rates, rates_date=self.exchange_rates_date)

    @cached_property
    def site(self) -> SiteProfiles:
        """The site's profiles: which one a server runs, whether GPU, its price."""
        return site_profiles(self.prices, gpu_profiles=self.gpu_profiles,
                             default_profile=self.default_profile)
