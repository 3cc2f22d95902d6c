"""The cost stage's options (`c.CostGuard.<name>`): prices, the ledger, the sample tick."""

from __future__ import annotations

from traitlets import CaselessStrEnum, Float, HasTraits, List, Unicode, default

from jupyter_costguard.cost.ledger import default_db_path
from jupyter_costguard.cost.pricing import PricingConfig


class CostTraits(HasTraits):
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
        ["on-demand", "spot"], default_value="on-demand", config=True,
        help="Which catalog price applies: on-demand or spot.",
    )
    currency = Unicode("USD", config=True, help="Currency code shown with every amount.")
    gpu_share = Float(
        None, allow_none=True, config=True,
        help="Fraction of the hourly rate that is the GPUs' (the rest is the host's). "
        "Default: the catalog row's, else a rule by vCPU and RAM (see README).",
    )
    catalog_files = List(
        Unicode(), config=True,
        help="Extra catalog files (CSV or JSON) whose rows add to or override the shipped ones.",
    )
    sample_interval = Float(2.0, config=True, help="Seconds between samples.")
    idle_gpu_threshold_percent = Float(
        5.0, config=True,
        help="A GPU below this utilisation is idle; kernels holding it while not busy waste.",
    )
    db_path = Unicode(config=True, help="SQLite file holding the ledger.")
    history_retention_days = Float(7.0, config=True, help="Days of per-minute history kept.")

    @default("db_path")
    def _default_db_path(self) -> str:
        return default_db_path()

    def pricing_config(self) -> PricingConfig:
        return PricingConfig(
            instance_type=self.instance_type, hourly_rate=self.hourly_rate, market=self.market,
            currency=self.currency, gpu_share=self.gpu_share,
            catalog_files=tuple(self.catalog_files))
