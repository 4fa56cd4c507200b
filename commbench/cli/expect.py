"""`commbench expect`: the busbw each collective should reach on a machine, from its topology, beside published
figures."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from commbench.cli.json_output import emit_json, json_option
from commbench.errors import CommbenchError
from commbench.names import CPU, CUDA

if TYPE_CHECKING:
    from commbench.expect.nccl_choice import NcclContext

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "sendrecv")


@click.command()
@click.option("--machine", metavar="PRESET", help="A named machine (dgx-h100, aws-p4d, ...; `--machine list` lists "
              "them) instead of this one.")
@click.option("--facts", "facts_file", metavar="FILE", help="A facts file (`commbench env --json > FILE` on that "
              "machine) instead of this one.")
@click.option("--nodes", type=click.IntRange(min=1), default=1, show_default=True,
              help="Nodes: 1 gives the intra-node figures, more gives those across that many nodes too.")
@click.option("--ranks-per-node", type=click.IntRange(min=1), default=None,
              help="Ranks on each node [default: its GPUs, else 2].")
@click.option("--collective", "collectives", metavar="C[,C...]", help=f"[default: {', '.join(COLLECTIVES)}]")
@click.option("--nccl-version", metavar="X.Y", default=None,
              help="The NCCL the runs use: NVLS needs 2.17, NVLS-tree 2.18 [default: a current NCCL].")
@click.option("--env", "environment", multiple=True, metavar="NAME=VALUE",
              help="NCCL variables the runs set (NCCL_ALGO, NCCL_NVLS_ENABLE), repeatable [default: this shell's].")
@json_option
def expect(machine: str | None, facts_file: str | None, nodes: int, ranks_per_node: int | None,
           collectives: str | None, nccl_version: str | None, environment: tuple[str, ...], as_json: bool) -> None:
    """Expected busbw per collective: what a healthy machine reaches with the algorithm NCCL would pick, and the
    physical ceiling beside it, from the machine's topology (NVLink/PCIe, NICs, or host copy and loopback on CPU),
    with the model's terms, NCCL's latency floor and published figures.

    Exit codes: 0 printed, 2 bad input."""
    from commbench.expect import chosen_facts
    from commbench.expect.model import MODEL_DIFFERENCES
    from commbench.expect.model import expect as expect_busbw
    from commbench.expect.presets import PRESETS, published_for
    from commbench.expect.table import render

    if machine == "list":
        for name, facts in PRESETS.items():
            click.echo(f"{name}: {facts.gpus_per_node} × {facts.gpu}")
        return
    chosen = _collectives(collectives)
    nccl = _nccl_context(nccl_version, environment)
    facts, origin = chosen_facts(machine, facts_file)
    device = CUDA if facts.gpus_per_node else CPU
    per_node = ranks_per_node or facts.gpus_per_node or 2
    scopes = sorted({1, nodes})
    expectations = [expect_busbw(facts, collective, nodes=count, ranks_per_node=per_node, device=device, nccl=nccl)
                    for count in scopes for collective in chosen]
    published = {(collective, count): published_for(facts.name, collective, count) if machine else []
                 for count in scopes for collective in chosen}
    if as_json:
        emit_json({"machine": facts.name, "origin": origin, "facts": facts.to_json(),
                   "expectations": [item.to_json() for item in expectations],
                   "published": [vars(figure) for found in published.values() for figure in found],
                   "model_differences": list(MODEL_DIFFERENCES) if facts.gpus_per_node else []})
        return
    click.echo(render(facts, origin, expectations, published))


def _collectives(text: str | None) -> tuple[str, ...]:
    if not text:
        return COLLECTIVES
    chosen = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in chosen if name not in COLLECTIVES]
    if unknown or not chosen:
        raise CommbenchError(f"--collective {text!r}: unknown {', '.join(unknown) or 'empty list'}; choose from "
                             f"{', '.join(COLLECTIVES)}")
    return chosen


def _nccl_context(version: str | None, environment: tuple[str, ...]) -> NcclContext:
    import os

    from commbench.expect.nccl_choice import NcclContext

    parsed = None
    if version is not None:
        parts = version.strip().split(".")
        if len(parts) < 2 or not all(part.isdigit() for part in parts):
            raise CommbenchError(f"--nccl-version {version!r} is not a version; write it as 2.21 or 2.21.5")
        parsed = tuple(int(part) for part in parts)
    env = {name: value for name, value in os.environ.items() if name.startswith("NCCL_")} if not environment else {}
    for item in environment:
        name, equals, value = item.partition("=")
        if not equals or not name.strip():
            raise CommbenchError(f"--env {item!r} is not NAME=VALUE; write it as --env NCCL_ALGO=Ring")
        env[name.strip()] = value
    return NcclContext(parsed, env)
