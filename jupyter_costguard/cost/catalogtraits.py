"""The catalog options a user's server and the hub service share (`c.CostGuard.<name>` and
`c.CostGuardHub.<name>`): one declaration, so both price from the same catalog the same way
and refuse the same mistakes."""

from __future__ import annotations

import re
from typing import Any

from traitlets import Dict, Float, HasTraits, List, TraitError, Unicode, validate

#: an ISO 4217 code, the whole text
ISO_4217 = re.compile(r"[A-Z]{3}\Z")


class CatalogTraits(HasTraits):
    """Mixed into the server extension's and the hub service's settings."""

    currency = Unicode(
        "USD", config=True,
        help="The currency (ISO 4217, e.g. USD, EUR) every amount is counted and shown in: "
             "on a hub, the one budgets are in and messages to users say.")
    exchange_rates = Dict(
        value_trait=Float(), config=True,
        help="Units of `currency` per unit of another currency, e.g. {'USD': 0.92} with "
             "currency 'EUR'. Catalog rows in those currencies are converted once, at load; "
             "rows in a currency without a rate keep theirs and say so (a hub's meter "
             "refuses to start on one).")
    exchange_rates_date = Unicode(
        None, allow_none=True, config=True,
        help="ISO date the exchange_rates are from (shown with converted prices).")
    catalog_files = List(
        Unicode(), config=True,
        help="Extra catalog files (CSV or JSON) whose rows add to or override the shipped "
             "ones (on a hub: what profile_prices are priced from).")

    @validate("currency")
    def _currency(self, proposal: dict[str, Any]) -> str:
        value = str(proposal["value"]).strip().upper()
        if not ISO_4217.match(value):
            raise TraitError(f"currency must be an ISO 4217 code such as USD or EUR, not "
                             f"{proposal['value']!r}")
        return value

    @validate("exchange_rates")
    def _rates(self, proposal: dict[str, Any]) -> dict[str, float]:
        rates = dict(proposal["value"])
        for code, rate in rates.items():
            if not ISO_4217.match(str(code)) or not rate > 0 or rate == float("inf"):
                raise TraitError(f"exchange_rates[{code!r}] must be a positive finite rate "
                                 "of an ISO 4217 currency")
        return rates
