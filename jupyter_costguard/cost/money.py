"""Amounts of money as the documents carry them: one rounding for every figure served.

Spend is summed from many small float intervals; a millionth of the currency unit is finer
than any price and hides the float noise. A sum that comes out a hair below zero (the
unattributed rest of a bucket, say) is noise too, so it is served as 0, never -0.0.
"""

from __future__ import annotations

#: decimal places an amount is served with
MONEY_DIGITS = 6


def round_money(x: float) -> float:
    """`x` rounded to `MONEY_DIGITS` places, never negative (and never -0.0)."""
    return round(x, MONEY_DIGITS) + 0.0 if x > 0.0 else 0.0
