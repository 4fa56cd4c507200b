"""The selftest's paths and their verdicts, each read from what its sub-run wrote (rows, samples, traces, files) and
how the sub-run ended: pass, FAIL (with what failed) or n/a (with why)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from commbench import store
from commbench.bench_kind import BenchKind
from commbench.benches import kind_for_command
from commbench.errors import CommbenchError
from commbench.names import CUDA, MEAN, PER_ITERATION, RANK_AVERAGE_TEXT, TIMINGS
from commbench.schema import common
from commbench.schema.column import is_empty
from commbench.selftest.plan import ITERS, Plan
from commbench.selftest.steps import StepRun
from commbench.sweep.spec import Point as SweepPoint
from commbench.units import format_bytes

if TYPE_CHECKING:
    import pandas as pd

PASS, FAIL, NA = "pass", "FAIL", "n/a"


@dataclass(frozen=True)
class Check:
    """One row of the table: a path this machine may run, and its verdict."""

    path: str
    result: str
    detail: str

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class SubRun:
    """A bench sub-run as it ended: the step (None when it did not run), its meta.json and rows (None when absent)."""

    step: StepRun | None
    meta: dict | None
    results: pd.DataFrame | None
    """The rows."""
    run_dir: Path

    @classmethod
    def read(cls, step: StepRun | None, run_dir: Path, kind: BenchKind) -> SubRun:
        meta = results = None
        if (run_dir / store.META_FILE).exists():
            try:
                meta = store.read_meta(run_dir)
                if (run_dir / store.RESULTS_FILE).exists():
                    results = store.read_results(run_dir, kind)
            except CommbenchError as error:  # a torn or foreign file: the path fails, the selftest goes on
                meta, results = {"status": "unreadable", "reason": str(error)}, None
        return cls(step, meta, results, run_dir)

    @property
    def rows(self) -> int:
        return 0 if self.results is None else len(self.results)

    def failure(self, name: str, limit_s: float) -> str | None:
        """Why nothing of this sub-run can be vouched for, or None when it ended as a complete run. A run that ended
        with wrong results (exit 1) is complete: its wrong rows fail only the paths they belong to."""
        step = self.step
        if step is None:
            return f"{name} did not run"
        if step.timed_out:
            return f"{name} {step.how_it_ended(limit_s)}"
        if self.meta is None:
            said = step.last_error()
            return f"{name} did not start: {said or step.how_it_ended(limit_s)}"
        if self.meta.get("status") != store.STATUS_COMPLETE:
            return f"{name} {self.meta.get('status')}: {self.meta.get('reason') or step.how_it_ended(limit_s)}"
        if step.returncode not in (0, 1) or (step.returncode == 1 and not self.wrong_total()):
            return f"{name} {step.how_it_ended(limit_s)}: {step.last_error()}"
        return None

    def wrong_total(self) -> int:
        if self.results is None or self.results.empty:
            return 0
        return int(self.results[common.N_WRONG].fillna(0).sum())


def not_selected(plan: Plan) -> str:
    return f"not selected (--only {','.join(plan.only)})"


def _points(plan: Plan, step: str) -> list:
    """The points of a bench step's command (always resolved: plan._command)."""
    bench = plan.commands[step].bench
    assert bench is not None
    return bench.points


# --- the collective sweep: one launch, many paths -----------------------------------------------------------------

def _inplace(value: object) -> bool:
    return str(value) in ("True", "true", "1")


RowKey = tuple[str, str, bool, int, str]
"""A sweep row's (collective, impl, in place, size in bytes, timing)."""


def _key(collective: object, impl: object, inplace: object, size_bytes: object, timing: object) -> RowKey:
    return (str(collective), str(impl), _inplace(inplace), int(str(size_bytes)), str(timing))


def _label(key: RowKey) -> str:
    collective, impl, inplace, size, timing = key
    return f"{collective} {impl} {'in' if inplace else 'out'} {format_bytes(size)} {timing}"


def _judge_rows(expected: set[RowKey], sweep: SubRun, keys_of_rows: list[RowKey], failure: str | None,
                describe: str) -> tuple[str, str]:
    """pass when every expected point has its row and every row's check found 0 wrong elements."""
    if failure:
        return FAIL, failure
    found = {key: row for key, row in zip(keys_of_rows, sweep.results.itertuples()) if key in expected} \
        if sweep.results is not None else {}
    missing = sorted(expected - set(found))
    if missing:
        return FAIL, f"{len(missing)} of {len(expected)} rows missing, e.g. {_label(missing[0])}"
    unchecked = [key for key, row in found.items() if is_empty(row.n_wrong)]
    if unchecked:
        return FAIL, f"{len(unchecked)} row(s) not checked (n_wrong empty), e.g. {_label(unchecked[0])}"
    wrong = {key: _count(row.n_wrong) for key, row in found.items() if _count(row.n_wrong)}
    if wrong:
        first = min(wrong)
        return FAIL, (f"{sum(wrong.values())} wrong element(s) in {len(wrong)} of {len(expected)} rows, e.g. "
                      f"{_label(first)}: {wrong[first]} wrong")
    return PASS, f"{len(expected)} rows ({describe}), 0 wrong"


def _count(value: object) -> int:
    return int(float(str(value)))  # n_wrong reads back from CSV as an int, or a float where a row has none


def sweep_checks(plan: Plan, sweep: SubRun, samples: pd.DataFrame | None = None) -> list[Check]:
    """collective NAME IMPL, timing MODE, placement out|in and nvml sampler, all from the one sweep."""
    selected = "sweep" in plan.selected
    failure = sweep.failure("sweep", plan.timeout_s) if selected else None
    points = plan.sweep.points if plan.sweep else []
    expected_all = {_key(p.collective, p.impl, p.inplace, p.layout.size_bytes, p.timing) for p in points}
    row_keys = [] if sweep.results is None else [
        _key(*values) for values in zip(sweep.results["collective"], sweep.results["impl"], sweep.results["inplace"],
                                        sweep.results[common.SIZE_BYTES], sweep.results["timing"])]
    checks = []

    def judge(path: str, expected: set[RowKey], describe: str, empty_reason: str) -> None:
        if not selected:
            checks.append(Check(path, NA, not_selected(plan)))
        elif not expected:
            checks.append(Check(path, NA, empty_reason))
        else:
            checks.append(Check(path, *_judge_rows(expected, sweep, row_keys, failure, describe)))

    for collective, impl in plan.collective_paths:
        path = f"collective {collective} {impl}"
        reason = plan.not_applicable.get(f"{collective} {impl}")
        if reason:
            checks.append(Check(path, NA, reason))
            continue
        expected = {key for key in expected_all if key[:2] == (collective, impl)}
        judge(path, expected, _shape(expected), "not in the sweep")

    for timing in TIMINGS:
        path = f"timing {timing}"
        expected = {key for key in expected_all if key[4] == timing}
        if not selected or not expected or failure:
            judge(path, expected, "", "not in the sweep")
            continue
        result, detail = _judge_rows(expected, sweep, row_keys, None, "")
        if result == PASS:
            problem, facts = _timing_facts(sweep, timing, expected, samples)
            result, detail = (FAIL, problem) if problem else (PASS, f"{len(expected)} rows, {facts}, 0 wrong")
        checks.append(Check(path, result, detail))

    for name, inplace in (("out", False), ("in", True)):
        expected = {key for key in expected_all if key[2] == inplace}
        collectives = ", ".join(dict.fromkeys(key[0] for key in sorted(expected, key=_order(points))))
        judge(f"placement {name}", expected, collectives,
              f"no collective that runs here has {'in' if inplace else 'out'}-of-place buffers "
              f"({', '.join(dict.fromkeys(p.collective for p in points))})")

    checks.append(_nvml_check(plan, sweep, failure))
    return checks


def _order(points: Sequence[SweepPoint]) -> Callable[[RowKey], int]:
    index: dict[str, int] = {}
    for point in points:
        index.setdefault(point.collective, point.index)
    return lambda key: index.get(key[0], 0)


def _shape(expected: set[RowKey]) -> str:
    sizes = " and ".join(format_bytes(size) for size in sorted({key[3] for key in expected}))
    placements = "+".join(name for name, inplace in (("out", False), ("in", True))
                          if inplace in {key[2] for key in expected})
    timings = " and ".join(t for t in TIMINGS if t in {key[4] for key in expected})
    return f"{sizes} × {placements} × {timings}"


def _timing_facts(sweep: SubRun, timing: str, expected: set[RowKey], samples: pd.DataFrame | None
                  ) -> tuple[str | None, str]:
    """(what is wrong, or None; what was seen): every row of the mode has its timed samples on disk and a positive
    median time."""
    assert sweep.results is not None  # called once _judge_rows found every expected row in them
    rows = sweep.results[sweep.results["timing"] == timing]
    problems = []
    if (rows["iters"] != ITERS).any():
        problems.append(f"iters other than {ITERS}")
    if not (rows[common.TIME_US_P50] > 0).all():
        problems.append("a median time of 0 or empty")
    per_row = {}
    if samples is not None and not samples.empty:
        mode = samples[samples["timing"] == timing]
        for values, group in mode.groupby(["collective", "impl", "inplace", common.SIZE_BYTES, "timing"]):
            per_row[_key(*values)] = len(group)
    short = [key for key in sorted(expected) if per_row.get(key, 0) != ITERS]
    if short:
        problems.append(f"{len(short)} row(s) without their {ITERS} samples in samples.csv, e.g. {_label(short[0])}")
    calls = rows["calls_per_sample"]
    spread = f"{int(calls.min())}" if calls.min() == calls.max() else f"{int(calls.min())}–{int(calls.max())}"
    mean = "" if timing == PER_ITERATION else f", per-call time the {RANK_AVERAGE_TEXT[MEAN]}"
    return "; ".join(problems) or None, f"{ITERS} samples each, {spread} call(s) per sample{mean}"


def _nvml_check(plan: Plan, sweep: SubRun, failure: str | None) -> Check:
    path = "nvml sampler"
    if plan.device != CUDA:
        return Check(path, NA, "no GPU visible" if not plan.gpus else
                     "CPU tensors (--device cpu): NVML samples the GPUs of GPU runs")
    if "sweep" not in plan.selected:
        return Check(path, NA, not_selected(plan))
    if failure:
        return Check(path, FAIL, failure)
    assert sweep.meta is not None  # the sweep ran and was selected: failure() is None only with its meta.json
    sampling = str(sweep.meta.get("gpu_sampling") or "")
    if not sampling.startswith("NVML"):
        return Check(path, FAIL, f"a GPU is visible but the sweep says {sampling or 'nothing about sampling'!r}")
    rows = sweep.results
    empty = [column for column in ("gpu_mem_used_peak_bytes", "gpu_util_pct_mean")
             if rows is None or rows.empty or rows[column].isna().any()]
    if empty or rows is None:  # no rows: every column is empty
        return Check(path, FAIL, f"{', '.join(empty)} empty in some rows")
    samples_path = sweep.run_dir / store.GPU_SAMPLES_FILE
    lines = samples_path.read_text(encoding="utf-8").count("\n") - 1 if samples_path.exists() else 0
    if lines < 1:
        return Check(path, FAIL, f"no samples in {samples_path}")
    power = rows["power_w_mean"].dropna()
    power_text = f", power {power.mean():.0f} W mean" if not power.empty else ""
    return Check(path, PASS, f"GPU memory and utilisation in all {len(rows)} rows, {lines} samples "
                             f"({sampling}){power_text}")


# --- the profiled point and its trace analysis --------------------------------------------------------------------

def profile_check(plan: Plan, profile: SubRun, analyze: StepRun | None) -> Check:
    path = "profile + trace analyze"
    if "profile" not in plan.selected:
        return Check(path, NA, not_selected(plan))
    failure = profile.failure("profiled sweep", plan.timeout_s)
    if failure:
        return Check(path, FAIL, failure)
    if profile.wrong_total() or profile.rows != len(_points(plan, "profile")):
        return Check(path, FAIL, f"profiled sweep: {profile.rows} row(s), {profile.wrong_total()} wrong")
    if analyze is None:
        return Check(path, FAIL, f"needs traces: none in {profile.run_dir / 'traces'}")
    if not analyze.ok:
        return Check(path, FAIL, f"trace analyze {analyze.how_it_ended(plan.timeout_s)}: {analyze.last_error()}")
    assert analyze.stdout is not None  # trace analyze always runs with its stdout kept apart (run_selftest)
    try:
        report = json.loads(analyze.stdout.read_text(encoding="utf-8"))
        traces = report["traces"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        return Check(path, FAIL, f"trace analyze printed no JSON report ({type(error).__name__})")
    if len(traces) != plan.nproc:
        return Check(path, FAIL, f"{len(traces)} trace(s) analysed, expected one per rank ({plan.nproc})")
    point = (f"{len(traces)} trace{'s' * (len(traces) != 1)} (1 {plan.profile.collective} point × {plan.nproc} "
             f"rank{'s' * (plan.nproc != 1)})")
    if plan.profile.no_communication:
        return _judged_without_communication(plan, profile, traces, point)
    silent = [trace["rank"] for trace in traces if not trace["comm_us"] or not trace["collectives"]]
    if silent:
        return Check(path, FAIL, f"no communication found in the trace of rank(s) {silent}")
    kinds = sorted({kind["kind"] for trace in traces for kind in trace["collectives"]})
    comm = max(trace["comm_us"] for trace in traces)
    return Check(path, PASS, f"{point}: {', '.join(kinds)}, comm up to {comm:.0f} us")


def _judged_without_communication(plan: Plan, profile: SubRun, traces: list[dict], point: str) -> Check:
    """A target whose collective communicates nothing (NCCL at world size 1, plan.profile_point): the profiled
    point's output must have been checked (the device copy is the work), and every trace must be a GPU trace."""
    path = "profile + trace analyze"
    assert profile.results is not None  # profile_check found its one row
    if profile.results[common.N_WRONG].isna().any():
        return Check(path, FAIL, "profiled sweep: its row was not checked (n_wrong empty)")
    not_gpu = [trace["rank"] for trace in traces if trace.get("device") != "gpu"]
    if not_gpu:
        return Check(path, FAIL, f"no GPU activity in the trace of rank(s) {not_gpu}")
    return Check(path, PASS, f"{point}, each a GPU trace, 0 wrong; no communication to find: "
                             f"{plan.profile.no_communication}")


# --- the training sweeps ------------------------------------------------------------------------------------------

def kind_check(plan: Plan, step: str, run: SubRun) -> Check:
    """A bench kind's own step (BenchKind.selftest_values): ran, a row per point, none wrong, and what the kind says
    its rows must show."""
    path = f"{step} step"
    if step in plan.not_applicable:
        return Check(path, NA, plan.not_applicable[step])
    if step not in plan.selected:
        return Check(path, NA, not_selected(plan))
    failure = run.failure(step, plan.timeout_s)
    if failure:
        return Check(path, FAIL, failure)
    kind = kind_for_command(step)
    expected = len(_points(plan, step))
    rows = run.results
    if run.rows != expected:
        return Check(path, FAIL, f"{run.rows} of {expected} {kind.point_noun} rows")
    assert rows is not None  # as many rows as points, and a bench has at least one (validate)
    if kind.n_wrong(rows):
        return Check(path, FAIL, kind.wrong_message.format(n=kind.n_wrong(rows)))
    passed, detail = kind.selftest_verdict(rows)
    return Check(path, PASS if passed else FAIL, detail)


# --- report and compare on the result -----------------------------------------------------------------------------

def _ended_early(plan: Plan, path: str, step: StepRun | None, needs: str | None) -> Check | None:
    """The check of a step that was not selected, did not run or failed; None when it ran to the end."""
    if path not in plan.selected:
        return Check(path, NA, not_selected(plan))
    if step is None:
        return Check(path, FAIL, needs or "did not run")
    if not step.ok:
        return Check(path, FAIL, f"{path} {step.how_it_ended(plan.timeout_s)}: {step.last_error()}")
    return None


def report_check(plan: Plan, step: StepRun | None, report_dir: Path, needs: str | None, runs: list[str]) -> Check:
    path = "report"
    if (ended := _ended_early(plan, path, step, needs)) is not None:
        return ended
    assert step is not None  # _ended_early judged a step that did not run
    html = report_dir / "report.html"
    if not html.exists() or html.stat().st_size == 0:
        return Check(path, FAIL, f"{html} missing or empty")
    output = step.log.read_text(encoding="utf-8", errors="replace").splitlines()
    drawn = sum(line.startswith("drew ") for line in output)
    skipped = sum(line.startswith("skipped ") for line in output)
    if not drawn:
        return Check(path, FAIL, "report.html has no plot")
    return Check(path, PASS, f"report.html over {', '.join(runs)}: {drawn} plots drawn, {skipped} skipped")


def compare_check(plan: Plan, step: StepRun | None, needs: str | None) -> Check:
    path = "compare"
    if (ended := _ended_early(plan, path, step, needs)) is not None:
        return ended
    assert step is not None  # _ended_early judged a step that did not run
    output = step.log.read_text(encoding="utf-8", errors="replace").splitlines()
    summary = next((line[2:].split(" (", 1)[0] for line in reversed(output) if line.startswith("# ")), "")
    if not summary:
        return Check(path, FAIL, "compare printed no summary")
    return Check(path, PASS, f"sweep against itself: {summary}, exit 0")
