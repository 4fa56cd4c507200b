"""One compared metric of one row: its change, the test that says whether the change is more than noise (across
launches, or on one launch's samples beyond the launch-noise floor), its verdict and the smallest change it could have
detected; a metric without a figure on a side judged on its stand-in; and the all-rows entry of two run sets."""

import math
import statistics
from dataclasses import dataclass

import pandas as pd
from scipy.stats import mannwhitneyu

from commbench import store
from commbench.bench_kind import BenchKind, Metric
from commbench.errors import CommbenchError
from commbench.gate import run_set, sides
from commbench.gate.joined_rows import JoinedRow, RowKey, ci_key
from commbench.gate.launch_tests import (
    ALL_ROWS,
    TEST_LAUNCHES,
    TEST_OVERALL,
    TEST_SAMPLES,
    Floor,
    Launches,
    across_launches,
    all_rows,
)
from commbench.gate.launch_tests import worse_pct as log_change_pct
from commbench.gate.thresholds import metrics_of
from commbench.gate.verdicts import ALPHA, NO_FIGURE, WIDE_CI_PCT, Entry, change_text, metric_unit, verdict
from commbench.measure.stats import as_number

Pair = tuple[pd.Series, pd.Series]
"""A row's baseline and new side."""


def _samples_of(run: sides.Run, row: pd.Series, metric: Metric) -> list[float]:
    assert metric.samples is not None  # called for metrics with samples only
    frame = run.samples
    values = frame.loc[run.kind.samples_of(frame, row), metric.samples].dropna().tolist()
    if not values:
        raise CommbenchError(f"{run.path / store.SAMPLES_FILE} has no samples for {run.kind.row_label(row)}; the run "
                             "is incomplete or the file was edited: re-run it")
    return values


def _usable(value: object) -> bool:
    """A figure a ratio can be taken of: a finite number above 0."""
    number = as_number(value)
    return math.isfinite(number) and number > 0


def stand_in(kind: BenchKind, name: str, rows: Pair) -> Metric | None:
    """The metric that judges a row where this higher-is-better one has no figure on a side but a time does: the
    kind's lower-is-better metric of the same samples (busbw → time). nccl-tests prints busbw to 0.01 GB/s, so its
    small sizes read 0.00 while their times differ; at one size, busbw is a fixed multiple of 1 / time, so the time
    carries all the row's information. None where the metric has a figure on both sides, or the time has none."""
    metric = metrics_of(kind)[name]
    if not metric.higher_is_better or not metric.samples \
            or all(_usable(row.get(metric.column)) for row in rows):
        return None
    for other in kind.metrics:
        if other.samples == metric.samples and not other.higher_is_better \
                and all(_usable(row.get(other.column)) for row in rows):
            return other
    return None


def no_figure_text(name: str, rows: Pair, kind: BenchKind) -> str:
    """"busbw 0 vs 0" (the metric's value on each side, none where absent)."""
    column = metrics_of(kind)[name].column
    values = [float(row[column]) if row.get(column) is not None else math.nan for row in rows]
    shown = [f"{value:.4g}" if math.isfinite(value) else "none" for value in values]
    return f"{name} {shown[0]} vs {shown[1]}"


def _worse_pct(ratio: float, metric: Metric) -> float:
    """How much worse new is than baseline, in %, whichever way the metric improves (negative: better)."""
    return (1 - ratio) * 100 if metric.higher_is_better else (ratio - 1) * 100


@dataclass(frozen=True)
class _Tested:
    """What a row's significance test found (p None: no test ran, a deterministic value)."""

    detectable: float
    p_worse: float | None = None
    p_better: float | None = None
    test: str | None = None
    floor_pct: float | None = None
    within_floor: bool = False
    why: str = ""
    alpha: float = ALPHA


def _across_launches(logs: tuple[list[float], list[float]], launches: Launches, metric: Metric,
                     threshold: float) -> _Tested:
    """Both sides with two or more launches of the row: Welch's t test on the logs of the per-launch values."""
    # every row is a chance to be wrong: each is tested at ALPHA / rows (Bonferroni), as the floor is
    alpha = ALPHA / max(launches.rows, 1)
    p_worse, p_better, needed = across_launches(logs, launches, metric.higher_is_better, alpha)
    return _Tested(max(threshold, log_change_pct(metric.higher_is_better, needed)), p_worse, p_better, TEST_LAUNCHES,
                   alpha=alpha)


def _single_launch(logs: tuple[list[float], list[float]], launches: Launches, metric: Metric, threshold: float,
                   change: tuple[float, float], samples: tuple[list[float], list[float]] | None,
                   floor: Floor) -> _Tested:
    """A side with one launch: within the launch-noise floor is noise; beyond it, Mann–Whitney U on the samples."""
    ratio, worse_pct = change
    bound = floor.log_bound((max(len(logs[0]), 1), max(len(logs[1]), 1)), launches.rows, ALPHA)
    floor_pct = log_change_pct(metric.higher_is_better, bound)
    within_floor = ratio > 0 and abs(math.log(ratio)) <= bound
    why = ""
    if within_floor and abs(worse_pct) > threshold:
        why = (f"within the launch-noise floor: up to {floor_pct:.1f} % worse (or as much "
               f"better) can be launch noise ({floor.noise_pct:.1f} % launch noise, from {floor.source})")
    tested = _Tested(max(threshold, floor_pct), floor_pct=floor_pct, within_floor=within_floor, why=why)
    if samples is None:
        return tested
    # samples are times: worse means larger, for bandwidth and step time alike
    return _Tested(tested.detectable, float(mannwhitneyu(samples[1], samples[0], alternative="greater").pvalue),
                   float(mannwhitneyu(samples[1], samples[0], alternative="less").pvalue), TEST_SAMPLES,
                   floor_pct, within_floor, why)


def _ci_widths(metric: Metric, rows: Pair) -> dict[str, float | None]:
    """Each side's CI half-width of the metric's samples (joined_rows.ci_key), None where not assessed."""
    return {side: row.get(ci_key(metric.samples)) if metric.samples else None
            for side, row in (("baseline", rows[0]), ("new", rows[1]))}


def compare_metric(name: str, threshold: float, rows: Pair, runs: tuple[sides.Run, sides.Run],
                   label: str, notes: list[str], values: tuple[list[float], list[float]],
                   launches: Launches | None, floor: Floor) -> Entry:
    """The entry of one metric of one row both sides have."""
    (old, current), (base, new) = rows, runs
    metric = metrics_of(base.kind)[name]
    before, after = float(old[metric.column]), float(current[metric.column])
    if not (math.isfinite(before) and math.isfinite(after) and before > 0):
        shown = [f"{value:.4g}" if math.isfinite(value) else "none" for value in (before, after)]
        why = f"{name} {shown[0]} vs {shown[1]}" + (f": {notes[0]}" if notes else "")
        return {"row": label, "metric": name, "verdict": NO_FIGURE, "why": why}
    ratio = after / before
    worse_pct = _worse_pct(ratio, metric)
    logs = (run_set.log_values(values[0]), run_set.log_values(values[1]))
    samples = None
    if metric.samples and base.has_samples and new.has_samples:  # read for every row, whichever test decides: a
        samples = (_samples_of(base, old, metric), _samples_of(new, current, metric))  # run without them is refused
    if launches is None:  # one deterministic value per row (peak memory): beyond the threshold is the verdict
        tested = _Tested(threshold)
    elif min(len(side) for side in logs) >= 2:
        tested = _across_launches(logs, launches, metric, threshold)
    else:
        tested = _single_launch(logs, launches, metric, threshold, (ratio, worse_pct), samples, floor)
    widths = _ci_widths(metric, rows)
    wide_sides = [side for side, width in widths.items() if width is not None and width > WIDE_CI_PCT]
    assessed = all(width is not None for width in widths.values())
    return {"row": label, "metric": name, "unit": metric_unit(metric.column), "baseline": before, "new": after,
            "ratio": ratio, "worse_pct": worse_pct,
            "change": change_text(worse_pct), "threshold_pct": threshold,
            "p_value": tested.p_better if worse_pct < 0 else tested.p_worse, "test": tested.test,
            "launches": [len(side) for side in values], "floor_pct": tested.floor_pct,
            "detectable_pct": tested.detectable,
            "verdict": verdict(worse_pct, threshold, tested.p_worse, tested.p_better, tested.within_floor,
                               tested.alpha),
            "why": tested.why, "ci_half_width_pct": widths, "wide_ci": bool(wide_sides) if assessed else None,
            "wide_ci_sides": wide_sides}


def overall(name: str, threshold: float, kind: BenchKind, shared: list[RowKey],
            joined: tuple[dict[RowKey, JoinedRow], dict[RowKey, JoinedRow]]) -> Entry | None:
    """The all-rows entry (launch_tests.all_rows) of one metric over the rows both sides have, where both are run
    sets; None where that test does not apply."""
    metric = metrics_of(kind)[name]
    if not metric.samples:
        return None
    found = all_rows([(joined[0][key][1].get(metric.column, []), joined[1][key][1].get(metric.column, []))
                      for key in shared], metric.higher_is_better, ALPHA)
    if found is None:
        return None
    before, after = (math.exp(statistics.fmean(side)) for side in found.launch_means)
    ratio = after / before
    worse_pct = _worse_pct(ratio, metric)
    return {"row": f"{ALL_ROWS}, {found.rows} rows", "metric": name, "unit": metric_unit(metric.column),
            "baseline": before, "new": after, "ratio": ratio, "worse_pct": worse_pct, "change": change_text(worse_pct),
            "threshold_pct": threshold, "p_value": found.p_better if worse_pct < 0 else found.p_worse,
            "test": TEST_OVERALL, "launches": [len(side) for side in found.launch_means], "floor_pct": None,
            "detectable_pct": max(threshold, log_change_pct(metric.higher_is_better, found.needed_log)),
            "verdict": verdict(worse_pct, threshold, found.p_worse, found.p_better), "why": "",
            "ci_half_width_pct": {"baseline": None, "new": None}, "wide_ci": None, "wide_ci_sides": []}
