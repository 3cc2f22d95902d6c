"""The cost stage's options (`c.CostGuard.<name>`): prices, the ledger, the sample tick."""

from __future__ import annotations

from traitlets import Bool, CaselessStrEnum, Float, Int, Unicode, default

from jupyter_costguard.common.gpuactivity import GPU_BUSY_PERCENT
from jupyter_costguard.cost.catalogtraits import CatalogTraits
from jupyter_costguard.cost.ledger import default_db_path
from jupyter_costguard.cost.pricing import PricingConfig


class CostTraits(CatalogTraits):
    """Mixed into the server extension; `pricing_config()` is what the service is given."""

    instance_type = Unicode(
        None, allow_none=True, config=True,
        help="Catalog instance type this server runs on (e.g. p4d.24xlarge). Beats detection.",
    )
    hourly_rate = Float(
        None, allow_none=True, config=True,
        help="Hourly rate to use when the instance cannot be found in the catalog.",
    )
    market = CaselessStrEnum(
        ["on-demand", "spot"], default_value=None, allow_none=True, config=True,
        help="Which catalog price applies: on-demand or spot. Default: COSTGUARD_MARKET, "
        "else what the cloud's metadata says, else on-demand.",
    )
    region = Unicode(
        None, allow_none=True, config=True,
        help="Region whose catalog price applies (e.g. eu-north-1). Default: "
        "COSTGUARD_REGION, else the cloud's metadata, else the type's first catalog region.")
    cloud_metadata = Bool(
        True, config=True,
        help="Ask the cloud's metadata service (AWS, GCP, Azure) which instance, region and "
        "market this is, off the IO loop, at start and every few minutes. "
        "COSTGUARD_CLOUD_METADATA=off also turns it off.")
    cloud_metadata_timeout = Float(
        1.0, config=True, help="Seconds each metadata request may take.")
    cloud_metadata_interval = Float(
        300.0, config=True, help="Seconds between metadata re-checks.")
    container_share = CaselessStrEnum(
        ["auto", "on", "off"], default_value="auto", config=True,
        help="Price a container by the part of the instance it holds (GPUs, cgroup v2 CPU "
        "and memory limits): auto when a container is detected. COSTGUARD_CONTAINER_SHARE "
        "overrides.")
    price_stale_after_days = Int(
        90, config=True,
        help="Days after which a catalog price is shown as possibly out of date.")
    gpu_share = Float(
        None, allow_none=True, config=True,
        help="Fraction of the hourly rate that is the GPUs' (the rest is the host's). "
        "Default: the catalog row's, else a rule by vCPU and RAM (see README).",
    )
    catalog_refresh_hours = Float(
        24.0, config=True,
        help="Hours between background refreshes of the user catalog from gpuhunt's "
        "published prices (what `jupyter costguard catalog update` does; needs "
        "the prices extra, pip install '.[prices]' in a clone), in a child process, off the "
        "IO loop; the new prices are used without a restart, and a failed refresh keeps the "
        "last good file. 0 turns it off.")
    catalog_refresh_timeout = Float(
        300.0, config=True,
        help="Seconds one background catalog refresh may take before it is stopped.")
    sample_interval = Float(2.0, config=True, help="Seconds between samples.")
    idle_gpu_threshold_percent = Float(
        GPU_BUSY_PERCENT, config=True,
        help="A GPU at or above this utilisation (percent) is busy, below it idle; kernels "
        "holding an idle GPU while not busy waste. A GPU that reports no utilisation (a MIG "
        "instance) is of unknown activity: spend, never waste, and never called idle.",
    )
    db_path = Unicode(config=True, help="SQLite file holding the ledger.")
    history_retention_days = Float(7.0, config=True, help="Days of per-minute history kept.")

    @default("db_path")
    def _default_db_path(self) -> str:
        return default_db_path()

    def catalog_paths(self) -> tuple[str, ...]:
        """The refreshed user catalog (`jupyter costguard catalog update`) when there is one,
        then the configured files: each on top of the shipped catalog, in this order."""
        from jupyter_costguard.cost.refresh import user_catalog_files

        return user_catalog_files() + tuple(self.catalog_files)

    def pricing_config(self) -> PricingConfig:
        return PricingConfig(
            instance_type=self.instance_type, hourly_rate=self.hourly_rate, market=self.market,
            currency=self.currency, gpu_share=self.gpu_share,
            catalog_files=self.catalog_paths(), region=self.region,
            container_share=self.container_share,
            exchange_rates=tuple(sorted(self.exchange_rates.items())),
            exchange_rates_date=self.exchange_rates_date,
            stale_after_days=self.price_stale_after_days)
