"""Summary statistics of per-iteration samples, with a distribution-free 95 % confidence interval of the median."""

import math
from dataclasses import dataclass

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

    @property
    def ci_half_width_pct(self) -> float:
        """The wider side of the median's interval, in percent of the median."""
        if self.p50 <= 0 or math.isnan(self.ci_lo):
            return math.inf
        return max(self.p50 - self.ci_lo, self.ci_hi - self.p50) / self.p50 * 100


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


def summarize(samples) -> Summary:
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
    )
