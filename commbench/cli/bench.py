"""The bench commands (`commbench sweep`, `ddp`, `fsdp`, `zero`): one Click command per registered bench kind, its
options made from the kind's options dataclass. The command only parses and prints; resolving and running the bench
is the library's (the kind's resolve(), commbench/execution/session.py)."""

import sys
from pathlib import Path

import click
from click.core import ParameterSource

from commbench.bench_kind import BenchKind
from commbench.benches.options import arguments_and_flag, arguments_name, default_of, options_of, parse_options
from commbench.cli.shared import (
    bench_document,
    launches_option,
    other_rank_exit,
    run_launches,
    show_bench,
    show_warnings,
    table_run_options,
    verdict,
)

_METAVARS = {int: "INTEGER", float: "NUMBER", str: "TEXT", bool: "BOOL"}


def click_options(options_class):
    """The Click options of an options dataclass, in field order. Values reach parse_options() as given (strings,
    comma-split for repeatable options), so the command line is checked exactly as a suite is."""
    def decorate(function):
        for f, described in reversed(options_of(options_class)):
            default = default_of(f)
            if described.positional:
                decorator = click.argument(f.name, nargs=-1 if described.many else 1, type=click.STRING,
                                           metavar=f"{described.key.upper()}...")
            elif described.arguments:  # the flag, and the same values as arguments (merged by arguments_and_flag)
                function = click.argument(arguments_name(f), nargs=-1, type=click.STRING,
                                          metavar=f"[{described.key.upper()}]...")(function)
                decorator = click.option(*described.flags, f.name, type=click.STRING, multiple=True,
                                         metavar=_metavar(described), help=described.help)
            elif described.switch:
                flags = (f"{described.flag}/--no-{described.key}",) if described.negatable else described.flags
                decorator = click.option(*flags, f.name, is_flag=True, default=default,
                                         show_default=described.show_default, help=described.help)
            elif described.many:  # parse_options() splits the commas, and refuses `-c ''` (no value at all)
                decorator = click.option(*described.flags, f.name, type=click.STRING, multiple=True,
                                         metavar=_metavar(described), help=described.help)
            else:  # a string even for numbers: parse_options() checks it, with the suites' messages
                decorator = click.option(*described.flags, f.name, type=click.STRING, default=default,
                                         metavar=_metavar(described),
                                         show_default=described.show_default and default is not None,
                                         help=described.help)
            function = decorator(function)
        return function
    return decorate


def _metavar(described) -> str:
    if described.choices:
        return "[" + "|".join(described.choices) + "]"
    return _METAVARS[described.type]


def bench_command(kind: BenchKind) -> click.Command:
    """`commbench <kind.command>`: resolve the options for this machine, run the bench, print its table (or the
    --json document, or with -q the run folder alone), exit with its verdict."""
    @click.pass_context
    def command(ctx: click.Context, out: Path, run_id: str | None, quiet: bool, as_json: bool, verbose: bool,
                launches: int = 1, **raw) -> None:
        from commbench.execution import torch_host

        values = arguments_and_flag(kind.options, raw)  # refused here, before torch is loaded, where they differ
        if kind.bare_suite and all(ctx.get_parameter_source(name) == ParameterSource.DEFAULT for name in raw):
            from commbench.cli.run import run_suite_command

            run_suite_command(kind.bare_suite, overrides={}, into=None, out=out, run_id=run_id, quiet=quiet,
                              as_json=as_json, verbose=verbose, launches=launches)
        torch_host.start()
        import pandas  # noqa: F401 - the tables' import, here on one core while the host imports torch on another

        machine = torch_host.machine()
        bench = kind.resolve(parse_options(kind.options, values), machine)
        run_resolved(bench, machine, out=out, run_id=run_id, quiet=quiet, as_json=as_json, verbose=verbose,
                     launches=launches)

    command.__doc__ = kind.help()
    command = table_run_options(click_options(kind.options)(command))
    if kind.run_sets:
        command = launches_option(command)
    return click.command(name=kind.command, help=kind.help())(command)


def run_resolved(bench, machine, *, out: Path, run_id: str | None, quiet: bool, as_json: bool,
                 verbose: bool = False, launches: int = 1) -> None:
    from commbench.execution import session
    from commbench.gate.run_set import Launched

    show_warnings()  # the input is accepted: say what it will not measure as it seems, before the run
    argv = ["commbench", *sys.argv[1:]]

    def launch(folder: Path, launch_id: str | None) -> Launched:
        ok, outcome = session.run_bench(bench, machine, out=folder, run_id=launch_id, argv=argv, quiet=quiet)
        if outcome is None:
            other_rank_exit(ok)

        def report(show: bool):
            if show:
                show_bench(bench, outcome, quiet=quiet, as_json=as_json, verbose=verbose)
            code = verdict(bench.kind, outcome, name=bench.kind.command)
            return code, {"command": argv, **bench_document(bench, outcome, code)}

        return Launched(outcome.run_dir, bool(ok) and not outcome.n_wrong, report)

    run_launches(launches, launch, out=out, run_id=run_id, quiet=quiet, as_json=as_json, machine=machine, argv=argv)
