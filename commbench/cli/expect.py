"""`commbench expect`: the busbw each collective should reach on a machine, from its topology, beside published
figures."""

import click

from commbench.cli.json_output import emit_json, json_option
from commbench.errors import CommbenchError
from commbench.names import CPU, CUDA

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
@json_option
def expect(machine, facts_file, nodes, ranks_per_node, collectives, as_json) -> None:
    """Expected busbw per collective from the machine's topology: NVLink/PCIe, NICs, or host copy and loopback on
    CPU, with the model's terms, NCCL's latency floor and published figures.

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
    facts, origin = chosen_facts(machine, facts_file)
    device = CUDA if facts.gpus_per_node else CPU
    per_node = ranks_per_node or facts.gpus_per_node or 2
    scopes = sorted({1, nodes})
    expectations = [expect_busbw(facts, collective, nodes=count, ranks_per_node=per_node, device=device)
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
