"""What several commands share: repeatable options, the run options, how a finished bench is shown and judged (its
table, notes, and exit code; or its JSON document), how a run or a run set of N launches (--launches) ends on stdout,
and the warnings a command's input raised. The work itself is below cli/ (commbench/running/)."""

from __future__ import annotations

import os
import types
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

import click

from commbench.cli.json_output import CommandT, emit_json, json_option
from commbench.errors import CommbenchWarning, ExitCode
from commbench.machine import inside_job

if TYPE_CHECKING:
    from commbench.bench_kind import Bench, BenchKind
    from commbench.running.launches import Launches
    from commbench.runs import Outcome

WARNING_PREFIX = "commbench: warning:"

OutcomeT = TypeVar("OutcomeT")


def split_commas(ctx: click.Context, param: click.Parameter, values: Sequence[str]) -> tuple[str, ...]:
    """Repeatable options also take comma lists: -c all_reduce,all_gather."""
    return tuple(part.strip() for value in values for part in value.split(",") if part.strip())


def run_options(function: CommandT) -> CommandT:
    """--out, --run-id, --quiet and --json: options of the run as a whole (a suite sets them once, on `commbench
    run`; `commbench import` has them too)."""
    options = [
        click.option("--out", type=click.Path(path_type=Path), default=Path("results"), show_default=True,
                     help="Folder that receives results/<run-id>/."),
        click.option("--run-id", default=None, help="Name of the run folder [default: UTC time + host]."),
        click.option("-q", "--quiet", is_flag=True,
                     help="No progress bar and no tables: stdout is one line, the run folder (with --json: the "
                          "document, without the bar)."),
        json_option,
    ]
    for option in reversed(options):
        function = option(function)
    return function


def machine_options(which: str, gives: str) -> Callable[[CommandT], CommandT]:
    """--machine PRESET and --facts FILE: the machine `which` names (what wrote a file, what recorded a trace), and
    what its expected busbw `gives` there (commbench expect); the command reads them with expect.chosen_facts."""
    def decorate(function: CommandT) -> CommandT:
        function = click.option("--facts", "facts_file", metavar="FILE",
                                help=f"{which}, as a facts file (`commbench env --json` there) or NCCL's topology "
                                     f"dump: {gives}.")(function)
        return click.option("--machine", metavar="PRESET",
                            help=f"{which}, as a preset (commbench expect --machine list): {gives}.")(function)
    return decorate


def table_run_options(function: CommandT) -> CommandT:
    """run_options and --verbose: the options of a run that ends in a bench's tables (the bench commands and
    `commbench run`)."""
    verbose = click.option("--verbose", is_flag=True,
                           help="The full tables: every placement's columns, a legend under each table, flags spelt "
                                "out, the ring/builtin ratio in detail (no effect with -q or --json).")
    return run_options(verbose(function))


def launches_option(function: CommandT) -> CommandT:
    """--launches N: the commands whose runs the gate compares (sweep, perf, ddp, fsdp, zero, run)."""
    return click.option("--launches", type=click.IntRange(min=1), default=1, show_default=True, metavar="N",
                        help="Launch the run N times into one run set, OUT/RUN_ID/launch1 ... launchN, and store its "
                             "launch noise in OUT/RUN_ID/run_set.json: `commbench compare` then tests across "
                             "launches. Stops after a launch that fails.")(function)


def finish_launches(ran: Launches[OutcomeT],
                    report: Callable[[OutcomeT, bool], tuple[ExitCode, dict[str, object]]], *, quiet: bool,
                    as_json: bool, argv: list[str]) -> ExitCode:
    """The end of a run (one launch) or a run set: each launch's report(outcome, show) (its tables when show, what
    went wrong on stderr; its exit code and --json document), then the last of stdout; returns the exit code. Only
    the last launch's tables are shown; a run set ends with one line naming it, its launches and its launch noise."""
    reports = [report(done.outcome, done is ran.last) for done in ran.done]
    code, document = reports[-1]
    if ran.run_set is None:
        return finish_run(ran.last.run_dir, code, document, quiet=quiet, as_json=as_json)
    written = ran.run_set
    if not (quiet or as_json):
        click.echo(f"# {written.summary}")
    return finish_run(written.set_dir, code, {"command": argv, "run_set": written.set_dir, "summary": written.summary,
                                              "exit_code": int(code), "launch_noise_pct": written.launch_noise_pct,
                                              "launches": [launch for _, launch in reports]},
                      quiet=quiet, as_json=as_json)


def show_notes(bench: Bench, *, err: bool = False) -> None:
    for note in bench.notes:
        click.echo(f"# note: {note}", err=err)


def show_results(bench: Bench, outcome: Outcome, *, verbose: bool = False) -> None:
    import pandas as pd  # loaded by the run already: its rows are a frame

    show_notes(bench)
    if isinstance(outcome.results, pd.DataFrame) and not outcome.results.empty:
        click.echo(bench.kind.table(outcome.results, verbose=verbose))


def show_teardown(teardown: str | None, *, err: bool = False) -> None:
    if teardown:
        click.echo(f"# note: every row was stored and checked, then ranks failed on the way out: {teardown}", err=err)


def show_bench(bench: Bench, outcome: Outcome, *, quiet: bool, as_json: bool, verbose: bool = False) -> None:
    """A finished bench's notes, table (short, or with --verbose the full one) and teardown note: all on stdout in
    the text mode; with --json the notes and the teardown on stderr (stdout is the document); with -q only the
    teardown, on stderr (stdout is the path)."""
    if not (quiet or as_json):
        show_results(bench, outcome, verbose=verbose)
        show_teardown(outcome.teardown)
        return
    if as_json:
        show_notes(bench, err=True)
    show_teardown(outcome.teardown, err=True)


def finish_run(run_dir: Path, code: ExitCode, document: dict[str, object], *, quiet: bool,
               as_json: bool) -> ExitCode:
    """The last of a run's stdout: the --json document (with every warning), the run folder alone for -q (scripts
    read it from there), or `# Results: …`; returns code, the command's exit code."""
    if as_json:
        emit_json({**document, "warnings": show_warnings()})
    elif quiet:
        click.echo(run_dir)
    else:
        click.echo(f"# Results: {run_dir}")
    return code


def bench_document(bench: Bench, outcome: Outcome, code: ExitCode) -> dict[str, object]:
    """One finished bench in a --json document: how it ended and its rows (a list of row dicts, NaN as null)."""
    return {"run_dir": outcome.run_dir, "status": outcome.status, "reason": outcome.reason, "exit_code": int(code),
            "n_wrong": int(outcome.n_wrong), "n_unchecked": int(outcome.n_unchecked), "notes": list(bench.notes),
            "teardown": outcome.teardown,
            "results": outcome.results if outcome.results is not None else []}


def verdict(kind: BenchKind, outcome: Outcome, *, name: str = "sweep") -> ExitCode:
    """The exit code of a finished bench, saying on stderr what went wrong."""
    from commbench.store import STATUS_COMPLETE

    if outcome.status != STATUS_COMPLETE:
        click.echo(f"commbench: {name} failed: {outcome.reason}", err=True)
        return ExitCode.RUN_FAILED
    if outcome.n_unchecked:  # said whatever the exit code: 0 must not read as "verified" for these rows
        click.echo(f"commbench: {name}: {unchecked_text(outcome.n_unchecked)}", err=True)
    if outcome.n_wrong:
        click.echo(f"commbench: {name}: {kind.wrong_message.format(n=outcome.n_wrong)}", err=True)
        return ExitCode.WRONG_RESULTS
    return ExitCode.OK


def unchecked_text(count: int) -> str:
    """What a run's unchecked rows (n_wrong empty) mean for its verdict, in one clause."""
    return (f"{count} row(s) unchecked (n_wrong empty: no correctness check ran, e.g. --no-check or -c 0): "
            "they count as neither right nor wrong, and the exit code says nothing of their results")


class _FiniteNumber(click.ParamType):
    """A float option that must be a finite number, and above 0 unless zero_ok: Click's FLOAT takes 'nan' and
    'inf', which no commbench option means (a NaN timeout never fires, an infinite byte count is no size)."""

    name = "number"

    def __init__(self, *, zero_ok: bool = False) -> None:
        self.zero_ok = zero_ok

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        import math

        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number) or number < 0 or (number == 0 and not self.zero_ok):
            self.fail(f"{value!r} is not a finite number {'of 0 or more' if self.zero_ok else 'above 0'}",
                      param, ctx)
        return number


POSITIVE_NUMBER = _FiniteNumber()
"""type= for float options that mean a duration, a rate, a size or a count: finite and above 0."""
NON_NEGATIVE_NUMBER = _FiniteNumber(zero_ok=True)


class HeldWarnings:
    """The CommbenchWarnings of one command call, held from where they are raised until show() prints them: a command
    whose input is refused after a warning (exit 2) still says one line, because main() drops what it holds then.
    Other warnings pass as usual. A context manager: within it, warnings.showwarning is this object's hold() (the
    innermost call's, where calls nest), which is how show_warnings() finds it."""

    def __init__(self) -> None:
        self.pending: list[str] = []
        self.shown: list[str] = []
        self._catching = warnings.catch_warnings()
        self._passed_on = warnings.showwarning

    def __enter__(self) -> HeldWarnings:
        self._catching.__enter__()
        warnings.simplefilter("always", CommbenchWarning)  # every call says them, not only the process's first
        self._passed_on = warnings.showwarning
        warnings.showwarning = self.hold
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: types.TracebackType | None) -> None:
        self._catching.__exit__(kind, error, trace)  # showwarning and the filters as they were

    def hold(self, message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: TextIO | None = None, line: str | None = None) -> None:
        if issubclass(category, CommbenchWarning):
            if str(message) not in self.pending + self.shown:  # e.g. once per resolve of the same options
                self.pending.append(str(message))
        else:
            self._passed_on(message, category, filename, lineno, file, line)

    def show(self) -> list[str]:
        """Print the held warnings on stderr (`commbench: warning: ...`, one line each) once the input is accepted;
        returns every warning of this call so far, for a --json document. Inside a job only rank 0 prints."""
        quiet_rank = inside_job() and os.environ["RANK"] != "0"
        for message in self.pending:
            if not quiet_rank:
                click.echo(f"{WARNING_PREFIX} {message}", err=True)
            self.shown.append(message)
        self.pending.clear()
        return list(self.shown)


def warnings_held() -> HeldWarnings:
    """Hold the CommbenchWarnings raised inside until show_warnings() (main() opens one per command call)."""
    return HeldWarnings()


def show_warnings() -> list[str]:
    """The innermost command call's HeldWarnings.show(); [] outside any."""
    held = getattr(warnings.showwarning, "__self__", None)
    return held.show() if isinstance(held, HeldWarnings) else []
