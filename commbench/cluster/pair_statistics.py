"""Statistics of hunt's pair measurements, shared by its first pass (diagnosis.py) and its second (confirmation.py):
a measurement's figure from its samples, percent slower against a reference, robust middles and spreads, how much a
pair's figure moves between its repeats, and the rank test of one set of exchanges against another. Plain Python
(scipy imported where the rank test runs)."""

import math
from collections.abc import Iterable

from commbench.cluster.specs import Statistic

SPREAD_FLOOR_PCT = 2.0
MAD_TO_SIGMA = 1.4826

Samples = dict[str, dict[tuple[str, str], list[float]]]
"""Per test (bandwidth, latency), each pair's exchange times in seconds."""


def rank_p(mine: list[float], others: list[float]) -> float | None:
    """One-sided Mann–Whitney U: are `mine` (times) larger than `others`? None without enough of either."""
    from scipy.stats import mannwhitneyu  # here, not at the top: `commbench --help` must not import scipy

    if len(mine) < 3 or len(others) < 3:
        return None
    return float(mannwhitneyu(mine, others, alternative="greater").pvalue)


def figure(times: list[float], statistic: Statistic) -> float:
    ordered = sorted(times)
    if statistic == "p10":  # numpy's linear percentile
        position = 0.1 * (len(ordered) - 1)
        low = int(position)
        high = min(low + 1, len(ordered) - 1)
        return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
    return median(ordered)


def repeat_noise_pct(repeats: list[Samples], test: str, statistic: Statistic) -> float | None:
    """How much one pair's figure moves between its repeats, as a robust standard deviation in percent (1.4826 ·
    the median absolute deviation of the log ratios of its repeats, over √2 for the two measurements in each)."""
    if len(repeats) < 2:
        return None
    logs = []
    for pair, first in repeats[0].get(test, {}).items():
        second = repeats[1].get(test, {}).get(pair)
        if first and second:
            logs.append(math.log(figure(second, statistic) / figure(first, statistic)))
    if len(logs) < 2:
        return None
    middle = median(sorted(logs))
    return 100 * MAD_TO_SIGMA * median(sorted(abs(value - middle) for value in logs)) / math.sqrt(2)


def repeat_slowdowns(node: str, test: str, repeats: list[Samples], statistic: Statistic,
                     among: set[tuple[str, str]] | None = None) -> list[float]:
    """The node's percent slower in each repeat on its own: its middle pair time against that repeat's middle node
    score (among: only these pairs count as the node's)."""
    found = []
    for repeat in repeats:
        times = {pair: figure(values, statistic) for pair, values in repeat.get(test, {}).items() if values}
        nodes = {end for pair in times for end in pair}
        scores = {name: better_middle([value for pair, value in times.items() if name in pair],
                                      higher_is_better=False) for name in nodes}
        mine = [value for pair, value in times.items() if node in pair and (among is None or pair in among)]
        others = [score for name, score in scores.items() if name != node]
        if mine and others:
            reference = better_middle(others, higher_is_better=False)
            found.append((better_middle(mine, higher_is_better=False) / reference - 1) * 100)
    return found


def pair_repeat_slowdowns(pair: tuple[str, str], test: str, repeats: list[Samples], statistic: Statistic,
                          controls: set[tuple[str, str]]) -> list[float]:
    """A pair's percent slower in each repeat on its own, against that repeat's control pairs' better middle."""
    found = []
    for repeat in repeats:
        measured = repeat.get(test, {})
        mine = measured.get(pair) or measured.get((pair[1], pair[0]))
        references = [figure(values, statistic) for other, values in measured.items() if other in controls and values]
        if mine and references:
            found.append((figure(mine, statistic) / better_middle(references, higher_is_better=False) - 1) * 100)
    return found


def pooled(samples: dict[tuple[str, str], list[float]], pairs: Iterable[tuple[str, str]]) -> list[float]:
    return [value for pair in pairs for value in samples.get(pair, ())]


def slower_pct(value: float, reference: float, *, higher_is_better: bool) -> float:
    """How much longer the same work takes at `value` than at `reference`, in percent (negative: faster)."""
    return (reference / value - 1) * 100 if higher_is_better else (value / reference - 1) * 100


def better_middle(values: list[float], *, higher_is_better: bool) -> float:
    """The median, or with an even count the better of the two middle values."""
    ordered = sorted(values, reverse=higher_is_better)
    return ordered[(len(ordered) - 1) // 2]


def robust_spread(values: list[float]) -> float:
    if not values:
        return SPREAD_FLOOR_PCT
    ordered = sorted(values)
    middle = median(ordered)
    return max(SPREAD_FLOOR_PCT, MAD_TO_SIGMA * median(sorted(abs(value - middle) for value in ordered)))


def median(ordered: list[float]) -> float:
    count = len(ordered)
    return (ordered[(count - 1) // 2] + ordered[count // 2]) / 2


def p_rounded(p: float | None) -> float | None:
    return None if p is None else float(f"{p:.3g}")


def rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)
