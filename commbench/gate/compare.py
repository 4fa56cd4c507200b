"""The regression gate: join two runs on their configuration keys and give each row a ratio and a verdict.

Either side may be a run set: a folder of run folders (the same sweep launched several times, e.g. with
--launches N). A row's value is then the median over the launches. A row regresses only when it is worse beyond the
threshold AND a one-sided test says the change is more than noise, p < ALPHA:

- both sides with two or more launches of the row: a t test (Welch's) on the logs of the per-launch values, each
  side's launch variance pooled over the rows of the bench or the row's own, whichever is wider: the launches are
  the independent units, and launch-to-launch variation is what a difference must stand out from; one more entry
  tests all rows at once, on each launch's geometric mean (the tests are commbench/gate/launch_tests.py);
- a side with one launch: a change within the launch-noise floor (the largest change launch noise alone makes in
  fewer than ALPHA of comparisons of that many rows, from the noise the caller passes, a run set's run_set.json, the
  launch noise stored for the machine that recorded the new side, or the prior for its device: launch_floor) is `~`;
  beyond it, a Mann–Whitney U test (scipy.stats.mannwhitneyu) that the new run's per-iteration times are larger
  than the baseline's.

Beyond the threshold without significance is `~` (noise cannot be ruled out). Every compared row says the smallest
change this comparison could have detected (detectable_pct). Peak memory has one value per row, no samples: it is a
deterministic quantity here, so beyond the threshold is a regression by itself.

Suite runs (`commbench run`) are compared bench by bench, matched by bench name; a folder of suite runs is a run set
of each bench. A suite run against a single run is compared through the suite's one bench of that run's kind
(sides.paired_bench_sets; several, or none, are refused).

A row whose busbw is 0 on a side (nccl-tests prints it to 0.01 GB/s: its small sizes read 0.00) is judged on its time
instead, at the busbw threshold: at one size busbw is a fixed multiple of 1 / time (_stand_in).

The gate also fails when the new side cannot show that nothing got worse: a run whose meta.json does not say
complete (failed, or still running / killed), or a row (or bench) the baseline has and the new side lacks. Both are
listed; --allow-missing accepts them (a regression still fails). A baseline that is not complete is bad input: the
gate would measure against a run that is itself in doubt, so it is refused with the advice to re-record it.

Reading the two sides (runs, run sets, suite benches, how each ended, which tool) is commbench/gate/sides.py; how
the comparison is shown (table, Markdown, JSON, trust notes) is commbench/gate/compare_output.py.
"""

import math
import statistics
from pathlib import Path

import pandas as pd
from scipy.stats import mannwhitneyu

from commbench import store
from commbench.bench_kind import BenchKind, Metric
from commbench.benches import KINDS
from commbench.errors import CommbenchError
from commbench.gate import machine_noise, priors, run_set, sides
from commbench.gate.expected import below, below_expected
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
from commbench.measure.stats import stored_half_width_pct

ALPHA = 0.01
REGRESSION, IMPROVED, NOISE, OK = "REGRESSION", "improved", "~", "ok"
NEW, MISSING, NOT_COMPARABLE, INCOMPLETE = "new", "missing", "not comparable", "incomplete run"
WRONG = "WRONG RESULTS"
"""A new row whose check failed (n_wrong > 0): its figures are not valid, and the gate fails whatever the speed."""
UNCHECKED = "unchecked"
"""A new row that no check verified (n_wrong empty): its correctness is unknown, never 0 wrong. Its speed is still
judged and it fails nothing (the run chose not to check), but it is listed and the gate's line counts it."""
UNCHECKED_WHY = "n_wrong empty: the new run did not check it (--no-check, -c 0, or a source without #wrong)"
NO_FIGURE = "no figure"
"""A row with nothing to gate: a no-op (in place at world size 1), or a time at the timer's resolution on a side."""
WIDE_CI_PCT = 10.0
"""A side whose 95 % CI of the median reaches further than this from the median (either way) is a noisy point."""

METRIC_NAMES = tuple(dict.fromkeys(metric.name for kind in KINDS.values() for metric in kind.metrics))
"""Every metric some bench kind gates on (busbw, time, step_time, peak_mem)."""
DEFAULT_THRESHOLDS = {metric.name: metric.default_threshold_pct for kind in KINDS.values() for metric in kind.metrics
                      if metric.default_threshold_pct is not None}


def _metrics(kind: BenchKind) -> dict[str, Metric]:
    return {metric.name: metric for metric in kind.metrics}


def parse_threshold(text: str) -> tuple[str, float]:
    """busbw:5% → ("busbw", 5.0)."""
    name, _, value = text.partition(":")
    if name not in METRIC_NAMES or not value:
        raise CommbenchError(f"bad --fail {text!r}: write METRIC:PERCENT with METRIC one of {', '.join(METRIC_NAMES)}, "
                             "e.g. busbw:5%")
    try:
        percent = float(value.strip().removesuffix("%"))
    except ValueError:
        raise CommbenchError(f"bad --fail {text!r}: the threshold must be a percentage, e.g. busbw:5%") from None
    if not math.isfinite(percent):  # nan% never trips and inf% never can: the gate would pass every run
        raise CommbenchError(f"bad --fail {text!r}: the threshold must be a finite percentage, e.g. busbw:5%")
    if percent < 0:
        raise CommbenchError(f"bad --fail {text!r}: the threshold cannot be negative")
    return name, percent


def _samples_of(run: sides.Run, row: pd.Series, metric: Metric) -> list[float]:
    frame = run.samples
    values = frame.loc[run.kind.samples_of(frame, row), metric.samples].dropna().tolist()
    if not values:
        raise CommbenchError(f"{run.path / store.SAMPLES_FILE} has no samples for {run.kind.row_label(row)}; the run "
                             "is incomplete or the file was edited: re-run it")
    return values


def _verdict(worse_pct: float, threshold: float, p_worse: float | None, p_better: float | None,
             within_floor: bool = False, alpha: float = ALPHA) -> str:
    if abs(worse_pct) <= threshold:
        return OK
    if within_floor:
        return NOISE
    if worse_pct > 0:
        return REGRESSION if p_worse is None or p_worse < alpha else NOISE
    return IMPROVED if p_better is None or p_better < alpha else NOISE


def launch_floor(baseline_dir: Path, new_dir: Path, launch_noise_pct: float | None = None) -> Floor:
    """The launch noise of this comparison's floor, in this order: the one given (--launch-noise); that of a side
    that is a run set (its run_set.json, or measured over its launches when it has none); the one stored for the
    machine that recorded the new side (machine_noise); the prior for the new side's device type."""
    if launch_noise_pct is not None:
        return Floor(launch_noise_pct, "--launch-noise")
    for side, path in (("baseline", baseline_dir), ("new side", new_dir)):
        folders = sides.run_folders(path)
        if len(folders) < 2:
            continue
        stored = run_set.stored_noise(path)
        if stored is not None:
            return Floor(stored, f"the {side}'s {Path(path) / run_set.RUN_SET_FILE}")
        measured = run_set.noise_document([folder.name for folder in folders],
                                          launch_values(path))["launch_noise_pct"]
        if measured is not None:
            return Floor(measured, f"measured over the {side}'s {len(folders)} launches ({path})")
    key = machine_noise.side_key(new_dir)
    machine = machine_noise.stored(key) if key is not None else None
    if machine is not None:
        return Floor(machine.noise_pct, machine.source)
    assumed = priors.prior(key.device if key is not None else None)
    where = f" ({key.label} on {key.host}: no launch noise stored for it here)" if key is not None else ""
    return Floor(assumed.noise_pct, assumed.source + where)


def _gated_metrics(kind: BenchKind) -> list[Metric]:
    """The metrics whose launch noise a run set records: timed (they have samples) and gated by default."""
    return [metric for metric in kind.metrics if metric.samples and metric.default_threshold_pct is not None]


def launch_values(path: Path) -> dict[tuple[str, str], list[float]]:
    """Per row (labelled `[bench] row` in a suite) and metric run_set.json records, the value of each launch of a
    run or run set at path."""
    found = {}
    for name, folders in sides.bench_run_sets(path).items():
        found.update(bench_launch_values(path, name, folders))
    return found


def bench_launch_values(path: Path, name: str, folders: list[Path]) -> dict[tuple[str, str], list[float]]:
    """launch_values() of one bench: its folder in each launch (sides.bench_run_sets)."""
    run = sides.load_run(path, folders, allow_empty=True)
    prefix = f"[{name}] " if name else ""
    return {(prefix + run.kind.row_label(row), metric.name): values[metric.column]
            for row, values in _rows_by_key(run, run.kind.identity).values() for metric in _gated_metrics(run.kind)}


def compare(baseline_dir: Path, new_dir: Path, thresholds: dict[str, float], *,
            launch_noise_pct: float | None = None, below_expected_pct: float | None = None) -> list[dict]:
    """One entry per (row, metric) with a threshold, plus entries for rows (or benches) new, missing or not
    comparable. Suite runs are compared bench by bench; their rows are labelled `bench: row`. launch_noise_pct: the
    launch noise of the floor where a side is a single launch (--launch-noise; launch_floor() says what else);
    below_expected_pct: also judge each new row against its expected busbw (--fail-below-expected, gate/expected.py)."""
    pairing = sides.paired_bench_sets(baseline_dir, new_dir)  # a suite run against a single run: its one bench
    base_sets, new_sets = pairing.baseline, pairing.new
    sides.check_baseline_complete(baseline_dir)
    floor = launch_floor(baseline_dir, new_dir, launch_noise_pct)
    entries = [{"row": f"run {folder}", "verdict": INCOMPLETE, "why": why}
               for folder, why in sides.not_complete(new_dir)]
    applied = False
    for name in [*base_sets, *(name for name in new_sets if name not in base_sets)]:
        if name not in new_sets or name not in base_sets:
            verdict, why = (MISSING, "not in the new run") if name not in new_sets else (NEW, "not in the baseline")
            entries.append({"row": f"bench {name}", "verdict": verdict, "why": why})
            continue
        base = sides.load_run(baseline_dir, base_sets[name])
        new = sides.load_run(new_dir, new_sets[name], allow_empty=True)
        if base.kind is not new.kind:
            raise CommbenchError(f"cannot compare a {base.kind.name} run ({baseline_dir}) with a {new.kind.name} run "
                                 f"({new_dir})" + (f" (bench {name})" if name else ""))
        metrics = {metric: value for metric, value in thresholds.items() if metric in _metrics(base.kind)}
        if not metrics:
            continue  # e.g. a training bench of a suite gated on busbw only
        applied = True
        prefix = f"[{name}] " if name else ""
        entries += [{**entry, "row": prefix + entry["row"]} for entry in _compare_runs(base, new, metrics, floor)]
        if below_expected_pct is not None:
            entries += below_expected(new, below_expected_pct, prefix=prefix)
    if not applied and any(name in new_sets for name in base_sets):
        loaded = (sides.load_run(baseline_dir, folders) for folders in base_sets.values())
        kinds = {run.kind.name: run.kind for run in loaded}
        names = ", ".join(dict.fromkeys(name for kind in kinds.values() for name in _metrics(kind)))
        raise CommbenchError(f"no --fail threshold applies to a {' or '.join(sorted(kinds))} run; use {names}")
    return entries


def _compare_runs(base: sides.Run, new: sides.Run, metrics: dict[str, float], floor: Floor) -> list[dict]:
    kind = base.kind
    identity, comparability = kind.identity, kind.comparability
    sources = (sides.sources(base), sides.sources(new))
    across = sources[0] != sources[1] and bool(kind.cross_source_identity)
    if across:  # another tool's rows: join on what both measured, each side's builtin rows in one timing mode
        base, new = sides.cross_source_view(base, new), sides.cross_source_view(new, base)
        identity = sides.known_identity(kind.cross_source_identity, base, new)
    _check_anything_joins(base, new, comparability)
    base_rows, new_rows = _rows_by_key(base, identity), _rows_by_key(new, identity)
    shared = [key for key in base_rows if key in new_rows]
    launches = {metric.name: Launches.pooled(([base_rows[key][1].get(metric.column, []) for key in shared],
                                              [new_rows[key][1].get(metric.column, []) for key in shared]))
                for metric in kind.metrics if metric.samples}
    entries = []
    for row_key, (old, old_values) in base_rows.items():
        label = kind.row_label(old) + (f" [source {' vs '.join(sources)}]" if across else "")
        if row_key not in new_rows:
            entries.append({"row": label, "verdict": MISSING,
                            "why": _why_unmatched(old, new.results, identity, comparability, "not in the new run")})
            continue
        current, current_values = new_rows[row_key]
        differences = [f"{column} {old[column]} vs {current[column]}" for column in comparability
                       if str(old[column]) != str(current[column])]
        if differences:
            entries.append({"row": label, "verdict": NOT_COMPARABLE, "why": "; ".join(differences)})
            continue
        notes = [note for note in (_note(old), _note(current)) if note]
        if any(note.startswith("no-op") for note in notes):  # busbw 0 by definition: a ratio would be 0/0
            entries.append({"row": label, "verdict": NO_FIGURE, "why": notes[0]})
            continue
        for name, threshold in metrics.items():
            stand_in = _stand_in(kind, name, (old, current))
            if stand_in is not None and stand_in.name in metrics:  # gated in its own right: its entry judges it
                entries.append({"row": label, "metric": name, "verdict": NO_FIGURE,
                                "why": f"{_no_figure_text(name, (old, current), kind)}; its {stand_in.name} entry "
                                       "judges the row"})
                continue
            judged = stand_in.name if stand_in is not None else name
            column = _metrics(kind)[judged].column
            entry = _compare_metric(judged, threshold, (old, current), (base, new), label, notes,
                                    (old_values.get(column, []), current_values.get(column, [])),
                                    launches.get(judged), floor)
            if stand_in is not None:
                judged_why = (f"{_no_figure_text(name, (old, current), kind)}: judged on {judged} instead, at the "
                              f"{name} threshold")
                entry = {**entry, "instead_of": name,
                         "why": judged_why + (f"; {entry['why']}" if entry.get("why") else "")}
            entries.append(entry)
    compared = [key for key in base_rows if key in new_rows and not any(
        note.startswith("no-op") for note in (_note(base_rows[key][0]), _note(new_rows[key][0])))]
    for name, threshold in metrics.items():
        overall = _overall(name, threshold, kind, compared, (base_rows, new_rows)) if len(compared) >= 2 else None
        if overall is not None:
            entries.append(overall)
    for row_key, (current, _) in new_rows.items():
        if row_key not in base_rows:
            entries.append({"row": kind.row_label(current), "verdict": NEW,
                            "why": _why_unmatched(current, base.results, identity, comparability,
                                                  "not in the baseline")})
    if across:  # the source as a key of every row (the label says it too)
        entries = [{**entry, "source": " vs ".join(sources)} for entry in entries]
    return _check_entries(new) + entries


def _check_anything_joins(base: sides.Run, new: sides.Run, comparability) -> None:
    """Refuse two sides that share no configuration (every row of one at another world size, backend or device
    than every row of the other): a table of `not comparable` rows and a failed gate would say nothing true."""
    conditions = [column for column in comparability if column != "schema_version"]
    if not conditions or base.results.empty or new.results.empty:
        return
    sides_configs = [{tuple(str(value) for value in row) for row in run.results[conditions].itertuples(index=False)}
                     for run in (base, new)]
    if sides_configs[0] & sides_configs[1]:
        return
    differences = [f"{column.replace('_', ' ')} {_values(base.results[column])} vs {_values(new.results[column])}"
                   for column in conditions
                   if set(base.results[column].astype(str)) != set(new.results[column].astype(str))]
    same = ", ".join(column.replace("_", " ") for column in conditions)
    raise CommbenchError(f"nothing to compare: the runs share no configuration ({'; '.join(differences)}); "
                         f"compare runs of the same {same}")


def _values(column: pd.Series) -> str:
    return ",".join(sorted(set(column.astype(str))))


def _check_entries(run: sides.Run) -> list[dict]:
    """Rows of the new side whose check failed (fast but wrong is no pass), then its measured rows that no check
    verified: said as unchecked, not passed as 0 wrong."""
    if "n_wrong" not in run.results.columns:
        return []
    wrong = run.results[pd.to_numeric(run.results["n_wrong"], errors="coerce") > 0]
    entries = [{"row": run.kind.row_label(row), "verdict": WRONG,
                "why": f"n_wrong {int(row['n_wrong'])} in the new run"} for _, row in wrong.iterrows()]
    unchecked_rows = run.results[run.kind.unchecked(run.results)]
    # once a row, however many launches of a run set lack its check
    labels = dict.fromkeys(run.kind.row_label(row) for _, row in unchecked_rows.iterrows())
    return entries + [{"row": label, "verdict": UNCHECKED, "why": UNCHECKED_WHY} for label in labels]



def _rows_by_key(run: sides.Run, identity) -> dict[tuple, tuple[pd.Series, dict[str, list[float]]]]:
    """One row per configuration, with each metric's value in every launch that has the row (by metric column; the
    median where a launch has several rows of one configuration). In a run set, each metric is the median over the
    launches, and so is the CI half-width of each sampled quantity (stored under _ci_key)."""
    groups: dict[tuple, list[pd.Series]] = {}
    for _, row in run.results.iterrows():
        groups.setdefault(tuple(str(row[column]) for column in identity), []).append(row)
    merged = {}
    for key, rows in groups.items():
        row, values = rows[0].copy(), {}
        for metric in run.kind.metrics:
            if metric.column in row.index:
                by_launch: dict = {}
                for r in rows:
                    by_launch.setdefault(r[sides.LAUNCH_COLUMN], []).append(float(r[metric.column]))
                values[metric.column] = [statistics.median(found) for found in by_launch.values()]
                row[metric.column] = float(pd.Series([r[metric.column] for r in rows], dtype=float).median())
        for samples in {metric.samples for metric in run.kind.metrics if metric.samples}:
            # an import without samples has no CI: not assessed, rather than infinitely wide
            widths = [_ci_half_width_pct(r, samples) if run.has_samples else None for r in rows]
            row[_ci_key(samples)] = None if None in widths else float(pd.Series(widths, dtype=float).median())
        merged[key] = (row, values)
    return merged


def _ci_key(samples: str) -> str:
    return f"_{samples}_ci_half_width_pct"  # a leading _: no results column is named so


def _ci_half_width_pct(row: pd.Series, samples: str) -> float | None:
    """How far the 95 % CI of the median reaches from it, the wider side, in % of the median (stats.Summary's
    ci_half_width_pct, from the stored row); inf when the row has no interval (too few samples); None when the kind
    stores no interval for these samples. The columns follow the samples' name: time_us → time_us_p50,
    time_us_ci_lo, time_us_ci_hi; step_time_ms → step_time_ms_p50, ...)."""
    if not all(f"{samples}{suffix}" in row.index for suffix in ("_p50", "_ci_lo", "_ci_hi")):
        return None
    width = stored_half_width_pct(row, samples)
    return math.inf if math.isnan(width) else width


def _note(row: pd.Series) -> str:
    note = row.get("note")
    return note if isinstance(note, str) else ""  # absent, or an empty CSV cell read as NaN


def _why_unmatched(row: pd.Series, other: pd.DataFrame, identity, comparability, otherwise: str) -> str:
    """Say when the other run has this row in another dtype (not comparable), or ran at no such world size, backend
    or device at all, rather than only that it lacks the row."""
    elsewhere = [f"{column.replace('_', ' ')} {row[column]} vs {_values(other[column])}" for column in comparability
                 if column != "schema_version" and column in other.columns
                 and str(row[column]) not in set(other[column].astype(str))]
    if elsewhere:
        return f"{otherwise}: {'; '.join(elsewhere)}"
    if "dtype" in identity:
        loose = [column for column in identity if column != "dtype"]
        mask = pd.Series(True, index=other.index)
        for column in loose:
            mask &= other[column].astype(str) == str(row[column])
        if mask.any():
            return f"not comparable: dtype {row['dtype']} vs {', '.join(sorted(set(other.loc[mask, 'dtype'])))}"
    return otherwise


def _usable(value) -> bool:
    """A figure a ratio can be taken of: a finite number above 0."""
    number = float(value) if value is not None else math.nan
    return math.isfinite(number) and number > 0


def _stand_in(kind: BenchKind, name: str, rows: tuple[pd.Series, pd.Series]) -> Metric | None:
    """The metric that judges a row where this higher-is-better one has no figure on a side but a time does: the
    kind's lower-is-better metric of the same samples (busbw → time). nccl-tests prints busbw to 0.01 GB/s, so its
    small sizes read 0.00 while their times differ; at one size, busbw is a fixed multiple of 1 / time, so the time
    carries all the row's information. None where the metric has a figure on both sides, or the time has none."""
    metric = _metrics(kind)[name]
    if not metric.higher_is_better or not metric.samples \
            or all(_usable(row.get(metric.column)) for row in rows):
        return None
    for other in kind.metrics:
        if other.samples == metric.samples and not other.higher_is_better \
                and all(_usable(row.get(other.column)) for row in rows):
            return other
    return None


def _no_figure_text(name: str, rows: tuple[pd.Series, pd.Series], kind: BenchKind) -> str:
    """"busbw 0 vs 0" (the metric's value on each side, none where absent)."""
    column = _metrics(kind)[name].column
    values = [float(row[column]) if row.get(column) is not None else math.nan for row in rows]
    shown = [f"{value:.4g}" if math.isfinite(value) else "none" for value in values]
    return f"{name} {shown[0]} vs {shown[1]}"


def _compare_metric(name: str, threshold: float, rows: tuple[pd.Series, pd.Series], runs: tuple[sides.Run, sides.Run],
                    label: str, notes: list[str], values: tuple[list[float], list[float]],
                    launches: Launches | None, floor: Floor) -> dict:
    (old, current), (base, new) = rows, runs
    metric = _metrics(base.kind)[name]
    before, after = float(old[metric.column]), float(current[metric.column])
    if not (math.isfinite(before) and math.isfinite(after) and before > 0):
        shown = [f"{value:.4g}" if math.isfinite(value) else "none" for value in (before, after)]
        why = f"{name} {shown[0]} vs {shown[1]}" + (f": {notes[0]}" if notes else "")
        return {"row": label, "metric": name, "verdict": NO_FIGURE, "why": why}
    ratio = after / before
    worse_pct = (1 - ratio) * 100 if metric.higher_is_better else (ratio - 1) * 100
    logs = (run_set.log_values(values[0]), run_set.log_values(values[1]))
    p_worse = p_better = test = samples = None
    within_floor, why, detectable, floor_pct, alpha = False, "", threshold, None, ALPHA
    if metric.samples and base.has_samples and new.has_samples:  # read for every row, whichever test decides: a
        samples = (_samples_of(base, old, metric), _samples_of(new, current, metric))  # run without them is refused
    if launches is None:  # one deterministic value per row (peak memory): beyond the threshold is the verdict
        pass
    elif min(len(side) for side in logs) >= 2:
        # every row is a chance to be wrong: each is tested at ALPHA / rows (Bonferroni), as the floor is
        alpha = ALPHA / max(launches.rows, 1)
        p_worse, p_better, needed = across_launches(logs, launches, metric.higher_is_better, alpha)
        test, detectable = TEST_LAUNCHES, max(threshold, log_change_pct(metric.higher_is_better, needed))
    else:
        bound = floor.log_bound((max(len(logs[0]), 1), max(len(logs[1]), 1)), launches.rows, ALPHA)
        floor_pct = log_change_pct(metric.higher_is_better, bound)
        detectable = max(threshold, floor_pct)
        within_floor = ratio > 0 and abs(math.log(ratio)) <= bound
        if within_floor and abs(worse_pct) > threshold:
            why = (f"within the launch-noise floor: up to {floor_pct:.1f} % worse (or as much "
                   f"better) can be launch noise ({floor.noise_pct:.1f} % launch noise, from {floor.source})")
        if samples is not None:  # samples are times: worse means larger, for bandwidth and step time alike
            p_worse = float(mannwhitneyu(samples[1], samples[0], alternative="greater").pvalue)
            p_better = float(mannwhitneyu(samples[1], samples[0], alternative="less").pvalue)
            test = TEST_SAMPLES
    verdict = _verdict(worse_pct, threshold, p_worse, p_better, within_floor, alpha)
    p_value = p_better if worse_pct < 0 else p_worse
    widths = {side: row.get(_ci_key(metric.samples)) if metric.samples else None
              for side, row in (("baseline", old), ("new", current))}
    wide_sides = [side for side, width in widths.items() if width is not None and width > WIDE_CI_PCT]
    assessed = all(width is not None for width in widths.values())
    return {"row": label, "metric": name, "unit": metric_unit(metric.column), "baseline": before, "new": after,
            "ratio": ratio, "worse_pct": worse_pct,
            "change": change_text(worse_pct), "threshold_pct": threshold, "p_value": p_value, "test": test,
            "launches": [len(side) for side in values], "floor_pct": floor_pct, "detectable_pct": detectable,
            "verdict": verdict,
            "why": why, "ci_half_width_pct": widths, "wide_ci": bool(wide_sides) if assessed else None,
            "wide_ci_sides": wide_sides}


def _overall(name: str, threshold: float, kind: BenchKind, shared: list[tuple], sides) -> dict | None:
    """The all-rows entry (launch_tests.all_rows) of one metric over the rows both sides have, where both are run
    sets; None where that test does not apply."""
    metric = _metrics(kind)[name]
    if not metric.samples:
        return None
    found = all_rows([tuple(rows[key][1].get(metric.column, []) for rows in sides) for key in shared],
                     metric.higher_is_better, ALPHA)
    if found is None:
        return None
    before, after = (math.exp(statistics.fmean(side)) for side in found.launch_means)
    ratio = after / before
    worse_pct = (1 - ratio) * 100 if metric.higher_is_better else (ratio - 1) * 100
    return {"row": f"{ALL_ROWS}, {found.rows} rows", "metric": name, "unit": metric_unit(metric.column),
            "baseline": before, "new": after, "ratio": ratio, "worse_pct": worse_pct, "change": change_text(worse_pct),
            "threshold_pct": threshold, "p_value": found.p_better if worse_pct < 0 else found.p_worse,
            "test": TEST_OVERALL, "launches": [len(side) for side in found.launch_means], "floor_pct": None,
            "detectable_pct": max(threshold, log_change_pct(metric.higher_is_better, found.needed_log)),
            "verdict": _verdict(worse_pct, threshold, found.p_worse, found.p_better), "why": "",
            "ci_half_width_pct": {"baseline": None, "new": None}, "wide_ci": None, "wide_ci_sides": []}


_UNITS = (("_gbps", "GB/s"), ("_us", "us"), ("_ms", "ms"), ("_bytes", "B"))


def metric_unit(column: str) -> str:
    """The unit of a metric's column, from the unit its name ends in (every result column names its unit)."""
    stem = column.removesuffix("_p50")
    return next((unit for suffix, unit in _UNITS if stem.endswith(suffix)), "")


def change_text(worse_pct: float) -> str:
    """The change in words, so that its direction cannot be misread: "12.3 % worse", "5.1 % better", "0.0 %"."""
    shown = f"{abs(worse_pct):.1f}"
    if shown == "0.0":
        return "0.0 %"
    return f"{shown} % {'worse' if worse_pct > 0 else 'better'}"


def regressions(entries: list[dict]) -> int:
    return sum(entry["verdict"] == REGRESSION for entry in entries)


def unproven(entries: list[dict]) -> list[dict]:
    """The entries that keep the new side from showing that nothing got worse: baseline rows or benches it lacks,
    and its runs that did not complete."""
    return [entry for entry in entries if entry["verdict"] in (MISSING, INCOMPLETE)]


def wrong(entries: list[dict]) -> list[dict]:
    return [entry for entry in entries if entry["verdict"] == WRONG]


def unchecked(entries: list[dict]) -> list[dict]:
    return [entry for entry in entries if entry["verdict"] == UNCHECKED]


def gate_fails(entries: list[dict], *, allow_missing: bool) -> bool:
    return regressions(entries) > 0 or bool(wrong(entries)) or bool(below(entries)) or \
        (bool(unproven(entries)) and not allow_missing)


def listed(names: list[str], most: int = 2) -> str:
    """The first names and how many more: the gate's verdict is one line a log can show whole."""
    shown = "; ".join(names[:most])
    return shown if len(names) <= most else f"{shown} and {len(names) - most} more (compare --verbose lists them)"


def gate_line(entries: list[dict], *, allow_missing: bool) -> str:
    """The gate's verdict and why, naming the missing rows and the runs that did not complete."""
    problems = []
    missing = [entry["row"] for entry in entries if entry["verdict"] == MISSING]
    if missing:
        problems.append(f"the new side misses {len(missing)} baseline row(s): {listed(missing)}")
    incomplete = [entry for entry in entries if entry["verdict"] == INCOMPLETE]
    if incomplete:  # their paths and reasons are rows of the table: this line stays one a log shows whole
        problems.append(f"{len(incomplete)} new run(s) did not complete (the table says which and why)")
    count = regressions(entries)
    if gate_fails(entries, allow_missing=allow_missing):
        reasons = [f"{count} regression(s)"] if count else []
        if wrong(entries):
            reasons.append(f"{len(wrong(entries))} new row(s) with wrong results: "
                           + listed([entry["row"] for entry in wrong(entries)]))
        if below(entries):
            reasons.append(f"{len(below(entries))} new row(s) below {below(entries)[0]['threshold_pct']:g} % of their "
                           "expected busbw: " + listed([entry["row"] for entry in below(entries)]))
        if problems and not allow_missing:
            reasons += problems + ["--allow-missing accepts these"]
        return "gate: FAILED: " + ". ".join(reasons)
    if problems:
        return "gate: passed with --allow-missing, which accepted: " + ". ".join(problems) + _unverified(entries)
    return "gate: passed" + _unverified(entries)


def _unverified(entries: list[dict]) -> str:
    """What a pass does not vouch for: the new rows no check verified ("" when every row was checked)."""
    found = unchecked(entries)
    if not found:
        return ""
    return f"; {len(found)} new row(s) unchecked (n_wrong empty): their results were not verified"
