import math

import numpy as np
import pytest

from commbench.measure.stats import median_ci_ranks, summarize

pytestmark = pytest.mark.no_process


@pytest.mark.parametrize("n, expected", [(6, (0, 5)), (20, (5, 14)), (100, (39, 60))])
def test_median_ci_ranks_match_binomial_tables(n, expected):
    # Textbook order-statistic intervals for the median at 95 % (1-based 1..6, 6..15, 40..61).
    assert median_ci_ranks(n) == expected


def test_too_few_samples_have_no_interval():
    assert median_ci_ranks(5) is None
    assert math.isnan(summarize([1, 2, 3]).ci_lo)


def test_interval_covers_the_true_median_about_95_percent_of_the_time():
    rng = np.random.default_rng(0)
    hits = 0
    for _ in range(2000):
        samples = rng.exponential(1.0, size=25)
        summary = summarize(samples)
        hits += summary.ci_lo <= math.log(2) <= summary.ci_hi
    assert 0.94 <= hits / 2000 <= 0.99


def test_summary_values():
    summary = summarize([5.0, 1.0, 3.0, 2.0, 4.0, 6.0, 7.0])
    assert summary.p50 == 4.0
    assert summary.min == 1.0
    assert summary.mean == 4.0
    assert summary.stdev == pytest.approx(np.std([1, 2, 3, 4, 5, 6, 7], ddof=1))
    assert summary.p95 == pytest.approx(np.percentile([1, 2, 3, 4, 5, 6, 7], 95))
    assert (summary.ci_lo, summary.ci_hi) == (1.0, 7.0)


@pytest.mark.parametrize("n", [1001, 5000])
def test_above_1000_samples_the_normal_approximation_still_reaches_95_percent(n):
    """Past the exact binomial's n the ranks come from the normal approximation: the interval [lo, hi] covers the
    median as often as binomial(n, 1/2) says (B samples below it: lo < B <= hi), at least 95 %, and is no wider than
    two ranks more a side than the narrowest interval that does."""
    from scipy.stats import binom

    lo, hi = median_ci_ranks(n)
    assert hi == n - 1 - lo

    def coverage(low: int) -> float:
        return float(binom.cdf(n - 1 - low, n, 0.5) - binom.cdf(low, n, 0.5))

    assert coverage(lo) >= 0.95
    assert coverage(lo + 3) < 0.95
