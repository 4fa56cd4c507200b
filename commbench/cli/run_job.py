"""Run a sweep job (launched, or in place inside torchrun/srun), print its table, and exit with its verdict."""

import sys
from pathlib import Path
from typing import Callable

import click
import pandas as pd

from commbench.session import Job, in_place_sweep, launched_sweep
from commbench.store import STATUS_COMPLETE

EXIT_WRONG_RESULTS = 1
EXIT_RUN_FAILED = 3


def run_job(job: Job, *, in_job: bool, out: Path, run_id: str | None, quiet: bool,
            render: Callable[[pd.DataFrame], str], wrong_message: str, notes: list[str] = ()) -> None:
    """Exit codes: 0 all correct, 1 the check found something wrong (wrong_message, with {n}), 3 the run failed."""
    run = in_place_sweep if in_job else launched_sweep
    outcome = run(job, out=out, run_id=run_id, argv=["commbench", *sys.argv[1:]], quiet=quiet)
    if outcome.run_dir is None:  # a rank other than 0 inside a job: rank 0 reports for everyone
        sys.exit(0 if outcome.status == STATUS_COMPLETE else EXIT_RUN_FAILED)
    if not quiet:
        for note in notes:
            click.echo(f"# note: {note}")
        if outcome.results is not None and not outcome.results.empty:
            click.echo(render(outcome.results))
    click.echo(f"# Results: {outcome.run_dir}")
    if outcome.status != STATUS_COMPLETE:
        click.echo(f"commbench: sweep failed: {outcome.reason}", err=True)
        sys.exit(EXIT_RUN_FAILED)
    if outcome.n_wrong:
        click.echo(f"commbench: {wrong_message.format(n=outcome.n_wrong)}; results are not valid", err=True)
        sys.exit(EXIT_WRONG_RESULTS)
