"""`commbench import nccl-tests|param FILE...`: other tools' results as a commbench run folder (exit 0 imported, 1
imported but the source reports wrong results, 2 bad input: not the tool's output, a cut table, mixed world
sizes)."""

from pathlib import Path

import click

from commbench.cli.shared import finish_run, machine_options, run_options
from commbench.errors import ExitCode
from commbench.imports import SOURCES, Source

_HELP = {
    "nccl-tests": """Read nccl-tests results (text output of any version, or its -J JSON) into a run folder.

    The collective comes from the file (its *_perf command line or '# Collective test starting' line), else from
    --collective; the world size from its '#  Rank N … on HOST' lines, else from --world-size. Several files (e.g.
    all_reduce_perf.log all_gather_perf.log) make one run; lines prefixed by mpirun --tag-output or srun --label are
    read as well. Rows keep nccl-tests' time, algbw and busbw as printed; busbw_check says whether the busbw follows
    from the size and time, and meta.json keeps the '# Avg bus bandwidth' line, checked against the rows.
    """,
    "param": """Read PARAM comms benchmark results (its COMMS-RES tables, train/comms/pt/comms.py) into a run folder.

    World size, host and device come from PARAM's 'Hello from Rank' lines (else --world-size), the backend from its
    'backend:' line. Rows keep PARAM's p50 as the time and its algbw and busbw as printed; time_us_p75, time_us_p95,
    time_us_min and time_us_max keep the other percentiles (all across ranks).
    """,
}


@click.group(name="import")
def import_group() -> None:
    """Read nccl-tests or PARAM results into a commbench run folder that report, fit, compare and the gate read."""


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
    @click.option("--env", "environment", multiple=True, metavar="NAME=VALUE",
                  help="A variable the files were measured under, repeatable (--env NCCL_ALGO=Tree --env "
                       "NCCL_PROTO=Simple): every row's env column gets their label, as a sweep's --env-axis rows "
                       "do, and `commbench tune` compares the labels [default: none, the tool's own choice].")
    @machine_options("The machine that wrote the files", "each row gets its expected busbw")
    @run_options
    def command(files, collective, world_size, partial, environment, machine, facts_file, out, run_id, quiet,
                as_json) -> None:
        from commbench.expect import chosen_facts
        from commbench.expect.rows import for_import
        from commbench.imports import read_file
        from commbench.imports.environment import environment_label
        from commbench.imports.summary import document, exit_code, summary_lines
        from commbench.imports.write import hosts_of, one_world, write_run

        env = environment_label(environment)  # refused before any file is read
        named = chosen_facts(machine, facts_file) if machine or facts_file else None
        options = {"collective": source.collective_option(collective) if collective else None,
                   "world_size": world_size, "partial": partial}
        imported = [read_file(source, path, **options) for path in files]
        collectives = list(dict.fromkeys(row.collective for item in imported for test in item.tests
                                         for row in test.rows))
        expectation = for_import(named, collectives, world=one_world(imported), hosts=len(hosts_of(imported)),
                                 device=imported[0].device)
        run_dir = write_run(imported, out=out, run_id=run_id, factor=source.factor, expectation=expectation,
                            env=env)
        code = exit_code(imported)
        lines = summary_lines(imported, run_dir)
        if not (quiet or as_json):
            click.echo("\n".join(lines["out"]))
        for line in lines["err"]:
            click.echo(line, err=True)
        finish_run(run_dir, ExitCode(code), document(imported, run_dir, code), quiet=quiet, as_json=as_json)

    return command


for _source in SOURCES.values():
    import_group.add_command(_command(_source))
