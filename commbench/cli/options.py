"""Flags shared by the commands that launch ranks: where they run, how many, and where the results go."""

from pathlib import Path

import click

RUN_OPTION_NAMES = ("out", "run_id", "quiet")
"""Options of the run as a whole (not of a bench): a suite sets them once, on `commbench run`."""


def split_commas(ctx, param, values) -> tuple[str, ...]:
    """Repeatable options also take comma lists: -c all_reduce,all_gather."""
    return tuple(part.strip() for value in values for part in value.split(",") if part.strip())


def target_options(function):
    """--backend, --device and --nproc."""
    function = click.option("--nproc", type=int, default=None,
                            help="Ranks on this machine [default: every visible GPU, else 2].")(function)
    function = click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto",
                            show_default=True, help="Tensor device; auto = cuda when a GPU is visible.")(function)
    function = click.option("--backend", type=click.Choice(["auto", "nccl", "gloo"]), default="auto",
                            show_default=True, help="Process-group backend; auto = nccl on cuda, else gloo.")(function)
    return function


def run_options(function):
    """--out, --run-id and --quiet."""
    options = [
        click.option("--out", type=click.Path(path_type=Path), default=Path("results"), show_default=True,
                     help="Folder that receives results/<run-id>/."),
        click.option("--run-id", default=None, help="Name of the run folder [default: UTC time + host]."),
        click.option("-q", "--quiet", is_flag=True, help="No progress bar and no tables; print the results path."),
    ]
    for option in reversed(options):
        function = option(function)
    return function
