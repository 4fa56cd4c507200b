"""Summary statistics of per-iteration samples, with a distribution-free 95 % confidence interval of the median."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, SupportsFloat, SupportsIndex

if TYPE_CHECKING:
    import pandas as pd  # the option checks import this module: pandas is only named here, never loaded

CONFIDENCE = 0.95
# The order-statistic interval needs P(all samples on one side of the median) = 2·0.5^n < 5 %: n ≥ 6.
MIN_SAMPLES_FOR_CI = 6
_EXACT_BINOMIAL_UP_TO = 1000


@dataclass(frozen=True)
class Summary:
    n: int
    p50: float
    p95: float
    min: float
    mean: float
    stdev: float
    ci_lo: float
    ci_hi: float
    max: float = math.nan

    @property
    def ci_half_width_pct(self) -> float:
        """The wider side of the median's interval, in percent of the median."""
        width = half_width_pct(self.p50, self.ci_lo, self.ci_hi)
        return math.inf if math.isnan(width) else width


def half_width_pct(median: float, low: float, high: float) -> float:
    """How far a median's interval reaches from it, the wider side, in percent of the median; NaN without an
    interval (NaN bounds: too few samples) or without a positive median."""
    if not median > 0 or math.isnan(low) or math.isnan(high):
        return math.nan
    return max(median - low, high - median) / median * 100


def stored_half_width_pct(row: pd.Series | Mapping[str, object], stem: str) -> float:
    """half_width_pct of a stored row's `{stem}_p50`, `{stem}_ci_lo`, `{stem}_ci_hi` (stem time_us or
    step_time_ms); NaN where a column is missing or holds no number."""
    return half_width_pct(*(as_number(row.get(f"{stem}{suffix}")) for suffix in ("_p50", "_ci_lo", "_ci_hi")))


def as_number(value: object) -> float:
    """A stored cell as a float: NaN for an empty cell, None or text (rows read back from CSV hold any of them)."""
    if not isinstance(value, str | bytes | SupportsFloat | SupportsIndex):
        return math.nan  # None, pd.NA, or anything else float() refuses
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def median_ci_ranks(n: int, confidence: float = CONFIDENCE) -> tuple[int, int] | None:
    """0-based ranks (lo, hi) in the sorted samples that bound the median with at least `confidence` coverage.

    Uses the binomial(n, 1/2) distribution of how many samples fall below the true median; exact for n ≤ 1000,
    the normal approximation above. None when n is too small for any interval to reach the confidence.
    """
    if n < MIN_SAMPLES_FOR_CI:
        return None
    alpha = 1 - confidence
    if n <= _EXACT_BINOMIAL_UP_TO:
        # The largest k with P(B ≤ k−1) ≤ alpha/2 gives the interval [x_(k), x_(n−k+1)] (1-based).
        cumulative, k, total = 0, 0, 2**n
        while True:
            cumulative += math.comb(n, k)
            if cumulative / total > alpha / 2:
                break
            k += 1
        lo = max(k - 1, 0)
        return lo, n - 1 - lo
    half = 1.959963984540054 * math.sqrt(n) / 2
    lo = max(int(math.floor(n / 2 - half)) - 1, 0)
    return lo, n - 1 - lo


def summarize(samples: Sequence[float]) -> Summary:
    import numpy as np  # the option checks read MIN_SAMPLES_FOR_CI from here without loading numpy

    values = np.sort(np.asarray(samples, dtype=np.float64))
    n = len(values)
    if n == 0:
        raise ValueError("no samples to summarize")
    ranks = median_ci_ranks(n)
    ci_lo, ci_hi = (float(values[ranks[0]]), float(values[ranks[1]])) if ranks else (math.nan, math.nan)
    return Summary(
        n=n,
        p50=float(np.median(values)),
        p95=float(np.percentile(values, 95)),
        min=float(values[0]),
        mean=float(values.mean()),
        stdev=float(values.std(ddof=1)) if n > 1 else 0.0,
        ci_lo=ci_lo,
        ci_hi=ci_hi,
        max=float(values[-1]),
    )
