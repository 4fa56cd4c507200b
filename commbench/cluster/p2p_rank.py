"""The rank side of `commbench p2p`: every ordered rank pair sends --sizes bytes one way, timed and checked; the pairs
of a round (circle method over ranks) at once, or (--schedule serial) one pair at a time with every other rank idle.
Every transfer runs on the world group (commbench/cluster/exchange.py): no communicator per pair, round or size."""

from dataclasses import dataclass

from commbench import faults, store
from commbench.bench_kind import Measured
from commbench.cluster import exchange, p2p_rows
from commbench.cluster.nodes import Layout, node_name
from commbench.cluster.pairing import circle_rounds

CONCURRENT, SERIAL = "concurrent", "serial"


@dataclass
class P2pState:
    layout: Layout
    node: str


def prepare(spec, ctx) -> P2pState:
    layout = Layout.from_names(ctx.gather_objects(node_name()))
    return P2pState(layout, layout.node_of(ctx.rank))


def rounds(world: int, schedule: str) -> list[list[tuple[int, int]]]:
    pairs = circle_rounds(list(range(world)))
    return pairs if schedule == CONCURRENT else [[pair] for round_ in pairs for pair in round_]


def measure(spec, point, run) -> Measured:
    ctx, state = run.ctx, run.state
    rows = []
    for round_ in rounds(ctx.world, spec.schedule):
        found = []
        pair = next((pair for pair in round_ if ctx.rank in pair), None)
        if pair is not None:
            for source, destination in (pair, tuple(reversed(pair))):  # one way, then the other
                sends = ctx.rank == source
                peer = destination if sends else source
                share = faults.send_slowdown(state.node, state.layout.node_of(peer)) if sends else 0.0
                timed = exchange.transfer(ctx, peer=peer, sends=sends, receives=not sends,
                                          size_bytes=point.size_bytes, warmup=spec.warmup, iters=spec.iters,
                                          slow_share=share, stall=faults.node_stall(state.node) if sends else None)
                if ctx.rank == min(pair):
                    found.append((source, destination, timed))
        for measured in ctx.gather_objects(found):
            if ctx.rank == 0:
                rows += [p2p_rows.pair_row(spec, state.layout, source, destination, point.size_bytes, timed)
                         for source, destination, timed in measured]
    if ctx.rank != 0:
        return Measured(None)
    rows = [{**row, "run_id": run.run_id} for row in sorted(rows, key=lambda row: (row["src"], row["dst"]))]
    p2p_rows.write_matrices(run.run_dir, rows, ctx.world, point.size_bytes, spec.statistic)
    store.update_meta(run.run_dir, communicators_created=exchange.communicators_created())
    samples = [sample for row in rows for sample in row.pop("_samples")]
    return Measured(rows[0], samples=samples, rows=rows[1:])
