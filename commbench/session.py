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

    @property
    def n_wrong(self) -> int:
        if self.results is None or self.results.empty:
            return 0
        return int(self.results["n_wrong"].fillna(0).sum())


def _prepare(spec, *, out: Path, run_id: str | None, argv: list[str]) -> Path:
    run_dir = store.create_run_dir(out, run_id)
    (run_dir / store.SPEC_FILE).write_text(spec.to_json() + "\n", encoding="utf-8")
    store.write_meta(run_dir, runinfo.launch_meta(argv, run_dir.name))
    return run_dir


def launched_sweep(job: Job, *, out: Path, run_id: str | None, argv: list[str], quiet: bool) -> SweepOutcome:
    """Start torchrun for the whole sweep (or once per point) and watch it; the progress bar follows the rows rank 0
    appends."""
    spec = job.spec
    run_dir = _prepare(spec, out=out, run_id=run_id, argv=argv)
    program = ["--module", job.worker_module, "--run-dir", str(run_dir)]
    commands = [launch.torchrun_command(nproc=spec.nproc, program=[*program, "--only", str(point.index)])
                for point in job.points] if job.process_per_point else [launch.torchrun_command(nproc=spec.nproc,
                                                                                              program=program)]
    count_rows = RowCounter(run_dir / store.RESULTS_FILE)
    with SweepProgress(job.points, enabled=not quiet) as bar:
        def progress() -> int:
            done = count_rows()
            bar.show(done)
            return done

        for command in commands:
            outcome = launch.run_watched(command, log_path=run_dir / store.LAUNCH_LOG, timeout_s=spec.timeout_s,
                                         progress=progress)
            if not outcome.ok:
                break
    _record_outcome(run_dir, outcome, spec)
    return _read_outcome(run_dir)


def _record_outcome(run_dir: Path, outcome: launch.LaunchOutcome, spec) -> None:
    """Make meta.json tell the truth once the ranks are gone: complete only if torchrun and rank 0 both say so."""
    meta = store.read_meta(run_dir)
    if outcome.ok and meta.get("status") == store.STATUS_COMPLETE:
        return
    log_path = run_dir / store.LAUNCH_LOG
    if outcome.stalled_s is not None:
        cause = (f"no point finished for {outcome.stalled_s:.0f} s (--timeout {spec.timeout_s:g}): a rank hung or "
                 "is too slow; all ranks were stopped")
    elif outcome.interrupted:
        cause = "interrupted (Ctrl-C); all ranks were stopped"
    elif outcome.returncode != 0:
        log_text = log_path.read_text(encoding="utf-8", errors="replace") if log_path.exists() else ""
        cause = launch.failed_rank_summary(log_text) or f"torchrun exited with code {outcome.returncode}"
    else:
        cause = "the ranks exited without finishing the sweep"
    reasons = [cause, meta.get("reason"), f"see {log_path}"]
    store.update_meta(run_dir, status=store.STATUS_FAILED, reason="; ".join(r for r in reasons if r),
                      end_time=runinfo.utc_now())


def in_place_sweep(job: Job, *, out: Path, run_id: str | None, argv: list[str], quiet: bool) -> SweepOutcome:
    """Run as one rank of the job commbench was started in (torchrun or srun); rank 0 writes and shows progress."""
    spec = job.spec
    rank = int(os.environ["RANK"])
    run_dir = _prepare(spec, out=out, run_id=run_id, argv=argv) if rank == 0 else None
    with SweepProgress(job.points, enabled=rank == 0 and not quiet) as bar:
        done = 0

        def on_point(point, row) -> None:
            nonlocal done
            done += 1
            bar.show(done)

        try:
            job.run_ranks(spec, run_dir=run_dir, run_id=run_dir.name if run_dir else "", on_point=on_point,
                      collective_timeout_s=spec.timeout_s)
        except Exception as error:
            if run_dir is None:
                return SweepOutcome(None, store.STATUS_FAILED, f"rank {rank}: {type(error).__name__}: {error}", None)
    return _read_outcome(run_dir) if run_dir else SweepOutcome(None, store.STATUS_COMPLETE, None, None)


def _read_outcome(run_dir: Path) -> SweepOutcome:
    meta = store.read_meta(run_dir)
    results = store.read_results(run_dir) if (run_dir / store.RESULTS_FILE).exists() else None
    return SweepOutcome(run_dir, meta.get("status"), meta.get("reason"), results)
