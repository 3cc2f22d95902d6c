"""Money as text: one formatter for every amount costguard writes in words (a job's label,
alerts), the same text as the frontend's `formatAmount` (labextension/src/format.ts), never
in exponent notation. In common/ so that a job's own process (the runner) can write it too."""

from __future__ import annotations

import math

#: the most decimals an amount is shown with (a millionth: the served rounding)
SHOWN_DECIMALS = 6


def format_amount(amount: float) -> str:
    """An amount as text, never in exponent notation: two decimals from 1 up ("32.77",
    "1234.50"), at least two significant digits below 1 ("0.042", "0.000056"), trailing
    zeros trimmed down to two decimals. The frontend's `formatAmount` (format.ts) writes the
    same text, so a job's label and the panel agree."""
    if amount != amount or amount in (float("inf"), float("-inf")):
        return "–"
    magnitude = abs(amount)
    decimals = 2
    if 0 < magnitude < 1:
        decimals = min(SHOWN_DECIMALS, max(3, 1 - math.floor(math.log10(magnitude))))
    text = f"{magnitude:.{decimals}f}"
    if decimals > 2:
        text = text.rstrip("0")
        if len(text.partition(".")[2]) < 2:
            text = f"{magnitude:.2f}"
    negative = amount < 0 and any(c in "123456789" for c in text)
    return ("-" if negative else "") + text


def format_money(amount: float, currency: str) -> str:
    """Money with its currency code first, as the frontend writes it: "USD 0.41"."""
    return f"{currency} {format_amount(amount)}" if currency.strip() else format_amount(amount)
