"""Run a suite into one run folder: results/<run-id>/ holds meta.json, suite.toml and one folder per bench.

Launched by commbench, consecutive benches share one torchrun (and one process group); a bench that wants a process
per configuration (training on CPU, --isolation process) gets its own launches. Inside torchrun or srun every bench
runs in place, in the job's one process group.
"""

import os
from dataclasses import dataclass
from pathlib import Path

from commbench import launch, runinfo, store
from commbench.distributed import shared_process_group
from commbench.errors import CommbenchError
from commbench.progress import RowCounter
from commbench.session import (
    SweepOutcome,
    in_place_sweep,
    launch_into,
    prepare_run_dir,
    read_outcome,
    record_outcome,
    watch_launches,
)
from commbench.suite.load import Suite, SuiteBench

SUITE_FILE = "suite.toml"
SUITE_KIND = "suite"
NOT_RUN = "not run: an earlier bench of the suite failed"


@dataclass(frozen=True)
class SuiteOutcome:
    run_dir: Path | None  # None on ranks other than 0 inside a job
    status: str
    reason: str | None
    benches: list[tuple[SuiteBench, SweepOutcome]]


def run_suite(suite: Suite, *, out: Path, run_id: str | None, into: Path | None, argv: list[str],
              quiet: bool) -> SuiteOutcome:
    """into: an existing run folder to fill (made by `commbench slurm submit`, which already wrote its meta.json)."""
    in_job = launch.world_size_in_job() is not None
    writes = not in_job or int(os.environ["RANK"]) == 0
    suite_dir = _prepare_suite_dir(suite, out=out, run_id=run_id, into=into, argv=argv) if writes else None
    if in_job:
        return _run_in_place(suite, suite_dir, argv=argv, quiet=quiet)
    return _run_launched(suite, suite_dir, argv=argv, quiet=quiet)


def _prepare_suite_dir(suite: Suite, *, out: Path, run_id: str | None, into: Path | None, argv: list[str]) -> Path:
    suite_dir = Path(into) if into else store.create_run_dir(out, run_id)
    (suite_dir / SUITE_FILE).write_text(suite.text, encoding="utf-8")
    earlier = store.read_meta(suite_dir) if (suite_dir / store.META_FILE).exists() else {}
    store.write_meta(suite_dir, {
        **earlier, **runinfo.launch_meta(argv, suite_dir.name), "kind": SUITE_KIND,
        "suite": earlier.get("suite", str(suite.path)),  # a Slurm job runs the copy; meta names the original
        "description": suite.description,
        "benches": [{"name": bench.name, "kind": bench.kind, "worker_module": bench.bench.job.worker_module}
                    for bench in suite.benches]})
    return suite_dir


def _prepare_benches(suite: Suite, suite_dir: Path, argv: list[str]) -> None:
    """Every bench's folder, spec.json and meta.json (status running) before the first rank starts."""
    for bench in suite.benches:
        bench_dir = suite_dir / bench.name
        try:
            bench_dir.mkdir()
        except FileExistsError:  # e.g. a job that Slurm restarted into the same folder
            raise CommbenchError(f"{suite_dir} already holds bench {bench.name}: a run folder is filled once; run "
                                 "the suite again into a new one") from None
        prepare_run_dir(bench.bench.job.spec, bench_dir, argv=argv, suite_run=suite_dir.name)


def _run_launched(suite: Suite, suite_dir: Path, *, argv: list[str], quiet: bool) -> SuiteOutcome:
    _prepare_benches(suite, suite_dir, argv)
    for group in launch_groups(suite.benches):
        if not _launch_group(group, suite_dir, quiet=quiet):
            break
    return _finish(suite, suite_dir)


def launch_groups(benches: list[SuiteBench]) -> list[list[SuiteBench]]:
    """Consecutive benches that can share one launch; a bench with a process per configuration stands alone."""
    groups: list[list[SuiteBench]] = []
    for bench in benches:
        alone = bench.bench.job.process_per_point
        if alone or not groups or groups[-1][0].bench.job.process_per_point:
            groups.append([bench])
        else:
            groups[-1].append(bench)
    return groups


def _launch_group(group: list[SuiteBench], suite_dir: Path, *, quiet: bool) -> bool:
    """Run the group's benches in one torchrun; True when every one of them completed."""
    jobs = [bench.bench.job for bench in group]
    dirs = [suite_dir / bench.name for bench in group]
    if jobs[0].process_per_point:
        return launch_into(jobs[0], dirs[0], quiet=quiet).status == store.STATUS_COMPLETE
    counters = [RowCounter(bench_dir / store.RESULTS_FILE) for bench_dir in dirs]
    timeout_s = max(job.spec.timeout_s for job in jobs)
    command = launch.torchrun_command(nproc=jobs[0].spec.nproc, program=[
        "--module", "commbench.suite.worker", "--suite-dir", str(suite_dir), *(bench.name for bench in group)])
    log_path = dirs[0] / store.LAUNCH_LOG
    outcomes = watch_launches([command], points=[point for job in jobs for point in job.points],
                              count_rows=lambda: sum(count() for count in counters), log_path=log_path,
                              timeout_s=timeout_s, quiet=quiet)
    for bench_dir in dirs:
        if store.read_meta(bench_dir).get("status") != store.STATUS_COMPLETE:
            record_outcome(bench_dir, outcomes, timeout_s, log_path=log_path)  # the bench that was running
            return False
    # every bench stored its rows and said complete: ranks failing on the way out only get noted, with the last
    record_outcome(dirs[-1], outcomes, timeout_s, log_path=log_path)
    return True


def _run_in_place(suite: Suite, suite_dir: Path | None, *, argv: list[str], quiet: bool) -> SuiteOutcome:
    specs = [bench.bench.job.spec for bench in suite.benches]
    timeout_s = max(spec.timeout_s for spec in specs)
    if suite_dir is not None:
        _prepare_benches(suite, suite_dir, argv)
    with shared_process_group(backend=specs[0].backend, device_type=specs[0].device, timeout_s=timeout_s) as group:
        for bench in suite.benches:
            bench_dir = suite_dir / bench.name if suite_dir is not None else None
            outcome = in_place_sweep(bench.bench.job, out=suite_dir, run_id=None, argv=argv, quiet=quiet,
                                     run_dir=bench_dir)
            if outcome.status != store.STATUS_COMPLETE:
                group.clean = False
                break
    if suite_dir is None:
        return SuiteOutcome(None, outcome.status, outcome.reason, [])
    return _finish(suite, suite_dir)


def _finish(suite: Suite, suite_dir: Path) -> SuiteOutcome:
    """Mark benches that never ran, and make the suite's meta.json say how the whole ended."""
    benches, failures = [], []
    for bench in suite.benches:
        bench_dir = suite_dir / bench.name
        if store.read_meta(bench_dir).get("status") == store.STATUS_RUNNING:  # no rank got to say how it ended
            reason = NOT_RUN if failures else "the ranks exited before this bench finished (see launch.log)"
            store.update_meta(bench_dir, status=store.STATUS_FAILED, reason=reason, end_time=runinfo.utc_now())
        outcome = read_outcome(bench_dir)
        benches.append((bench, outcome))
        if outcome.status != store.STATUS_COMPLETE and not failures:
            failures.append(f"bench {bench.name}: {outcome.reason}")
    status = store.STATUS_FAILED if failures else store.STATUS_COMPLETE
    reason = failures[0] if failures else None
    store.update_meta(suite_dir, status=status, reason=reason, end_time=runinfo.utc_now())
    return SuiteOutcome(suite_dir, status, reason, benches)

