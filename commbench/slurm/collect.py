"""`commbench slurm submit --wait` and `commbench slurm status`: what became of a submitted job. Collecting waits for
the job, records how it ended in meta.json, marks a run its ranks could not finish as failed, and where they finished
it renders the report and lets each bench's rows decide the exit code; the status reads the job's state and the rows
each bench has written. Both return what they found for the command to print."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from commbench import store
from commbench.errors import ExitCode
from commbench.slurm import jobs

REPORT_DIR = "report"


@dataclass(frozen=True)
class Collected:
    """How a waited-for job ended. final None: it was still running at the timeout. problem: how it failed, where
    its run did not complete. Otherwise report_html (the rendered report), and the benches whose check found wrong
    results (name, message)."""

    run_dir: Path
    job_id: str
    log_path: Path
    final: jobs.JobState | None
    problem: str | None = None
    report_html: Path | None = None
    wrong: list[tuple[str, str]] = field(default_factory=list)

    @property
    def ended_late(self) -> bool:
        """The run completed, then the job ended otherwise (e.g. a rank that aborted in teardown after the last
        row)."""
        return self.final is not None and self.problem is None and self.final.state not in (jobs.ENDED_OK, jobs.GONE)

    @property
    def exit_code(self) -> ExitCode:
        if self.final is None or self.problem is not None:
            return ExitCode.RUN_FAILED
        return ExitCode.WRONG_RESULTS if self.wrong else ExitCode.OK


def collect(run_dir: Path, job_id: str, log_path: Path, *, timeout_s: float, poll_s: float,
            on_change: Callable[[jobs.JobState], None]) -> Collected:
    """Wait for the job (on_change(state) at each change of its state). When its ranks finished the suite, the rows
    decide (report; wrong results); otherwise how the job ended, which meta.json then says too."""
    final = jobs.wait(job_id, timeout_s=timeout_s, poll_s=poll_s, on_change=on_change)
    if final is None:
        return Collected(run_dir, job_id, log_path, None)
    store.update_meta(run_dir, slurm_state=final.state, slurm_exit_code=final.exit_code)
    meta = store.read_meta(run_dir)
    if meta.get("status") != store.STATUS_COMPLETE:
        from commbench.slurm import submission

        problem = submission.job_problem(final, meta, run_dir, log_path)
        submission.mark_failed(run_dir, problem, final.state)
        return Collected(run_dir, job_id, log_path, final, problem=problem)
    from commbench.report.render import render

    report = render([run_dir], run_dir / REPORT_DIR)
    return Collected(run_dir, job_id, log_path, final, report_html=report.out / "report.html",
                     wrong=wrong_benches(run_dir))


def wrong_benches(run_dir: Path) -> list[tuple[str, str]]:
    """(name, what its exit code 1 means) of each bench of the suite run whose check found wrong results."""
    from commbench.runs import bench_dirs, kind_of, read_outcome

    wrong = []
    for name, bench_dir in bench_dirs(run_dir).items():
        if (bench_dir / store.META_FILE).exists():
            kind = kind_of(bench_dir)
            count = read_outcome(kind, bench_dir).n_wrong
            if count:
                wrong.append((name, kind.wrong_message.format(n=count)))
    return wrong


@dataclass(frozen=True)
class BenchProgress:
    name: str
    status: str
    """meta.json's status, or "not started"."""
    rows: int


@dataclass(frozen=True)
class JobStatus:
    """A submitted run's Slurm state, its meta.json, and each bench's status and rows."""

    job_id: str
    state: jobs.JobState
    meta: dict[str, object]
    benches: list[BenchProgress]

    @property
    def failed(self) -> bool:
        """The job or the run failed, or the job is gone from scontrol and the run never said complete."""
        status = self.meta.get("status")
        unfinished = self.state.state == jobs.GONE and status != store.STATUS_COMPLETE
        return self.state.state in jobs.ENDED_BADLY or status == store.STATUS_FAILED or unfinished


def job_status(run_dir: Path) -> JobStatus | None:
    """The run's job and benches now; None where meta.json names no job (not a submitted run)."""
    from commbench.progress import RowCounter

    meta = store.read_meta(run_dir)
    job_id = meta.get("slurm_job_id")
    if not job_id:
        return None
    state = jobs.job_state(str(job_id))
    benches = []
    for name, bench_dir in (store.suite_bench_dirs(run_dir) or {}).items():
        rows = RowCounter(bench_dir / store.RESULTS_FILE)()
        status = store.read_meta(bench_dir).get("status") if (bench_dir / store.META_FILE).exists() else \
            "not started"
        benches.append(BenchProgress(name, str(status), rows))
    return JobStatus(str(job_id), state, meta, benches)
