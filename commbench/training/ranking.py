"""Which training configuration is fastest, and what the measurement knows about the others: significantly slower
(the 95 % CIs of the median step time are apart), or tied with it (they overlap), and then how many steps would
separate the two if the spread stayed as measured.

Configurations are compared per sample (samples/s, with each step-time CI turned into samples/s), so rows with
different accumulation steps compare fairly; between rows with the same samples per step this is exactly comparing
their step-time CIs. Only configurations that fit in memory and passed the check are ranked.
"""

import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass

import pandas as pd

from commbench.measure.stats import MIN_SAMPLES_FOR_CI, as_number
from commbench.schema import common
from commbench.schema import training as col
from commbench.schema.column import is_empty


def cell_bool(value: object) -> bool | None:
    """A bool column's cell (fits) as stored or read back from CSV ("True" / "False"); None where it is empty."""
    if isinstance(value, str):
        return {"True": True, "False": False}.get(value)
    return None if is_empty(value) else bool(value)


def eligible(results: pd.DataFrame) -> pd.DataFrame:
    """The configurations a recommendation may name: correct, and fitting (or of unknown fit)."""
    return results[(results[common.N_WRONG] == 0) & (results["fits"].map(cell_bool) != False)]  # noqa: E712 (None = unknown)


def best_config(results: pd.DataFrame) -> pd.Series | None:
    """The highest throughput (samples/s, so that accumulation steps compare fairly) among configurations whose
    peak memory fits and whose check found nothing wrong."""
    candidates = eligible(results)
    if candidates.empty:
        return None
    return candidates.iloc[int(candidates[col.SAMPLES_PER_S].argmax())]  # the first highest (results' index is unique)


def throughput_ci(row: pd.Series) -> tuple[float, float] | None:
    """The samples/s that the ends of the median step time's 95 % CI give (samples/s = samples per step / step
    time); None without a CI. Between configurations with the same samples per step, two of these overlap exactly
    when their step-time CIs do; with different accumulation steps they compare the time per sample."""
    p50, low, high = (as_number(row.get(name)) for name in (col.STEP_TIME_MS_P50, col.STEP_TIME_MS_CI_LO,
                                                        col.STEP_TIME_MS_CI_HI))
    rate = as_number(row.get(col.SAMPLES_PER_S))
    if any(math.isnan(value) for value in (p50, low, high, rate)) or low <= 0:
        return None
    return rate * p50 / high, rate * p50 / low


def _overlap(first: tuple[float, float], second: tuple[float, float]) -> bool:
    return first[0] <= second[1] and second[0] <= first[1]


def tied_configs(results: pd.DataFrame, best: pd.Series | None) -> tuple[list[Hashable], list[Hashable]]:
    """(ties, unknown): the index of every other configuration that fits and is correct and whose step-time CI
    overlaps the best one's (the measurement cannot rank them), and of those where a CI is missing, so nobody can
    say."""
    if best is None:
        return [], []
    ties: list[Hashable] = []
    unknown: list[Hashable] = []
    best_range = throughput_ci(best)
    for index, row in eligible(results).iterrows():
        if index == best.name:
            continue
        other = throughput_ci(row)
        if best_range is None or other is None:
            unknown.append(index)
        elif _overlap(other, best_range):
            ties.append(index)
    return ties, unknown


def steps_to_separate(steps: float, faster: pd.Series, slower: pd.Series) -> float:
    """The --steps at which two tied configurations' CIs would stop overlapping if their spread stayed as measured:
    a CI's half-width shrinks as 1/√n, and the CIs are apart once the sides that face each other (the faster one's
    lower half, the slower one's upper half, in samples/s) add up to less than the difference of the medians d, so
    n_needed = n × (facing half-widths / d)². Infinite when the medians are equal (no number of steps would separate
    them); NaN when n or a CI is unknown."""
    difference = as_number(faster[col.SAMPLES_PER_S]) - as_number(slower[col.SAMPLES_PER_S])
    fast_ci, slow_ci = throughput_ci(faster), throughput_ci(slower)
    if fast_ci is None or slow_ci is None or math.isnan(steps):
        return math.nan
    if not difference > 0:
        return math.inf
    facing = (as_number(faster[col.SAMPLES_PER_S]) - fast_ci[0]) + (slow_ci[1] - as_number(slower[col.SAMPLES_PER_S]))
    return max(steps, math.ceil(steps * (facing / difference) ** 2))


def separation_text(steps: float) -> str:
    if math.isnan(steps):
        return ""
    if math.isinf(steps):
        return " (equal medians: no number of steps would separate them)"
    return f" (~{steps:.0f} steps would separate them at this spread)"


@dataclass(frozen=True)
class Ranked:
    """One ranked configuration: its place (1 + the configurations significantly faster than it, so tied ones share
    a place), and how it stands against each configuration ranked after it."""

    index: Hashable
    place: int
    faster_than: tuple[Hashable, ...] = ()
    """The indexes of later configurations it is significantly faster than."""
    tied_with: tuple[tuple[Hashable, float], ...] = ()
    """(index, the steps that would separate them: steps_to_separate) for each later configuration it is tied with."""


def ranking(results: pd.DataFrame) -> tuple[list[Ranked], list[Hashable]]:
    """(ranked, without a CI): the eligible configurations with a step-time CI, fastest first, and the index of
    those without one (fewer than MIN_SAMPLES_FOR_CI steps), which nothing can rank."""
    candidates = eligible(results).sort_values(col.SAMPLES_PER_S, ascending=False, kind="stable")
    with_ci = [(index, row, ci) for index, row in candidates.iterrows() if (ci := throughput_ci(row)) is not None]
    without = [index for index, row in candidates.iterrows() if throughput_ci(row) is None]
    ranked = []
    for position, (index, row, ci) in enumerate(with_ci):
        above = sum(not _overlap(other_ci, ci) for _, _, other_ci in with_ci[:position])
        faster_than: list[Hashable] = []
        tied_with: list[tuple[Hashable, float]] = []
        for other_index, other, other_ci in with_ci[position + 1:]:
            if _overlap(ci, other_ci):
                steps = max(as_number(row.get("steps")), as_number(other.get("steps")))
                tied_with.append((other_index, steps_to_separate(steps, row, other)))
            else:
                faster_than.append(other_index)
        ranked.append(Ranked(index, 1 + above, tuple(faster_than), tuple(tied_with)))
    return ranked, without


def ranking_lines(results: pd.DataFrame, labels: Mapping[Hashable, str]) -> list[str]:
    """The end table's ranking, one line per configuration (labels: index → the table's label), fastest first, its
    clauses separated by "; "; then the configurations left out and why."""
    ranked, without = ranking(results)
    rate = {index: f"{row['samples_per_s']:.1f} samples/s" for index, row in results.iterrows()}
    left_out = [f"{labels[index]} ({'failed the check' if row['n_wrong'] else 'does not fit'})"
                for index, row in results.iterrows() if index not in eligible(results).index]
    tail = [f"  not ranked: {', '.join(left_out)}"] if left_out else []
    if len(ranked) + len(without) < 2:  # one configuration: nothing to rank it against
        return tail
    if not ranked:
        points = "; ".join(f"{labels[index]} {rate[index]}" for index in without)
        return [f"ranking: none beyond the point figures, which noise may order (no 95 % CI of the median step time "
                f"below {MIN_SAMPLES_FOR_CI} steps); the point figures, highest first:", f"  {points}", *tail]
    lines = ["ranking by samples/s, fastest first; significantly = the 95 % CIs of the median step time are apart (per "
             "sample where accumulation steps differ); a place is 1 + the configurations significantly faster, so tied "
             "ones share it; ~N steps = the --steps at which the CIs would part if the spread stays as measured: "
             "n × (facing half-widths ÷ difference of the medians)²"]
    for entry in ranked:
        parts = [f"  {entry.place}. {labels[entry.index]}: {rate[entry.index]}"]
        if entry.faster_than:
            parts.append(f"significantly faster than {', '.join(labels[index] for index in entry.faster_than)}")
        parts += [f"tied with {labels[index]}{separation_text(steps)}" for index, steps in entry.tied_with]
        lines.append("; ".join(parts))
    if without:
        lines.append(f"  not ranked, no 95 % CI (fewer than {MIN_SAMPLES_FOR_CI} steps): "
                     f"{', '.join(labels[index] for index in without)}")
    return lines + tail
