"""Each environment combination's α–β line within a group (commbench/models/alpha_beta.py's fit, one per env), and
the sizes where two lines cross: t_A(S) = t_B(S) at S* = (α_B − α_A) / (β_A − β_B), β in µs per byte. Below S* the
line with the smaller α is faster, above it the one with the smaller β (more bandwidth).

A crossover says where the fitted curves swap, which the per-size decisions cannot place more finely than the
measured grid; it is shown beside them, not used to cut the ranges: a fit over a protocol switch (a knee) misplaces
it, and the note of such a fit says so."""

import math
from dataclasses import dataclass
from itertools import combinations

import pandas as pd

from commbench.errors import CommbenchError
from commbench.models.alpha_beta import fit_results

NEAR_FACTOR = 2.0
"""A crossover up to this factor outside the measured sizes is still shown (as near, not inside): one grid step
beyond the ends of a x2 sweep; farther out the lines are extrapolated too far to mean anything."""


@dataclass(frozen=True)
class EnvFit:
    env: str
    alpha_us: float
    us_per_byte: float
    """β: NaN where time does not grow with size (bandwidth unresolved)."""
    algbw_gbps: float
    r2: float
    n_points: int
    note: str


@dataclass(frozen=True)
class Crossover:
    faster_below: str
    faster_above: str
    size_bytes: float
    inside: bool
    """Within the measured sizes (else within NEAR_FACTOR of them)."""


def fit_envs(rows: pd.DataFrame) -> list[EnvFit]:
    """One fit per env of a group's rows that has two or more sizes with a time (none where no env has)."""
    try:
        fits = fit_results(rows)
    except CommbenchError:  # no env measured at two sizes: nothing to fit
        return []
    return [EnvFit(fit.env, fit.alpha_us, 1e-3 / fit.algbw_gbps if fit.algbw_gbps > 0 else math.nan,
                   fit.algbw_gbps, fit.r2, fit.n_points, fit.note) for fit in fits]


def crossovers(fits: list[EnvFit], smallest: int, largest: int) -> list[Crossover]:
    """Where each pair of fitted lines crosses, for crossings at positive sizes within or near [smallest,
    largest]; ascending."""
    found = []
    for first, second in combinations(fits, 2):
        if not (math.isfinite(first.us_per_byte) and math.isfinite(second.us_per_byte)):
            continue
        slope = first.us_per_byte - second.us_per_byte
        if slope == 0:
            continue  # parallel lines never cross
        size = (second.alpha_us - first.alpha_us) / slope
        if not (size > 0 and smallest / NEAR_FACTOR <= size <= largest * NEAR_FACTOR):
            continue
        above, below = (second, first) if slope > 0 else (first, second)
        found.append(Crossover(below.env, above.env, size, smallest <= size <= largest))
    return sorted(found, key=lambda crossover: crossover.size_bytes)
