"""Flags shared by the commands that launch ranks: where they run and how many."""

import click


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
