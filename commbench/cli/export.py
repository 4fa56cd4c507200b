"""`commbench export FORMAT RUN...`: runs in another tool's format (Prometheus text exposition)."""

import warnings
from pathlib import Path

import click

PROM_SUFFIX = ".prom"
"""The only files node_exporter's textfile collector reads."""


@click.group(name="export")
def export_group() -> None:
    """Write runs in another tool's format."""


@export_group.command(name="prometheus")
@click.argument("runs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), default=None, metavar="FILE",
              help="Write the exposition here, replacing the file atomically (a scrape never reads half of it): a "
                   "*.prom file in node_exporter's --collector.textfile.directory [default: stdout].")
def prometheus(runs: tuple[Path, ...], out: Path | None) -> None:
    """Prometheus text exposition of runs (collective sweeps and imports, ddp / fsdp / zero runs, hunt runs, and
    the benches of suite runs), for node_exporter's textfile collector.

    Collective rows become NCCL Inspector's nccl_bus_bandwidth_gbs and nccl_collective_exec_time_microseconds with
    its labels (collective AllReduce, message_size 64-65KB, algo_proto RING_SIMPLE, node, n_nodes, nranks, ...) and
    the row's keys (run_id, dtype, size_bytes, env, ...), so NVIDIA's Grafana template draws them beside a live
    job's; commbench_* families carry what the Inspector has no metric for: CI bounds, wrong elements, training step
    time and exposed communication, hunt suspects per node and per link. docs/export.md lists every family and
    label.

    Exit codes: 0 written; 2 bad input (a folder that is not a run, a run of a kind without metrics, nothing to
    export, two runs with one run_id, an --out that cannot be written)."""
    from commbench.errors import CommbenchWarning
    from commbench.export import exposition
    from commbench.export.prometheus import exposition_text

    if out is not None and out.suffix != PROM_SUFFIX:
        warnings.warn(f"--out {out} does not end in {PROM_SUFFIX}: node_exporter's textfile collector reads only "
                      f"*{PROM_SUFFIX} files", CommbenchWarning, stacklevel=1)
    text = exposition_text(runs)
    if out is None:
        click.echo(text, nl=False)
        return
    exposition.write_file(out, text)
    lines = text.count("\n")
    click.echo(f"# written: {out} ({lines} lines)")
