"""What several commands share: repeatable options, the run options, and how a finished bench is shown and
judged (its table, notes, and exit code)."""

from pathlib import Path

import click

from commbench.bench_kind import BenchKind
from commbench.errors import ExitCode


def split_commas(ctx, param, values) -> tuple[str, ...]:
    """Repeatable options also take comma lists: -c all_reduce,all_gather."""
    return tuple(part.strip() for value in values for part in value.split(",") if part.strip())


def run_options(function):
    """--out, --run-id and --quiet: options of the run as a whole (a suite sets them once, on `commbench run`)."""
    options = [
        click.option("--out", type=click.Path(path_type=Path), default=Path("results"), show_default=True,
                     help="Folder that receives results/<run-id>/."),
        click.option("--run-id", default=None, help="Name of the run folder [default: UTC time + host]."),
        click.option("-q", "--quiet", is_flag=True, help="No progress bar and no tables; print the results path."),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def show_results(bench, outcome) -> None:
    for note in bench.notes:
        click.echo(f"# note: {note}")
    if outcome.results is not None and not outcome.results.empty:
        click.echo(bench.kind.table(outcome.results))


def show_teardown(teardown: str | None) -> None:
    if teardown:
        click.echo(f"# note: every row was stored and checked, then ranks failed on the way out: {teardown}")


def verdict(kind: BenchKind, outcome, *, name: str = "sweep") -> ExitCode:
    """The exit code of a finished bench, saying on stderr what went wrong."""
    from commbench.store import STATUS_COMPLETE

    if outcome.status != STATUS_COMPLETE:
        click.echo(f"commbench: {name} failed: {outcome.reason}", err=True)
        return ExitCode.RUN_FAILED
    if outcome.n_wrong:
        click.echo(f"commbench: {name}: {kind.wrong_message.format(n=outcome.n_wrong)}; results are not valid",
                   err=True)
        return ExitCode.WRONG_RESULTS
    return ExitCode.OK


class _FiniteNumber(click.ParamType):
    """A float option that must be a finite number, and above 0 unless zero_ok: Click's FLOAT takes 'nan' and
    'inf', which no commbench option means (a NaN timeout never fires, an infinite byte count is no size)."""

    name = "number"

    def __init__(self, *, zero_ok: bool = False):
        self.zero_ok = zero_ok

    def convert(self, value, param, ctx):
        import math

        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number) or number < 0 or (number == 0 and not self.zero_ok):
            self.fail(f"{value!r} is not a finite number {'of 0 or more' if self.zero_ok else 'above 0'}",
                      param, ctx)
        return number


POSITIVE_NUMBER = _FiniteNumber()
"""type= for float options that mean a duration, a rate, a size or a count: finite and above 0."""
NON_NEGATIVE_NUMBER = _FiniteNumber(zero_ok=True)
