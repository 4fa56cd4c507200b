"""Run a suite into one run folder: results/<run-id>/ holds meta.json, suite.toml and one folder per bench, each
an ordinary run folder of its bench kind. How the benches launch is the session's (commbench/execution/session.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

from commbench import runinfo, store
from commbench.errors import CommbenchError
from commbench.execution import session
from commbench.runs import Outcome, read_outcome
from commbench.suite.load import Suite, SuiteBench

if TYPE_CHECKING:
    from commbench.machine import Machine

SUITE_FILE = "suite.toml"
NOT_RUN = "not run: an earlier bench of the suite failed"


@dataclass(frozen=True)
class SuiteOutcome:
    run_dir: Path | None
    """None on ranks other than 0 inside a job: rank 0 reports for everyone."""
    ok: bool
    """Whether every bench completed; on ranks other than 0, session's Ran (as truthy; other_rank_exit reads it)."""
    benches: list[tuple[SuiteBench, Outcome]]


def run_suite(suite: Suite, machine: Machine, *, out: Path, run_id: str | None, into: Path | None, argv: list[str],
              quiet: bool) -> SuiteOutcome:
    """into: an existing run folder to fill (made by `commbench slurm submit`, which already wrote its meta.json)."""
    writes = not machine.in_job or machine.rank == 0
    with session.stop_window(machine) as stop:
        suite_dir = _prepare(suite, out=out, run_id=run_id, into=into, argv=argv) if writes else None
        if suite_dir:
            stop.where = session.stopped_note(suite_dir)
        bench_dirs = [suite_dir / bench.name if suite_dir else None for bench in suite.benches]
        with session.output_kept(suite_dir):
            ok = session.run_benches([bench.bench for bench in suite.benches], bench_dirs, machine, quiet=quiet)
            if suite_dir is None:
                return SuiteOutcome(None, cast(bool, ok), [])  # the Ran itself: other_rank_exit reads .problems
            return _finish(suite, suite_dir)


def _prepare(suite: Suite, *, out: Path, run_id: str | None, into: Path | None, argv: list[str]) -> Path:
    """The suite's folder and meta.json, and every bench's folder, spec.json and meta.json (status running) before
    the first rank starts."""
    suite_dir = Path(into) if into else store.create_run_dir(out, run_id)
    with session.created(suite_dir, remove=not into):  # a folder Slurm's submit made stays: its job.sbatch is in it
        (suite_dir / SUITE_FILE).write_text(suite.text, encoding="utf-8")
        earlier = store.read_meta(suite_dir) if (suite_dir / store.META_FILE).exists() else {}
        store.write_meta(suite_dir, {
            **earlier, **runinfo.launch_meta(argv, suite_dir.name), "kind": store.SUITE_KIND,
            "suite": earlier.get("suite", str(suite.path)),  # a Slurm job runs the copy; meta names the original
            "description": suite.description,
            "benches": [{"name": bench.name, "kind": bench.command, "bench_kind": bench.bench.kind.name}
                        for bench in suite.benches]})
        for bench in suite.benches:
            bench_dir = suite_dir / bench.name
            try:
                bench_dir.mkdir()
            except FileExistsError:  # e.g. a job that Slurm restarted into the same folder
                raise CommbenchError(f"{suite_dir} already holds bench {bench.name}: a run folder is filled once; "
                                     "run the suite again into a new one") from None
            session.prepare_run_dir(bench.bench, bench_dir, argv=argv, suite_run=suite_dir.name)
    return suite_dir


def _finish(suite: Suite, suite_dir: Path) -> SuiteOutcome:
    """Mark benches that never ran, and make the suite's meta.json say how the whole ended."""
    benches: list[tuple[SuiteBench, Outcome]] = []
    failures: list[str] = []
    for bench in suite.benches:
        bench_dir = suite_dir / bench.name
        if store.read_meta(bench_dir).get("status") == store.STATUS_RUNNING:  # no rank got to say how it ended
            reason = NOT_RUN if failures else "the ranks exited before this bench finished (see launch.log)"
            store.update_meta(bench_dir, status=store.STATUS_FAILED, reason=reason, end_time=runinfo.utc_now())
        outcome = read_outcome(bench.bench.kind, bench_dir)
        benches.append((bench, outcome))
        if outcome.status != store.STATUS_COMPLETE and not failures:
            failures.append(f"bench {bench.name}: {outcome.reason}")
    status = store.STATUS_FAILED if failures else store.STATUS_COMPLETE
    store.update_meta(suite_dir, status=status, reason=failures[0] if failures else None, end_time=runinfo.utc_now())
    return SuiteOutcome(suite_dir, not failures, benches)
