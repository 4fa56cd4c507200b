"""Run a bench (launched, or in place inside torchrun/srun), print its table, and exit with its verdict."""

import functools
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import click
import pandas as pd
from click.core import ParameterSource

from commbench import launch
from commbench.cli.options import run_options
from commbench.session import Job, in_place_sweep, launched_sweep
from commbench.store import STATUS_COMPLETE

EXIT_WRONG_RESULTS = 1
EXIT_RUN_FAILED = 3


@dataclass(frozen=True)
class BenchJob:
    """What one bench command (sweep, ddp, fsdp, zero) resolved its options to, before anything launches."""

    job: Job
    render: Callable[[pd.DataFrame], str]
    """The end-of-run table."""
    wrong_message: str
    """What exit code 1 says, with {n} the count of wrong results."""
    notes: list[str] = field(default_factory=list)


def bench_command(build: Callable[..., BenchJob] | None = None, *, bare_suite: str | None = None):
    """Turn a job builder (the bench's options → BenchJob) into a command body that also takes the run options.
    The builder stays reachable as `.build` for suites, which give the same options from TOML. bare_suite: the suite
    the command runs when given no bench option at all (`commbench sweep` runs suites/default.toml)."""
    if build is None:
        return functools.partial(bench_command, bare_suite=bare_suite)

    @run_options
    @functools.wraps(build)
    def command(out: Path, run_id: str | None, quiet: bool, **options) -> None:
        ctx = click.get_current_context()
        if bare_suite and all(ctx.get_parameter_source(name) == ParameterSource.DEFAULT for name in options):
            from commbench.cli.run import run_suite_command

            run_suite_command(bare_suite, overrides={}, into=None, out=out, run_id=run_id, quiet=quiet)
        run_bench(build(**options), out=out, run_id=run_id, quiet=quiet)

    command.build = build
    return command


def run_bench(bench: BenchJob, *, out: Path, run_id: str | None, quiet: bool) -> None:
    """Exit codes: 0 all correct, 1 the check found something wrong, 3 the run failed."""
    in_job = launch.world_size_in_job() is not None
    run = in_place_sweep if in_job else launched_sweep
    outcome = run(bench.job, out=out, run_id=run_id, argv=["commbench", *sys.argv[1:]], quiet=quiet)
    if outcome.run_dir is None:  # a rank other than 0 inside a job: rank 0 reports for everyone
        sys.exit(0 if outcome.status == STATUS_COMPLETE else EXIT_RUN_FAILED)
    if not quiet:
        show_results(bench, outcome.results)
    show_teardown(outcome.teardown)
    click.echo(f"# Results: {outcome.run_dir}")
    sys.exit(verdict(bench, outcome.status, outcome.reason, outcome.n_wrong))


def show_results(bench: BenchJob, results: pd.DataFrame | None) -> None:
    for note in bench.notes:
        click.echo(f"# note: {note}")
    if results is not None and not results.empty:
        click.echo(bench.render(results))


def show_teardown(teardown: str | None) -> None:
    if teardown:
        click.echo(f"# note: every row was stored and checked, then ranks failed on the way out: {teardown}")


def verdict(bench: BenchJob, status: str | None, reason: str | None, n_wrong: int, *, name: str = "sweep") -> int:
    """The exit code of a finished bench, saying on stderr what went wrong."""
    if status != STATUS_COMPLETE:
        click.echo(f"commbench: {name} failed: {reason}", err=True)
        return EXIT_RUN_FAILED
    if n_wrong:
        click.echo(f"commbench: {name}: {bench.wrong_message.format(n=n_wrong)}; results are not valid", err=True)
        return EXIT_WRONG_RESULTS
    return 0
