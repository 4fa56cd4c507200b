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

Reading the two sides (runs, run sets, suite benches, how each ended, which tool) is commbench/gate/sides.py; their
rows joined per configuration, joined_rows.py; one metric of one row judged, metric_entry.py (the verdict words and
rule: verdicts.py); the launch-noise floor, launch_values.py; the gate's line over the entries, gate_verdict.py; how
the comparison is shown (table, Markdown, JSON, trust notes) is commbench/gate/compare_output.py.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pandas as pd

from commbench.bench_kind import BenchKind
from commbench.errors import CommbenchError
from commbench.gate import sides
from commbench.gate.expected import below_expected
from commbench.gate.joined_rows import JoinedRow, RowKey, check_anything_joins, note, rows_by_key, why_unmatched
from commbench.gate.launch_tests import Floor, Launches
from commbench.gate.launch_values import launch_floor
from commbench.gate.metric_entry import Pair, compare_metric, no_figure_text, overall, stand_in
from commbench.gate.thresholds import metrics_of
from commbench.gate.verdicts import (
    INCOMPLETE,
    MISSING,
    NEW,
    NO_FIGURE,
    NOT_COMPARABLE,
    UNCHECKED,
    UNCHECKED_WHY,
    WRONG,
    Entry,
)
from commbench.schema import common


def compare(baseline_dir: Path, new_dir: Path, thresholds: dict[str, float], *,
            launch_noise_pct: float | None = None, below_expected_pct: float | None = None) -> list[Entry]:
    """One entry per (row, metric) with a threshold, plus entries for rows (or benches) new, missing or not
    comparable. Suite runs are compared bench by bench; their rows are labelled `bench: row`. launch_noise_pct: the
    launch noise of the floor where a side is a single launch (--launch-noise; launch_floor() says what else);
    below_expected_pct: also judge each new row against its expected busbw (--fail-below-expected, gate/expected.py)."""
    pairing = sides.paired_bench_sets(baseline_dir, new_dir)  # a suite run against a single run: its one bench
    base_sets, new_sets = pairing.baseline, pairing.new
    sides.check_baseline_complete(baseline_dir)
    floor = launch_floor(baseline_dir, new_dir, launch_noise_pct)
    entries: list[Entry] = [{"row": f"run {folder}", "verdict": INCOMPLETE, "why": why}
                            for folder, why in sides.not_complete(new_dir)]
    applied = False
    for name in [*base_sets, *(name for name in new_sets if name not in base_sets)]:
        if name not in new_sets or name not in base_sets:
            verdict, why = (MISSING, "not in the new run") if name not in new_sets else (NEW, "not in the baseline")
            entries.append({"row": f"bench {name}", "verdict": verdict, "why": why})
            continue
        base, new = _load_bench(name, (baseline_dir, new_dir), (base_sets[name], new_sets[name]))
        metrics = {metric: value for metric, value in thresholds.items() if metric in metrics_of(base.kind)}
        if not metrics:
            continue  # e.g. a training bench of a suite gated on busbw only
        applied = True
        prefix = f"[{name}] " if name else ""
        entries += [{**entry, "row": f"{prefix}{entry['row']}"} for entry in _compare_runs(base, new, metrics, floor)]
        if below_expected_pct is not None:
            entries += below_expected(new, below_expected_pct, prefix=prefix)
    if not applied and any(name in new_sets for name in base_sets):
        _refuse_unjudged(baseline_dir, base_sets)
    return entries


def _load_bench(name: str, paths: tuple[Path, Path], folders: tuple[list[Path], list[Path]]
                ) -> tuple[sides.Run, sides.Run]:
    """One bench's baseline and new side, refused where they are runs of different kinds."""
    base = sides.load_run(paths[0], folders[0])
    new = sides.load_run(paths[1], folders[1], allow_empty=True)
    if base.kind is not new.kind:
        raise CommbenchError(f"cannot compare a {base.kind.name} run ({paths[0]}) with a {new.kind.name} run "
                             f"({paths[1]})" + (f" (bench {name})" if name else ""))
    return base, new


def _refuse_unjudged(baseline_dir: Path, base_sets: dict[str, list[Path]]) -> NoReturn:
    """Benches both sides have, none of whose kinds any --fail threshold applies to: say which metrics would."""
    loaded = (sides.load_run(baseline_dir, folders) for folders in base_sets.values())
    kinds = {run.kind.name: run.kind for run in loaded}
    names = ", ".join(dict.fromkeys(name for kind in kinds.values() for name in metrics_of(kind)))
    raise CommbenchError(f"no --fail threshold applies to a {' or '.join(sorted(kinds))} run; use {names}")


@dataclass(frozen=True)
class _Joined:
    """Two sides of one bench joined on their configuration keys (another tool's rows: on what both measured, each
    side's builtin rows in one timing mode)."""

    kind: BenchKind
    runs: tuple[sides.Run, sides.Run]
    identity: Sequence[str]
    sources: tuple[str, str]
    across: bool
    """The sides come from different tools: the source is a key of every row."""
    rows: tuple[dict[RowKey, JoinedRow], dict[RowKey, JoinedRow]]

    def label(self, row: pd.Series) -> str:
        return self.kind.row_label(row) + (f" [source {' vs '.join(self.sources)}]" if self.across else "")


@dataclass(frozen=True)
class _Criteria:
    """What one bench's rows are judged by: the thresholds, each metric's launch statistics, the launch-noise
    floor."""

    thresholds: dict[str, float]
    launches: dict[str, Launches]
    floor: Floor


def _compare_runs(base: sides.Run, new: sides.Run, metrics: dict[str, float], floor: Floor) -> list[Entry]:
    joined = _join(base, new)
    criteria = _Criteria(metrics, _launch_statistics(joined), floor)
    entries = [entry for key in joined.rows[0] for entry in _baseline_row_entries(joined, key, criteria)]
    entries += _overall_entries(joined, metrics) + _new_row_entries(joined)
    if joined.across:  # the source as a key of every row (the label says it too)
        entries = [{**entry, "source": " vs ".join(joined.sources)} for entry in entries]
    return _check_entries(joined.runs[1]) + entries


def _join(base: sides.Run, new: sides.Run) -> _Joined:
    kind = base.kind
    identity: Sequence[str] = kind.identity
    sources = (sides.sources(base), sides.sources(new))
    across = sources[0] != sources[1] and bool(kind.cross_source_identity)
    if across:  # another tool's rows: join on what both measured, each side's builtin rows in one timing mode
        base, new = sides.cross_source_view(base, new), sides.cross_source_view(new, base)
        identity = sides.known_identity(kind.cross_source_identity, base, new)
    check_anything_joins(base, new, kind.comparability)
    rows = (rows_by_key(base, identity), rows_by_key(new, identity))
    return _Joined(kind, (base, new), identity, sources, across, rows)


def _launch_statistics(joined: _Joined) -> dict[str, Launches]:
    """Per sampled metric, the launch spreads pooled over the rows both sides have."""
    base_rows, new_rows = joined.rows
    shared = [key for key in base_rows if key in new_rows]
    return {metric.name: Launches.pooled(([base_rows[key][1].get(metric.column, []) for key in shared],
                                          [new_rows[key][1].get(metric.column, []) for key in shared]))
            for metric in joined.kind.metrics if metric.samples}


def _baseline_row_entries(joined: _Joined, key: RowKey, criteria: _Criteria) -> list[Entry]:
    """A baseline row's entries: missing, not comparable, no figure (a no-op), or one per gated metric."""
    (base_rows, new_rows), comparability = joined.rows, joined.kind.comparability
    old, old_values = base_rows[key]
    label = joined.label(old)
    if key not in new_rows:
        return [{"row": label, "verdict": MISSING,
                 "why": why_unmatched(old, joined.runs[1].results, joined.identity, comparability,
                                       "not in the new run")}]
    current, current_values = new_rows[key]
    differences = [f"{column} {old[column]} vs {current[column]}" for column in comparability
                   if str(old[column]) != str(current[column])]
    if differences:
        return [{"row": label, "verdict": NOT_COMPARABLE, "why": "; ".join(differences)}]
    notes = [text for text in (note(old), note(current)) if text]
    if any(text.startswith("no-op") for text in notes):  # busbw 0 by definition: a ratio would be 0/0
        return [{"row": label, "verdict": NO_FIGURE, "why": notes[0]}]
    return [_metric_entry(joined, name, (old, current), (old_values, current_values), label, notes, criteria)
            for name in criteria.thresholds]


def _metric_entry(joined: _Joined, name: str, rows: Pair, values: tuple[dict[str, list[float]], dict[str, list[float]]],
                  label: str, notes: list[str], criteria: _Criteria) -> Entry:
    """One gated metric of a row both sides have; judged on its stand-in (busbw → time) where it has no figure on a
    side, or left to the stand-in's own entry where that is gated too."""
    kind, threshold = joined.kind, criteria.thresholds[name]
    substitute = stand_in(kind, name, rows)
    if substitute is not None and substitute.name in criteria.thresholds:  # gated in its own right: it judges
        return {"row": label, "metric": name, "verdict": NO_FIGURE,
                "why": f"{no_figure_text(name, rows, kind)}; its {substitute.name} entry judges the row"}
    judged = substitute.name if substitute is not None else name
    column = metrics_of(kind)[judged].column
    entry = compare_metric(judged, threshold, rows, joined.runs, label, notes,
                           (values[0].get(column, []), values[1].get(column, [])),
                           criteria.launches.get(judged), criteria.floor)
    if substitute is None:
        return entry
    judged_why = f"{no_figure_text(name, rows, kind)}: judged on {judged} instead, at the {name} threshold"
    return {**entry, "instead_of": name, "why": judged_why + (f"; {entry['why']}" if entry.get("why") else "")}


def _overall_entries(joined: _Joined, metrics: dict[str, float]) -> list[Entry]:
    """The all-rows entry of each metric, over the rows both sides have that are not no-ops (two or more)."""
    base_rows, new_rows = joined.rows
    compared = [key for key in base_rows if key in new_rows and not any(
        text.startswith("no-op") for text in (note(base_rows[key][0]), note(new_rows[key][0])))]
    if len(compared) < 2:
        return []
    found = (overall(name, threshold, joined.kind, compared, joined.rows) for name, threshold in metrics.items())
    return [entry for entry in found if entry is not None]


def _new_row_entries(joined: _Joined) -> list[Entry]:
    """The new side's rows the baseline lacks."""
    base_rows, new_rows = joined.rows
    return [{"row": joined.kind.row_label(current), "verdict": NEW,
             "why": why_unmatched(current, joined.runs[0].results, joined.identity, joined.kind.comparability,
                                   "not in the baseline")}
            for key, (current, _) in new_rows.items() if key not in base_rows]


def _check_entries(run: sides.Run) -> list[Entry]:
    """Rows of the new side whose check failed (fast but wrong is no pass), then its measured rows that no check
    verified: said as unchecked, not passed as 0 wrong."""
    if common.N_WRONG not in run.results.columns:
        return []
    wrong = run.results[pd.to_numeric(run.results[common.N_WRONG], errors="coerce") > 0]
    entries: list[Entry] = [{"row": run.kind.row_label(row), "verdict": WRONG,
                "why": f"n_wrong {int(row['n_wrong'])} in the new run"} for _, row in wrong.iterrows()]
    unchecked_rows = run.results[run.kind.unchecked(run.results)]
    # once a row, however many launches of a run set lack its check
    labels = dict.fromkeys(run.kind.row_label(row) for _, row in unchecked_rows.iterrows())
    return entries + [{"row": label, "verdict": UNCHECKED, "why": UNCHECKED_WHY} for label in labels]
