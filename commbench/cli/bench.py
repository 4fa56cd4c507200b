"""The bench commands (`commbench sweep`, `ddp`, `fsdp`, `zero`): one Click command per registered bench kind, its
options made from the kind's options dataclass. The command only parses and prints; resolving and running the bench
is commbench/running/bench.py's (the kind's resolve(), then commbench/execution/session.py)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import Field
from pathlib import Path
from typing import TYPE_CHECKING

import click
from click.core import ParameterSource

from commbench.benches.options import arguments_and_flag, arguments_name, default_of, options_of
from commbench.cli.shared import (
    CommandT,
    bench_document,
    finish_launches,
    launches_option,
    show_bench,
    show_warnings,
    table_run_options,
    verdict,
)
from commbench.errors import ExitCode
from commbench.running.other_rank import OtherRank

if TYPE_CHECKING:
    from commbench.bench_kind import BenchKind
    from commbench.benches.options import Option
    from commbench.running.bench import BenchRun
    from commbench.runs import Outcome

_METAVARS = {int: "INTEGER", float: "NUMBER", str: "TEXT", bool: "BOOL"}


def click_options(options_class: type) -> Callable[[CommandT], CommandT]:
    """The Click options of an options dataclass, in field order. Values reach parse_options() as given (strings,
    comma-split for repeatable options), so the command line is checked exactly as a suite is."""
    def decorate(function: CommandT) -> CommandT:
        for f, described in reversed(options_of(options_class)):
            if described.arguments:  # the flag, and the same values as arguments (merged by arguments_and_flag)
                function = click.argument(arguments_name(f), nargs=-1, type=click.STRING,
                                          metavar=f"[{described.key.upper()}]...")(function)
            function = _decorator(f, described)(function)
        return function
    return decorate


def _decorator(f: Field[object], described: Option) -> Callable[[CommandT], CommandT]:
    """The Click argument or option of one field."""
    default = default_of(f)
    if described.positional:
        return click.argument(f.name, nargs=-1 if described.many else 1, type=click.STRING,
                              metavar=f"{described.key.upper()}...")
    if described.switch and not described.arguments:
        flags = (f"{described.flag}/--no-{described.key}",) if described.negatable else described.flags
        return click.option(*flags, f.name, is_flag=True, default=default, show_default=described.show_default,
                            help=described.help)
    if described.many or described.arguments:  # parse_options() splits the commas, and refuses `-c ''`
        return click.option(*described.flags, f.name, type=click.STRING, multiple=True,
                            metavar=_metavar(described), help=described.help)
    # a string even for numbers: parse_options() checks it, with the suites' messages
    return click.option(*described.flags, f.name, type=click.STRING, default=default, metavar=_metavar(described),
                        show_default=described.show_default and default is not None, help=described.help)


def _metavar(described: Option) -> str:
    if described.choices:
        return "[" + "|".join(described.choices) + "]"
    return _METAVARS[described.type]


def bench_command(kind: BenchKind) -> click.Command:
    """`commbench <kind.command>`: resolve the options for this machine, run the bench, print its table (or the
    --json document, or with -q the run folder alone), exit with its verdict."""
    @click.pass_context
    def command(ctx: click.Context, out: Path, run_id: str | None, quiet: bool, as_json: bool, verbose: bool,
                launches: int = 1, **raw: object) -> None:
        from commbench.running.bench import run_bench_command

        values = arguments_and_flag(kind.options, raw)  # refused here, before torch is loaded, where they differ
        if kind.bare_suite and all(ctx.get_parameter_source(name) == ParameterSource.DEFAULT for name in raw):
            from commbench.cli.run import run_suite_command

            sys.exit(run_suite_command(kind.bare_suite, overrides={}, into=None, out=out, run_id=run_id,
                                       quiet=quiet, as_json=as_json, verbose=verbose, launches=launches))
        argv = ["commbench", *sys.argv[1:]]
        # accepted: the input is, so say what it will not measure as it seems, before the run
        ran = run_bench_command(kind, values, out=out, run_id=run_id, quiet=quiet, launches=launches, argv=argv,
                                accepted=show_warnings)
        sys.exit(show_bench_run(ran, quiet=quiet, as_json=as_json, verbose=verbose, argv=argv))

    decorated = table_run_options(click_options(kind.options)(command))
    if kind.run_sets:
        decorated = launches_option(decorated)
    return click.command(name=kind.command, help=kind.help())(decorated)


def show_bench_run(ran: BenchRun | OtherRank, *, quiet: bool, as_json: bool, verbose: bool,
                   argv: list[str]) -> int:
    """The bench's table (the last launch's), what went wrong, and the last of stdout; returns the exit code. A rank
    other than 0 in a job prints nothing: rank 0 reports for everyone."""
    if isinstance(ran, OtherRank):
        return ran.exit_code
    bench = ran.bench

    def report(outcome: Outcome, show: bool) -> tuple[ExitCode, dict[str, object]]:
        if show:
            show_bench(bench, outcome, quiet=quiet, as_json=as_json, verbose=verbose)
        code = verdict(bench.kind, outcome, name=bench.kind.command)
        return code, {"command": argv, **bench_document(bench, outcome, code)}

    return finish_launches(ran.launches, report, quiet=quiet, as_json=as_json, argv=argv)
