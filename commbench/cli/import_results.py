"""`commbench import nccl-tests|param|nccl-inspector FILE...`: other tools' results as a commbench run folder (exit 0
imported, 1 imported but the source reports wrong results, 2 bad input: not the tool's output, a cut table, mixed
world sizes)."""

import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from commbench.cli.shared import finish_run, machine_options, run_options
from commbench.errors import ExitCode
from commbench.imports import SOURCES, ImportedFile, Source
from commbench.names import DTYPES, REDUCE_OPS

if TYPE_CHECKING:
    from commbench.expect.rows import FactsAndOrigin

_HELP = {
    "nccl-tests": """Read nccl-tests results (text output of any version, or its -J JSON) into a run folder.

    The collective comes from the file (its *_perf command line or '# Collective test starting' line), else from
    --collective; the world size from its '#  Rank N … on HOST' lines, else from --world-size. Several files (e.g.
    all_reduce_perf.log all_gather_perf.log) make one run; lines prefixed by mpirun --tag-output or srun --label are
    read as well. Rows keep nccl-tests' time, algbw and busbw as printed; busbw_check says whether the busbw follows
    from the size and time, and meta.json keeps the '# Avg bus bandwidth' line, checked against the rows; the tables
    print that line's figure. meta.json's start_time is the run's own where the file records one (-J's start_time,
    -S 1's row timestamps; start_time_source log), else the import's (start_time_source import).
    """,
    "param": """Read PARAM comms benchmark results (its COMMS-RES tables, train/comms/pt/comms.py) into a run folder.

    World size, host and device come from PARAM's 'Hello from Rank' lines (else --world-size), the backend from its
    'backend:' line. Rows keep PARAM's p50 as the time and its algbw and busbw as printed; time_us_p75, time_us_p95,
    time_us_min and time_us_max keep the other percentiles (all across ranks).
    """,
}


_ENV_HELP = ("A variable the files were measured under, repeatable (--env NCCL_ALGO=Tree --env NCCL_PROTO=Simple): "
             "every row's env column gets their label, as a sweep's --env-axis rows do, and `commbench tune` compares "
             "the labels [default: none, the tool's own choice].")


@click.group(name="import")
def import_group() -> None:
    """Read nccl-tests, PARAM or NCCL Inspector results into a commbench run folder that report, fit, compare and the
    gate read."""


def _command(source: Source) -> click.Command:
    @click.command(name=source.command, help=_HELP[source.command] + """
    Exit codes: 0 imported; 1 imported, but the source reports wrong results; 2 bad input.""")
    @click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
    @click.option("--collective", default=None,
                  help="The collective of tables whose file does not name it (e.g. all_reduce).")
    @click.option("--world-size", type=click.IntRange(min=1), default=None,
                  help="Ranks, for files without the tool's rank lines.")
    @click.option("--partial", is_flag=True,
                  help="Keep the rows of a table that ends without its closing lines (a cut log).")
    @click.option("--env", "environment", multiple=True, metavar="NAME=VALUE", help=_ENV_HELP)
    @machine_options("The machine that wrote the files", "each row gets its expected busbw")
    @run_options
    def command(files: tuple[Path, ...], collective: str | None, world_size: int | None, partial: bool,
                environment: tuple[str, ...], machine: str | None, facts_file: str | None, out: Path,
                run_id: str | None, quiet: bool, as_json: bool) -> None:
        from commbench.expect import chosen_facts
        from commbench.imports import read_file
        from commbench.imports.environment import environment_label
        from commbench.imports.write import hosts_of

        env = environment_label(environment)  # refused before any file is read
        named = chosen_facts(machine, facts_file) if machine or facts_file else None
        imported = [read_file(source, path, collective=source.collective_option(collective) if collective else None,
                              world_size=world_size, partial=partial) for path in files]
        _write_run(source, imported, named, env, hosts=len(hosts_of(imported)), out=out, run_id=run_id, quiet=quiet,
                   as_json=as_json)

    return command


def _write_run(source: Source, imported: list[ImportedFile], named: "FactsAndOrigin | None", env: str, *, hosts: int,
               out: Path, run_id: str | None, quiet: bool, as_json: bool, warnings: tuple[str, ...] = ()) -> NoReturn:
    """The files read as one run folder (a row's expected busbw where a machine is named), what the import found
    printed, and the exit code."""
    from commbench.expect.rows import for_import
    from commbench.imports.summary import document, exit_code, summary_lines
    from commbench.imports.write import one_world, write_run
    from commbench.sweep.env_axes import parse_label

    collectives = list(dict.fromkeys(row.collective for item in imported for test in item.tests for row in test.rows))
    expectation = for_import(named, collectives, world=one_world(imported), hosts=hosts, device=imported[0].device,
                             env=parse_label(env))
    run_dir = write_run(imported, out=out, run_id=run_id, factor=source.factor, expectation=expectation, env=env)
    code = exit_code(imported)
    lines = summary_lines(imported, run_dir)
    if not (quiet or as_json):
        click.echo("\n".join(lines["out"]))
    for line in [*lines["err"], *warnings]:
        click.echo(line, err=True)
    sys.exit(finish_run(run_dir, ExitCode(code), document(imported, run_dir, code), quiet=quiet, as_json=as_json))


@click.command(name="nccl-inspector")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--world-size", type=click.IntRange(min=1), default=None, metavar="N",
              help="Import the communicators of N ranks only (a run has one world size) [default: every "
                   "communicator, refused where their sizes differ].")
@click.option("--communicator", "communicators", multiple=True, metavar="ID|NAME",
              help="Import this communicator only: its id (0x7f8c496ae9f661) or comm_name (DP Group 0); repeatable.")
@click.option("--dtype", type=click.Choice(DTYPES), default=None,
              help="The dtype of the job's collectives, which the Inspector does not log: rows get it and their "
                   "element count, and compare can join them with a sweep of that dtype [default: unknown].")
@click.option("--op", type=click.Choice(REDUCE_OPS), default=None,
              help="The reduction of the job's all_reduce, reduce and reduce_scatter calls, which the Inspector does "
                   "not log [default: unknown].")
@click.option("--env", "environment", multiple=True, metavar="NAME=VALUE", help=_ENV_HELP)
@machine_options("The machine the job ran on", "each row gets its expected busbw")
@run_options
def inspector_command(files: tuple[Path, ...], world_size: int | None, communicators: tuple[str, ...],
                      dtype: str | None, op: str | None, environment: tuple[str, ...], machine: str | None,
                      facts_file: str | None, out: Path, run_id: str | None, quiet: bool, as_json: bool) -> None:
    """Read NCCL Inspector JSON logs of a live job (format v4.0 to v4.3, verbose or not) into a run folder.

    NVIDIA's Inspector profiler plugin (NCCL_PROFILER_PLUGIN=libnccl-profiler-inspector.so, NCCL_INSPECTOR_ENABLE=1)
    writes one file per process under NCCL_INSPECTOR_DUMP_DIR, a JSON record per collective call per communicator.
    Each rank's log gives one row per collective, size, algorithm/protocol (algo_proto, v4.2 on) and communicator:
    the median call's time with the log's algbw and busbw for it, the call count (iters), the other statistics of
    the calls, and every call in samples.csv. The world size is the communicator's n_ranks, the hosts the records'
    hostname. p2p records, and All2All and AllGatherV (no bandwidth logged), are skipped with a warning.

    Exit codes: 0 imported; 2 bad input (not Inspector JSON, another format version, no collective record,
    communicators of several sizes without --world-size or --communicator).
    """
    from commbench.expect import chosen_facts
    from commbench.imports import read_file
    from commbench.imports.environment import environment_label
    from commbench.imports.nccl_inspector import NO_DTYPE_WARNING, TOOL, Selection, choose

    source = SOURCES[TOOL]
    env = environment_label(environment)  # refused before any file is read
    named = chosen_facts(machine, facts_file) if machine or facts_file else None
    selection = Selection(world_size=world_size, communicators=communicators, dtype=dtype, op=op)
    imported = [read_file(source, path, selection=selection) for path in files]
    choose(imported, selection)
    # the communicator's nodes (its header's nnodes), not only the hosts whose logs were passed
    nodes = max(test.closing["nnodes"] for item in imported for test in item.tests)
    _write_run(source, imported, named, env, hosts=nodes, out=out, run_id=run_id, quiet=quiet, as_json=as_json,
               warnings=(f"commbench: warning: {NO_DTYPE_WARNING}",) if dtype is None else ())


_BUILT = {"nccl-inspector": inspector_command}
"""Sources whose options are their own; the others share _command's."""
for _source in SOURCES.values():
    import_group.add_command(_BUILT.get(_source.command) or _command(_source))
