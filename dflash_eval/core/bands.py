"""Where a run's tau falls against a band of published values: inside, above or below.

A published table gives one number per cell, rounded to two decimals, and two tables of the same pair differ
by about 0.1 (the DFlash paper and DDTree's chain columns). The band is the span of those numbers, widened by
the half unit of their last printed digit (a 6.55 is anything in [6.545, 6.555)); the run is judged by its
95% interval (the prompt bootstrap of core/compare.py): inside when the interval meets the band, below when it
ends under it, above when it starts over it. Without an interval (one prompt) the point itself is used.
Pure: formats/published.py finds the numbers, the renderers print the word.
"""

from __future__ import annotations

from collections.abc import Sequence

ROUNDING = 0.005  # half a unit of the tables' last printed digit (two decimals)


def span(values: Sequence[float]) -> list[float]:
    """[low, high] of published values, as printed (the rounding is applied when judging)."""
    if not values:
        raise ValueError("no published values")
    return [min(values), max(values)]


def position(tau: float, ci: Sequence[float] | None, band: Sequence[float]) -> str:
    """'inside', 'above' or 'below' (module docstring)."""
    low, high = band[0] - ROUNDING, band[1] + ROUNDING
    lo, hi = (ci[0], ci[1]) if ci else (tau, tau)
    if hi < low:
        return "below"
    if lo > high:
        return "above"
    return "inside"
