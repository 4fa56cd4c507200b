"""`commbench selftest`: every path this machine supports, each step a real `commbench` sub-run into one run folder
(`<run>/sweep`, `<run>/profile`, `<run>/ddp`, ...), each path judged from what its sub-run wrote.

plan.py says what runs (and what does not apply here, with the reason), steps.py runs one sub-run with its time
limit, verdicts.py turns what the sub-runs wrote into the table; this module runs the steps in order, passes on what
a later step needs, and writes selftest.json.
"""

import json
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from commbench import store
from commbench.execution.stopping import Stopped, describe
from commbench.selftest import verdicts
from commbench.selftest.plan import KIND_STEPS, SMALL_BYTES, Plan
from commbench.selftest.steps import StepRunner
from commbench.selftest.verdicts import FAIL, NA, PASS, Check, SubRun

SELFTEST_FILE = "selftest.json"
TRACE_ANALYSIS_FILE = "trace_analysis.json"
COMPARE_FILE = "compare.md"
REPORT_DIR = "report"


@dataclass(frozen=True)
class Selftest:
    run_dir: Path
    checks: list[Check]
    wall_s: float
    document: dict
    """What selftest.json holds (and `--json` prints)."""

    @property
    def ok(self) -> bool:
        return not any(check.result == FAIL for check in self.checks)


def run_selftest(plan: Plan, run_dir: Path, *, argv: list[str], announce: Callable[[str], None]) -> Selftest:
    """Run the selected steps one after another into run_dir; a step that fails or times out fails its paths, and
    the steps after it still run (report and compare need the sweep's rows)."""
    from commbench import runinfo
    from commbench.benches import kind_for_command
    from commbench.benches.collective import KIND as COLLECTIVE_KIND

    start = time.monotonic()
    document = {**runinfo.launch_meta(argv, run_dir.name), "kind": "selftest",
                "target": {"backend": plan.backend, "device": plan.device, "nproc": plan.nproc,
                           "gpus_visible": plan.gpus},
                "sizes_bytes": [SMALL_BYTES, plan.large_bytes], "step_timeout_s": plan.timeout_s,
                "steps_selected": list(plan.selected)}
    _write(run_dir, document)
    runner = StepRunner(run_dir, timeout_s=plan.timeout_s, announce=announce)
    runs = {step: SubRun(None, None, None, run_dir / step) for step in ("sweep", "profile", *KIND_STEPS)}
    analyze = report = compare = None
    try:
        for step, command in plan.commands.items():
            ran = runner.run(step, [*command.args, "--out", str(run_dir), "--run-id", step, "--quiet"])
            runs[step] = SubRun.read(ran, run_dir / step, kind_for_command(command.args[0]))
            traces = run_dir / step / "traces"
            if step == "profile" and traces.is_dir() and any(traces.iterdir()):
                analyze = runner.run("trace-analyze", ["trace", "analyze", str(traces), "--json"],
                                     stdout=run_dir / TRACE_ANALYSIS_FILE)
        sweep = runs["sweep"]
        needs = None if sweep.rows else f"needs the sweep's rows: {sweep.failure('sweep', plan.timeout_s)}"
        reported = [step for step in ("sweep", *KIND_STEPS) if runs[step].rows]
        if "report" in plan.selected and not needs:
            report = runner.run("report", ["report", *(str(runs[step].run_dir) for step in reported),
                                           "--out", str(run_dir / REPORT_DIR)])
        if "compare" in plan.selected and not needs:
            compare = runner.run("compare", ["compare", str(sweep.run_dir), str(sweep.run_dir),
                                             "--markdown", str(run_dir / COMPARE_FILE)])
    except (KeyboardInterrupt, Stopped) as stop:
        signum = stop.signum if isinstance(stop, Stopped) else signal.SIGINT
        document.update(status=store.STATUS_FAILED, reason=f"stopped by {describe(signum)}",
                        end_time=runinfo.utc_now(), steps=[ran.to_json(run_dir) for ran in runner.runs])
        _write(run_dir, document)
        raise

    samples = store.read_samples(sweep.run_dir, COLLECTIVE_KIND) \
        if sweep.results is not None and (sweep.run_dir / store.SAMPLES_FILE).exists() else None
    checks = verdicts.sweep_checks(plan, sweep, samples)
    checks.append(verdicts.profile_check(plan, runs["profile"], analyze))
    checks += [verdicts.kind_check(plan, step, runs[step]) for step in KIND_STEPS]
    checks.append(verdicts.report_check(plan, report, run_dir / REPORT_DIR, needs, reported))
    checks.append(verdicts.compare_check(plan, compare, needs))

    wall_s = time.monotonic() - start
    document.update(status=store.STATUS_COMPLETE, end_time=runinfo.utc_now(),
                    ok=not any(check.result == FAIL for check in checks), wall_s=round(wall_s, 1),
                    run_dir=str(run_dir), counts={result: sum(check.result == result for check in checks)
                                                  for result in (PASS, FAIL, NA)},
                    paths=[check.to_json() for check in checks],
                    steps=[ran.to_json(run_dir) for ran in runner.runs])
    _write(run_dir, document)
    return Selftest(run_dir, checks, wall_s, document)


def _write(run_dir: Path, document: dict) -> None:
    """selftest.json, replaced atomically (a reader never sees half a file)."""
    temporary = run_dir / f".{SELFTEST_FILE}.{os.getpid()}.tmp"
    temporary.write_text(json.dumps(document, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(temporary, run_dir / SELFTEST_FILE)


def format_table(selftest: Selftest) -> str:
    """path, result, detail; then the run folder and the wall time."""
    rows = [("path", "result", "detail"), *((c.path, c.result, c.detail) for c in selftest.checks)]
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    lines = [f"{path:<{widths[0]}}  {result:<{widths[1]}}  {detail}" for path, result, detail in rows]
    counts = selftest.document["counts"]
    lines.append(f"# {counts[PASS]} pass, {counts[FAIL]} FAIL, {counts[NA]} n/a; run folder {selftest.run_dir}, "
                 f"wall time {selftest.wall_s:.0f} s")
    return "\n".join(lines)
