"""The rank side of `commbench p2p`: every ordered rank pair sends --sizes bytes one way, timed and checked; the pairs
of a round (circle method over ranks) at once, or (--schedule serial) one pair at a time with every other rank idle.
Every transfer runs on the world group (commbench/cluster/exchange.py): no communicator per pair, round or size."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from commbench import faults, store
from commbench.bench_kind import Measured, RankRun
from commbench.cluster import exchange, p2p_rows
from commbench.cluster.nodes import Layout, node_name
from commbench.cluster.pairing import circle_rounds
from commbench.cluster.specs import P2pSettings, Schedule, SizePoint

if TYPE_CHECKING:
    from commbench.bench_kind import RankContext

CONCURRENT: Schedule = "concurrent"


@dataclass
class P2pState:
    layout: Layout
    node: str
    communicators: exchange.Communicators = field(default_factory=exchange.Communicators)
    """Made with the state, once per launch: the world's alone (every transfer runs on it)."""


def prepare(spec: P2pSettings, ctx: RankContext) -> P2pState:
    layout = Layout.from_names(ctx.gather_objects(node_name()))
    return P2pState(layout, layout.node_of(ctx.rank))


def rounds(world: int, schedule: Schedule) -> list[list[tuple[int, int]]]:
    pairs = circle_rounds(list(range(world)))
    return pairs if schedule == CONCURRENT else [[pair] for round_ in pairs for pair in round_]


def measure(spec: P2pSettings, point: SizePoint, run: RankRun) -> Measured:
    ctx: RankContext = run.ctx
    state: P2pState = run.state
    rows: list[dict] = []
    for round_ in rounds(ctx.world, spec.schedule):
        found: list[tuple[int, int, exchange.Timed]] = []
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
    assert run.run_dir is not None  # the driver gives every rank the run folder
    rows = [{**row, "run_id": run.run_id} for row in sorted(rows, key=lambda row: (row["src"], row["dst"]))]
    p2p_rows.write_matrices(run.run_dir, rows, ctx.world, point.size_bytes, spec.statistic)
    store.update_meta(run.run_dir, communicators_created=state.communicators.created)
    samples = [sample for row in rows for sample in row.pop("_samples")]
    return Measured(rows[0], samples=samples, rows=rows[1:])
