"""One sweep from start to verdict: make results/<run-id>/, run the ranks (launched or in place), record the end.

Collective sweeps and training sweeps go through the same path; a Job says which worker runs the ranks.
"""

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd

from commbench import launch, runinfo, store
from commbench.progress import RowCounter, SweepProgress


@dataclass(frozen=True)
class Job:
    spec: object
    """SweepSpec or TrainSpec: to_json(), nproc, timeout_s."""
    points: list
    """What the progress bar counts: one per row, each with a label()."""
    worker_module: str
    """Run by torchrun on every rank with --run-dir."""
    run_ranks: Callable
    """The same worker called in place: (spec, run_dir=, run_id=, collective_timeout_s=, on_point=)."""
    process_per_point: bool = False
    """Launch the ranks once per point (--only INDEX) instead of once per sweep."""


@dataclass(frozen=True)
class SweepOutcome:
    run_dir: Path | None  # None on ranks other than 0 of an in-place job: they write nothing
    status: str
    reason: str | None
    results: pd.DataFrame | None
    teardown: str | None = None
    """How ranks failed after the run had stored and checked everything (the run is still complete)."""

    @property
    def n_wrong(self) -> int:
        if self.results is None or self.results.empty:
            return 0
        return int(self.results["n_wrong"].fillna(0).sum())


def prepare_run_dir(spec, run_dir: Path, *, argv: list[str], **meta) -> Path:
    """Write what the ranks will run (spec.json) and the launch facts (meta.json) into an existing run folder."""
    (run_dir / store.SPEC_FILE).write_text(spec.to_json() + "\n", encoding="utf-8")
    # a suite's bench is named suite-run/bench in its rows, so rows of several runs stay apart when concatenated
    run_id = f"{meta['suite_run']}/{run_dir.name}" if "suite_run" in meta else run_dir.name
    store.write_meta(run_dir, {**runinfo.launch_meta(argv, run_id), **meta})
    return run_dir


def launched_sweep(job: Job, *, out: Path, run_id: str | None, argv: list[str], quiet: bool) -> SweepOutcome:
    """Start torchrun for the whole sweep (or once per point) and watch it."""
    run_dir = prepare_run_dir(job.spec, store.create_run_dir(out, run_id), argv=argv)
    return launch_into(job, run_dir, quiet=quiet)


def launch_into(job: Job, run_dir: Path, *, quiet: bool) -> SweepOutcome:
    """Run a job into its prepared run folder: one torchrun (or one per point) with --run-dir."""
    program = ["--module", job.worker_module, "--run-dir", str(run_dir)]
    results = run_dir / store.RESULTS_FILE
    if job.process_per_point:
        commands = [launch.torchrun_command(nproc=job.spec.nproc, program=[*program, "--only", str(point.index)])
                    for point in job.points]

        def stored(index: int) -> bool:  # the launch of configuration `index` wrote its row
            return RowCounter(results)() > index
    else:
        commands, stored = [launch.torchrun_command(nproc=job.spec.nproc, program=program)], None
    outcomes = watch_launches(commands, points=job.points, count_rows=RowCounter(results),
                              log_path=run_dir / store.LAUNCH_LOG, timeout_s=job.spec.timeout_s, quiet=quiet,
                              stored=stored)
    record_outcome(run_dir, outcomes, job.spec.timeout_s)
    return read_outcome(run_dir)


def watch_launches(commands: list[list[str]], *, points: list, count_rows: Callable[[], int], log_path: Path,
                   timeout_s: float, quiet: bool,
                   stored: Callable[[int], bool] | None = None) -> list[launch.LaunchOutcome]:
    """Run the commands one after another until one fails; the progress bar follows the rows rank 0 appends, and a
    launch that adds no row for timeout_s is stopped. A launch that failed after its work was stored (stored(index):
    its row is on disk) does not stop the next: its ranks broke on the way out, after every check."""
    outcomes = []
    with SweepProgress(points, enabled=not quiet) as bar:
        def progress() -> int:
            done = count_rows()
            bar.show(done)
            return done

        for index, command in enumerate(commands):
            outcome = launch.run_watched(command, log_path=log_path, timeout_s=timeout_s, progress=progress)
            outcomes.append(outcome)
            if not outcome.ok and (outcome.interrupted or stored is None or not stored(index)):
                break
    return outcomes


def record_outcome(run_dir: Path, outcomes: list[launch.LaunchOutcome], timeout_s: float,
                   log_path: Path | None = None) -> None:
    """Make meta.json tell the truth once the ranks are gone: complete only if rank 0 said so after storing every
    row (each checked on all ranks). A launch that failed after that (seen: a rank aborting in gloo's teardown,
    "terminate called without an active exception") is recorded as `teardown`, and the run stays complete."""
    meta = store.read_meta(run_dir)
    log_path = log_path or run_dir / store.LAUNCH_LOG
    failed = [outcome for outcome in outcomes if not outcome.ok]
    if meta.get("status") == store.STATUS_COMPLETE:
        if failed:
            causes = "; ".join(_failure_cause(outcome, timeout_s, log_path) for outcome in failed)
            store.update_meta(run_dir, teardown=f"{causes} after its rows were stored (see {log_path})")
        return
    cause = _failure_cause(failed[-1], timeout_s, log_path) if failed else \
        "the ranks exited without finishing the sweep"
    reasons = [cause, meta.get("reason"), f"see {log_path}"]
    store.update_meta(run_dir, status=store.STATUS_FAILED, reason="; ".join(r for r in reasons if r),
                      end_time=runinfo.utc_now())


def _failure_cause(outcome: launch.LaunchOutcome, timeout_s: float, log_path: Path) -> str:
    if outcome.stalled_s is not None:
        return (f"no point finished for {outcome.stalled_s:.0f} s (--timeout {timeout_s:g}): a rank hung or is too "
                "slow; all ranks were stopped")
    if outcome.interrupted:
        return "interrupted (Ctrl-C); all ranks were stopped"
    log_text = log_path.read_text(encoding="utf-8", errors="replace") if log_path.exists() else ""
    return launch.failed_rank_summary(log_text) or f"torchrun exited with code {outcome.returncode}"


def in_place_sweep(job: Job, *, out: Path, run_id: str | None, argv: list[str], quiet: bool,
                   run_dir: Path | None = None) -> SweepOutcome:
    """Run as one rank of the job commbench was started in (torchrun or srun); rank 0 writes and shows progress.
    Rank 0 makes results/<run-id>/, or writes into run_dir when one is prepared already (a bench of a suite)."""
    spec = job.spec
    rank = int(os.environ["RANK"])
    if rank != 0:
        run_dir = None
    elif run_dir is None:
        run_dir = prepare_run_dir(spec, store.create_run_dir(out, run_id), argv=argv)
    with SweepProgress(job.points, enabled=rank == 0 and not quiet) as bar:
        done = 0

        def on_point(point, row) -> None:
            nonlocal done
            done += 1
            bar.show(done)

        try:
            job.run_ranks(spec, run_dir=run_dir, run_id=store.run_id_of(run_dir) if run_dir else "", on_point=on_point,
                      collective_timeout_s=spec.timeout_s)
        except Exception as error:
            if run_dir is None:
                return SweepOutcome(None, store.STATUS_FAILED, f"rank {rank}: {type(error).__name__}: {error}", None)
    return read_outcome(run_dir) if run_dir else SweepOutcome(None, store.STATUS_COMPLETE, None, None)


def read_outcome(run_dir: Path) -> SweepOutcome:
    meta = store.read_meta(run_dir)
    results = store.read_results(run_dir) if (run_dir / store.RESULTS_FILE).exists() else None
    return SweepOutcome(run_dir, meta.get("status"), meta.get("reason"), results, meta.get("teardown"))
