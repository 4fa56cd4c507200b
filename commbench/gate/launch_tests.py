"""The gate's statistics across launches: which change launch noise alone can make, and whether two run sets differ.

Pure arithmetic on the logs of per-launch values (run_set.log_values): compare.py finds the rows and builds the
entries; this module says how sure a difference is.

- A side with one launch: the launch-noise floor (Floor.log_bound), the change launch noise alone exceeds in fewer
  than alpha of the comparisons of that many rows.
- Both sides run sets: Welch's t test on a row's per-launch values (across_launches), each side's spread pooled over
  the rows or the row's own, whichever is wider; and one more test over every row at once (all_rows), on each
  launch's geometric mean.
"""

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from scipy.stats import norm
from scipy.stats import t as student_t

from commbench.gate import run_set

TEST_LAUNCHES, TEST_SAMPLES = "Welch t on launches", "Mann-Whitney U on samples"
"""Which test gave a row's p: across launches (both sides run sets), or on one launch's samples (the entry's
`test`; None where no test ran)."""
ALL_ROWS = "all rows (geometric mean)"
TEST_OVERALL = "Welch t on the launches' geometric means"


@dataclass(frozen=True)
class Floor:
    """The launch noise a comparison with a single launch takes as given (a spread in %, as run_set.json's
    launch_noise_pct), and where it comes from."""

    noise_pct: float
    source: str

    def log_bound(self, launches: tuple[int, int], rows: int, alpha: float) -> float:
        """The change (on the log scale) that launch noise alone exceeds in fewer than alpha of comparisons of
        `rows` rows, between a side of launches[0] launches and one of launches[1]: z(alpha / rows) times the
        spread of the difference of their means, sd * sqrt(1/n1 + 1/n2)."""
        z = float(norm.isf(alpha / max(rows, 1)))
        return z * run_set.log_spread(self.noise_pct) * math.sqrt(1 / launches[0] + 1 / launches[1])


@dataclass(frozen=True)
class Launches:
    """What the launch statistics of one metric know across a bench's rows: each side's launch spread (log sd)
    pooled over the rows, with its degrees of freedom, and how many rows are compared."""

    spreads: tuple[tuple[float, int], tuple[float, int]]
    rows: int

    @classmethod
    def pooled(cls, sides: tuple[list[list[float]], list[list[float]]]) -> "Launches":
        """From each side's per-launch values of every row both sides have."""
        base, new = (run_set.pooled_log_sd([run_set.log_values(values) for values in side]) for side in sides)
        return cls((base, new), len(sides[0]))


def worse_pct(higher_is_better: bool, worse_log: float) -> float:
    """A change on the log scale, worse by worse_log, as a metric's worse_pct: a bandwidth's ratio falls to
    exp(-worse_log), a time's rises to exp(worse_log)."""
    return -math.expm1(-worse_log) * 100 if higher_is_better else math.expm1(worse_log) * 100


def across_launches(logs: tuple[list[float], list[float]], launches: Launches, higher_is_better: bool,
                    alpha: float) -> tuple[float, float, float]:
    """(p worse, p better, the worse change on the log scale that p < alpha needs): Welch's t test of the mean log
    per-launch values. Each side's spread is its launch spread pooled over the rows (with that pool's degrees of
    freedom in the Welch–Satterthwaite formula), or the row's own where that is wider: from 3 launches a row's own
    spread is too unstable to trust when it is small, but a row whose launches scatter more than the others' (small
    messages, on a shared host) must not be judged by the quieter rows' noise."""
    spreads = []
    for side, (pooled_sd, pooled_df) in zip(logs, launches.spreads):
        own = statistics.stdev(side) if len(side) >= 2 else 0.0
        spreads.append((own, len(side) - 1) if own > pooled_sd else (pooled_sd, pooled_df))
    return welch(logs, tuple(spreads), higher_is_better, alpha)


def welch(logs: tuple[list[float], list[float]], spreads: Sequence[tuple[float, float]],
          higher_is_better: bool, alpha: float
          ) -> tuple[float, float, float]:
    """Welch's t test of two sides' mean log values, each side's (sd, degrees of freedom) given."""
    (sd_base, df_base), (sd_new, df_new) = spreads
    worse = statistics.fmean(logs[1]) - statistics.fmean(logs[0])
    worse = -worse if higher_is_better else worse
    variances = ((sd_base ** 2 / len(logs[0]), df_base), (sd_new ** 2 / len(logs[1]), df_new))
    se = math.sqrt(sum(variance for variance, _ in variances))
    if se == 0:  # launches that agree exactly (copies of one run): any difference is beyond their noise
        return (0.0 if worse > 0 else 1.0), (0.0 if worse < 0 else 1.0), 0.0
    df = se ** 4 / sum(variance ** 2 / df for variance, df in variances if variance > 0)
    t_value = worse / se
    return (float(student_t.sf(t_value, df)), float(student_t.cdf(t_value, df)),
            float(student_t.isf(alpha, df)) * se)


@dataclass(frozen=True)
class AllRows:
    """The test over every row at once: each side's launch means (log geometric means over the rows used)."""

    rows: int
    launch_means: tuple[list[float], list[float]]
    p_worse: float
    p_better: float
    needed_log: float
    """The worse change on the log scale that p < alpha needs."""


def all_rows(values: list[tuple[list[float], list[float]]], higher_is_better: bool, alpha: float) -> AllRows | None:
    """Per launch, the geometric mean over the rows, then Welch's t test of the two sides' launch means. A change
    that moves every row (a slower library, a driver, a busier fabric) stands out here long before it does in any
    single row tested at alpha / rows; its noise is the launches' own, a slow launch being slow at every size.
    values: per row both sides have, each side's per-launch values. None where the sides are not run sets whose
    launches all hold every row, or fewer than 2 rows have a figure (a no-op's busbw 0 has none) in every launch."""
    counts = [{len(row[side]) for row in values} for side in (0, 1)]
    if any(len(found) != 1 or min(found) < 2 for found in counts):
        return None
    logs = [[run_set.log_values(row[side]) for side in (0, 1)] for row in values]
    usable = [row_logs for row_logs, row in zip(logs, values)
              if all(len(row_logs[side]) == len(row[side]) for side in (0, 1))]
    if len(usable) < 2:
        return None
    base_means, new_means = ([statistics.fmean(row_logs[side][launch] for row_logs in usable)
                              for launch in range(count.pop())] for side, count in enumerate(counts))
    means = (base_means, new_means)
    spreads = tuple((statistics.stdev(side), len(side) - 1) for side in means)
    p_worse, p_better, needed = welch(means, spreads, higher_is_better, alpha)
    return AllRows(len(usable), means, p_worse, p_better, needed)
