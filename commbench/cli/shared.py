"""What several commands share: repeatable options, the run options, how a finished bench is shown and judged (its
table, notes, and exit code; or its JSON document), how a run becomes a run set of N launches (--launches), and the
warnings a command's input raised."""

import contextlib
import os
import sys
import warnings
from pathlib import Path
from typing import NoReturn, cast

import click

from commbench.bench_kind import BenchKind
from commbench.cli.json_output import emit_json, json_option
from commbench.errors import CommbenchWarning, ExitCode
from commbench.machine import inside_job

WARNING_PREFIX = "commbench: warning:"


def split_commas(ctx, param, values) -> tuple[str, ...]:
    """Repeatable options also take comma lists: -c all_reduce,all_gather."""
    return tuple(part.strip() for value in values for part in value.split(",") if part.strip())


def run_options(function):
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


def machine_options(which: str, gives: str):
    """--machine PRESET and --facts FILE: the machine `which` names (what wrote a file, what recorded a trace), and
    what its expected busbw `gives` there (commbench expect); the command reads them with expect.chosen_facts."""
    def decorate(function):
        function = click.option("--facts", "facts_file", metavar="FILE",
                                help=f"{which}, as a facts file (`commbench env --json` there) or NCCL's topology "
                                     f"dump: {gives}.")(function)
        return click.option("--machine", metavar="PRESET",
                            help=f"{which}, as a preset (commbench expect --machine list): {gives}.")(function)
    return decorate


def table_run_options(function):
    """run_options and --verbose: the options of a run that ends in a bench's tables (the bench commands and
    `commbench run`)."""
    verbose = click.option("--verbose", is_flag=True,
                           help="The full tables: every placement's columns, a legend under each table, flags spelt "
                                "out, the ring/builtin ratio in detail (no effect with -q or --json).")
    return run_options(verbose(function))


def launches_option(function):
    """--launches N: the commands whose runs the gate compares (sweep, perf, ddp, fsdp, zero, run)."""
    return click.option("--launches", type=click.IntRange(min=1), default=1, show_default=True, metavar="N",
                        help="Launch the run N times into one run set, OUT/RUN_ID/launch1 ... launchN, and store its "
                             "launch noise in OUT/RUN_ID/run_set.json: `commbench compare` then tests across "
                             "launches. Stops after a launch that fails.")(function)


def run_launches(launches: int, launch, *, out: Path, run_id: str | None, quiet: bool, as_json: bool, machine,
                 argv: list[str]) -> None:
    """The run (launches = 1), or a run set of `launches` launches, each made by launch(folder, run id) (a
    run_set.Launched); then the last of stdout and the exit code. Only the last launch's tables are shown; a run set
    ends with one line naming it, its launches and its launch noise."""
    if launches == 1:
        launched = launch(out, run_id)
        finish_run(launched.run_dir, *launched.report(True), quiet=quiet, as_json=as_json)
    from commbench.gate import compare, noise_record, run_set
    set_dir, done = run_set.launch_all(launches, launch, out=out, run_id=run_id, quiet=quiet, in_job=machine.in_job)
    reports = [launched.report(launched is done[-1]) for launched in done]
    noise = run_set.noise_document([launched.run_dir.name for launched in done], compare.launch_values(set_dir))
    run_set.write(set_dir, noise)
    kept = noise_record.record_run_set(set_dir, len(done))
    line = run_set.summary_line(set_dir, noise, planned=launches, kept_as=[key.label for key in kept])
    if not (quiet or as_json):
        click.echo(f"# {line}")
    code = cast(ExitCode, reports[-1][0])  # each launch's report() returns its verdict's ExitCode
    finish_run(set_dir, code, {"command": argv, "run_set": set_dir, "summary": line, "exit_code": int(code),
                               "launch_noise_pct": noise["launch_noise_pct"],
                               "launches": [document for _, document in reports]}, quiet=quiet, as_json=as_json)


def show_notes(bench, *, err: bool = False) -> None:
    for note in bench.notes:
        click.echo(f"# note: {note}", err=err)


def show_results(bench, outcome, *, verbose: bool = False) -> None:
    show_notes(bench)
    if outcome.results is not None and not outcome.results.empty:
        click.echo(bench.kind.table(outcome.results, verbose=verbose))


def show_teardown(teardown: str | None, *, err: bool = False) -> None:
    if teardown:
        click.echo(f"# note: every row was stored and checked, then ranks failed on the way out: {teardown}", err=err)


def show_bench(bench, outcome, *, quiet: bool, as_json: bool, verbose: bool = False) -> None:
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


def finish_run(run_dir, code: ExitCode, document: dict, *, quiet: bool, as_json: bool) -> None:
    """The last of a run's stdout, then its exit code: the --json document (with every warning), the run folder
    alone for -q (scripts read it from there), or `# Results: …`."""
    if as_json:
        emit_json({**document, "warnings": show_warnings()})
    elif quiet:
        click.echo(run_dir)
    else:
        click.echo(f"# Results: {run_dir}")
    sys.exit(code)


def bench_document(bench, outcome, code: ExitCode) -> dict:
    """One finished bench in a --json document: how it ended and its rows (a list of row dicts, NaN as null)."""
    return {"run_dir": outcome.run_dir, "status": outcome.status, "reason": outcome.reason, "exit_code": int(code),
            "n_wrong": int(outcome.n_wrong), "n_unchecked": int(outcome.n_unchecked), "notes": list(bench.notes),
            "teardown": outcome.teardown,
            "results": outcome.results if outcome.results is not None else []}


def other_rank_exit(ran) -> NoReturn:
    """A rank other than 0 inside a job: rank 0 reports for everyone; this rank exits as the job ended (the same
    code on every rank, see session.Ran)."""
    sys.exit(ExitCode.RUN_FAILED if not ran else ExitCode.WRONG_RESULTS if ran.problems else ExitCode.OK)


def verdict(kind: BenchKind, outcome, *, name: str = "sweep") -> ExitCode:
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


class _Warnings:
    def __init__(self) -> None:
        self.pending: list[str] = []
        self.shown: list[str] = []


_calls: list[_Warnings] = []
"""The warnings of each command call in progress (the innermost last): main() opens one per call."""


@contextlib.contextmanager
def warnings_held():
    """Hold the CommbenchWarnings raised inside until show_warnings(): a command whose input is refused after a
    warning (exit 2) still says one line, because main() drops what it holds then. Other warnings pass as usual."""
    held = _Warnings()
    with warnings.catch_warnings():
        warnings.simplefilter("always", CommbenchWarning)  # every call says them, not only the process's first
        passed_on = warnings.showwarning

        def hold(message, category, filename, lineno, file=None, line=None):
            if issubclass(category, CommbenchWarning):
                if str(message) not in held.pending + held.shown:  # e.g. once per resolve of the same options
                    held.pending.append(str(message))
            else:
                passed_on(message, category, filename, lineno, file, line)

        warnings.showwarning = hold
        _calls.append(held)
        try:
            yield held
        finally:
            _calls.remove(held)


def show_warnings() -> list[str]:
    """Print the held warnings on stderr (`commbench: warning: ...`, one line each) once the input is accepted;
    returns every warning of this call so far, for a --json document. Inside a job only rank 0 prints."""
    if not _calls:
        return []
    held = _calls[-1]
    quiet_rank = inside_job() and os.environ["RANK"] != "0"
    for message in held.pending:
        if not quiet_rank:
            click.echo(f"{WARNING_PREFIX} {message}", err=True)
        held.shown.append(message)
    held.pending.clear()
    return list(held.shown)
