"""`commbench tune RUN... [--out nccl_tuner.conf]`: the NCCL algorithm/protocol to force per collective and size
range, from runs measured under several NCCL_ALGO / NCCL_PROTO settings, as the CSV NVIDIA's example tuner plugin
reads (commbench/tune/)."""

import shlex
from pathlib import Path

import click

from commbench.cli.json_output import emit_json, json_option

DEFAULT_MARGIN_PCT = 5.0


@click.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), default=None, metavar="FILE",
              help="Write the tuner config here (e.g. nccl_tuner.conf; NCCL reads it through NVIDIA's example "
                   "tuner plugin, NCCL_TUNER_CONFIG_FILE) [default: print only].")
@click.option("--any-topology", is_flag=True,
              help="nNodes and nRanks -1 on every line: the lines apply at any node and rank count, not only at "
                   "the runs' own.")
@click.option("--margin-pct", type=click.FloatRange(min=0), default=DEFAULT_MARGIN_PCT, show_default=True,
              metavar="PCT",
              help="Where a row has no CI (imports: one printed time), the best setting must be faster than the "
                   "second by more than PCT percent to win; with CIs, its CI must lie below every other's.")
@json_option
def tune(runs: tuple[Path, ...], out: Path | None, any_topology: bool, margin_pct: float, as_json: bool) -> None:
    """Compare the environment combinations the runs measured (rows keyed by env: a sweep's --nccl-algo,
    --nccl-proto or --env-axis, or imports labelled with --env), per collective, dtype, op, placement, timing mode
    and topology; print, per size range, the fastest combination, its margin over the second and whether it wins
    beyond noise, with each combination's α–β fit and where the fits cross; and write the lines NVIDIA's example
    tuner plugin reads: collective,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks.

    A size gets a line only where one setting wins beyond noise in every variant measured at that size and the
    plugin can express it; where settings tie or NCCL's own choice wins, NCCL keeps deciding. docs/tune.md has the
    whole loop: sweep the axes, tune, a tuned sweep with --tuner-config and --tuner-plugin, compare.

    Exit codes: 0 done; 2 bad input (no runs, a folder that is not a run, a run that did not complete, no collective
    rows, no environment variation)."""
    from commbench.tune import config_file, report
    from commbench.tune.analysis import analyse

    analysis = analyse(runs, margin_pct=margin_pct, any_topology=any_topology)
    command = shlex.join(["commbench", "tune", *map(str, runs), *(["--out", str(out)] if out else []),
                          *(["--any-topology"] if any_topology else []),
                          *(["--margin-pct", f"{margin_pct:g}"] if margin_pct != DEFAULT_MARGIN_PCT else [])])
    if out is not None:
        text = config_file.config_text(report.file_header(analysis, command), analysis.plan.lines,
                                       report.file_footer(analysis))
        config_file.write(out, text)
    if as_json:
        emit_json(report.document(analysis, command=command, out=out, written=out is not None))
        return
    for line in report.table_lines(analysis):
        click.echo(line)
    click.echo(f"# written: {out} (NCCL_TUNER_CONFIG_FILE={out} NCCL_TUNER_PLUGIN=<libnccl-tuner-example.so>)"
               if out is not None else "# not written: pass --out FILE to write the tuner config")
