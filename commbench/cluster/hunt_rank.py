"""The rank side of `commbench hunt`: one process-group session in three points (the kind's points), every rank
taking part in each.

1. intra: each node's own ranks all_reduce at a few large sizes, all nodes at once (a node with one rank skips), and
   on GPUs each rank reads its GPU's NVML health facts;
2. pairs: node pairs round by round (circle method or random rounds), every pair of a round at once, each lane (local
   rank j with local rank j) exchanging both ways on the world group: bandwidth at --pair-size, latency at
   --latency-size;
3. second_pass: rank 0 diagnoses the first two, every suspect is measured again against known-good nodes
   (--confirm-repeats times, the samples pooled), and rank 0 names the suspects (rows, hunt.json, the node matrices).

Communicators: the world's, and one group per node with several ranks (made once, in prepare); none per pair, round
or size (commbench/cluster/exchange.py). meta.json's communicators_created counts them.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from commbench import faults, store
from commbench.bench_kind import Measured, RankRun
from commbench.cluster import exchange, hunt_rows
from commbench.cluster.diagnosis import Pair
from commbench.cluster.gpu_health import FactsByNode
from commbench.cluster.nodes import Layout, node_name
from commbench.cluster.pairing import circle_rounds, random_rounds
from commbench.cluster.specs import HuntPhase, HuntSettings, PhasePoint

if TYPE_CHECKING:
    import torch.distributed as dist

    from commbench.bench_kind import RankContext

Round = Sequence[Pair]
"""Node pairs measured at the same time."""
PairTest = tuple[str, int, int]
"""(test, bytes, timed exchanges) of a pair measurement."""
T = TypeVar("T")


@dataclass
class HuntState:
    layout: Layout
    node: str
    communicators: exchange.Communicators = field(default_factory=exchange.Communicators)
    """Made with the state, once per launch: the world's and the node groups (meta.json's communicators_created)."""
    intra_group: dist.ProcessGroup | None = None
    intra_members: list[int] | None = None
    rows: list[dict] = field(default_factory=list)
    """Rank 0: every measurement row so far (the diagnosis reads them)."""
    times: hunt_rows.Times = field(default_factory=dict)
    """Rank 0: every pair measurement's samples in seconds, one list per repeat, by (phase, test, node_a, node_b)
    (the rank, stall and repeat tests read them)."""
    gpu_facts: FactsByNode = field(default_factory=dict)


def prepare(spec: HuntSettings, ctx: RankContext) -> HuntState:
    layout = Layout.from_names(ctx.gather_objects(node_name()))
    state = HuntState(layout, layout.node_of(ctx.rank))
    for node in layout.nodes:  # every rank creates every node's group, in the same order
        members = list(layout.ranks[node])
        if len(members) >= 2:
            group = state.communicators.new_group(members)
            if ctx.rank in members:
                state.intra_group, state.intra_members = group, members
    return state


def measure(spec: HuntSettings, point: PhasePoint, run: RankRun) -> Measured:
    phases: dict[HuntPhase, Callable[[HuntSettings, RankContext, HuntState, RankRun], list[dict]]] = {
        "intra": _intra, "pairs": _pairs, "second_pass": _second_pass}
    state: HuntState = run.state
    rows = phases[point.phase](spec, run.ctx, state, run)
    if run.ctx.rank != 0:
        return Measured(None)
    stamped = [{**row, "run_id": run.run_id} for row in rows]
    state.rows += stamped
    for row in stamped:
        if "_repeats" in row:
            state.times[hunt_rows.times_key(row)] = row.pop("_repeats")
    samples = [sample for row in stamped for sample in row.pop("_samples", [])]
    return Measured(stamped[0] if stamped else None, samples=samples, rows=stamped[1:])


def _intra(spec: HuntSettings, ctx: RankContext, state: HuntState, run: RankRun, *,
           nodes: tuple[str, ...] | None = None, phase: HuntPhase = "intra") -> list[dict]:
    """Each node's all_reduce (only `nodes`, when given); rank 0 gets the rows."""
    mine: list[tuple[int, exchange.Timed]] = []
    group, members = state.intra_group, state.intra_members  # prepare sets both or neither
    leader = False
    if group is not None and members is not None and (nodes is None or state.node in nodes):
        share = faults.send_slowdown(state.node, None)
        for size in spec.intra_sizes:
            timed = exchange.all_reduce(ctx, group, members, size_bytes=size,
                                        warmup=spec.warmup, iters=spec.iters, slow_share=share)
            mine.append((size, timed))
        leader = ctx.rank == members[0]
    facts = None
    if phase == "intra" and ctx.platform.has_gpu:
        from commbench.cluster.gpu_health import read_facts

        facts = read_facts(ctx.device.index, ctx.platform.gpu_uuid())
    gathered = ctx.gather_objects((state.node, mine if leader else None, facts))
    if ctx.rank != 0:
        return []
    rows = []
    for node, measured, gpu in gathered:
        if gpu is not None:
            state.gpu_facts.setdefault(node, []).append(gpu)
        for size, timed in measured or []:
            rows.append(hunt_rows.intra_row(spec, phase, node, state.layout, size, timed))
    if phase == "intra":
        single = [node for node in state.layout.nodes if len(state.layout.ranks[node]) == 1]
        if single:
            rows.append(hunt_rows.note_row(spec, state.layout, hunt_rows.single_rank_note(single)))
        if not ctx.platform.has_gpu:
            rows.append(hunt_rows.note_row(spec, state.layout, "NVML health facts not read: the ranks run on CPU"))
    return rows


def _rounds(spec: HuntSettings, layout: Layout) -> Sequence[Round]:
    nodes = list(layout.nodes)
    if len(nodes) < 2:
        return []
    if spec.random_rounds:
        return random_rounds(nodes, spec.random_rounds, seed=spec.seed)
    return circle_rounds(nodes)


FIRST_PASS_REPEATS = 2
"""The first pass measures every round twice (all rounds, then all again): a pair's two measurements minutes apart
say how much a healthy figure moves on its own, and a node is a suspect only when it is slow in both."""


def _pairs(spec: HuntSettings, ctx: RankContext, state: HuntState, run: RankRun, *,
           rounds: Sequence[Round] | None = None, phase: HuntPhase = "pairs", controls: Collection[Pair] = frozenset(),
           repeats: int = 1) -> list[dict]:
    """Every pair of `rounds` measured `repeats` times over (the rounds in turn, then again); a pair's repeats
    pooled into one row per test. Rank 0 gets the rows."""
    layout = state.layout
    if rounds is None:
        rounds = _rounds(spec, layout)
        # the first round once untimed: measured first, it read ~40 % slower than the same pairs later (processes
        # still settling after start), enough to make a healthy pair look slow
        rounds = [*rounds[:1], *[round_ for _ in range(FIRST_PASS_REPEATS) for round_ in rounds]] if rounds else rounds
        settling = 1 if rounds else 0
    else:
        rounds, settling = [round_ for _ in range(repeats) for round_ in rounds], 0
    if spec.pairs_at_once:  # a round in parts; the settling round's parts stay untimed
        settling = sum(len(_chunks(round_, spec.pairs_at_once)) for round_ in rounds[:settling])
        rounds = [part for round_ in rounds for part in _chunks(round_, spec.pairs_at_once)]
    measured: dict[Pair, list[dict[str, exchange.Timed]]] = {}
    for index, round_ in enumerate(rounds):
        result: tuple[Pair, dict[str, exchange.Timed]] | None = None
        mine = _my_lane(layout, round_, ctx.rank)
        if mine is not None:
            pair, lane, peer = mine
            share = faults.send_slowdown(state.node, layout.node_of(peer))
            stall = faults.node_stall(state.node)
            timed = {test: exchange.transfer(ctx, peer=peer, sends=True, receives=True, size_bytes=size,
                                             warmup=spec.warmup, iters=iters, slow_share=share, stall=stall)
                     for test, size, iters in _pair_tests(spec)}
            if ctx.rank == lane[0]:
                result = (pair, timed)
        for found in ctx.gather_objects(result):
            if found is not None and ctx.rank == 0 and index >= settling:
                pair, timed = found
                measured.setdefault(pair, []).append(timed)
    if ctx.rank != 0:
        return []
    rows = []
    for pair, lane_results in measured.items():
        lane_count = len(layout.lanes(*pair))
        for test, size, _ in _pair_tests(spec):
            # the lanes of one measurement at once (the slowest per iteration), then the repeats one after another
            per_measurement = [exchange.Timed.of_lanes([found[test] for found in lanes])
                               for lanes in _chunks(lane_results, lane_count)]
            row = hunt_rows.pair_row(spec, phase, test, pair, layout, lane_count, size,
                                     exchange.Timed.repeated(per_measurement), control=pair in controls)
            rows.append({**row, "_repeats": [timed.samples_s for timed in per_measurement]})
    return rows


def _chunks(items: Sequence[T], size: int) -> list[Sequence[T]]:
    return [items[start:start + size] for start in range(0, len(items), size)]


def _my_lane(layout: Layout, round_: Round, rank: int) -> tuple[Pair, tuple[int, int], int] | None:
    """(node pair, lane, peer rank) of this rank in a round, or None when it sits the round out."""
    for pair in round_:
        for lane in layout.lanes(*pair):
            if rank in lane:
                return pair, lane, lane[1] if lane[0] == rank else lane[0]
    return None


def _pair_tests(spec: HuntSettings) -> tuple[PairTest, ...]:
    """(test, bytes, timed exchanges) of each pair measurement."""
    return ("bandwidth", spec.pair_size, spec.iters), ("latency", spec.latency_size, spec.latency_iters)


def _second_pass(spec: HuntSettings, ctx: RankContext, state: HuntState, run: RankRun) -> list[dict]:
    from commbench.cluster.confirmation import confirm_plan

    plan = None
    if ctx.rank == 0:
        first = hunt_rows.diagnose_rows(state.rows, state.times, spec, state.layout)
        plan = confirm_plan(list(state.layout.nodes), first, partners=spec.confirm_partners)
    plan = ctx.broadcast_object(plan)
    rows = _pairs(spec, ctx, state, run, rounds=plan.rounds, phase="second_pass", controls=set(plan.controls),
                  repeats=spec.confirm_repeats)
    rows += _intra(spec, ctx, state, run, nodes=plan.intra, phase="second_pass")
    if ctx.rank != 0:
        return []
    measured = state.rows + rows  # measure() adds this point's rows to state.rows once it returns
    times = {**state.times, **{hunt_rows.times_key(row): row["_repeats"] for row in rows if "_repeats" in row}}
    final = hunt_rows.confirm_rows(measured, times, spec, state.layout, state.gpu_facts)
    assert run.run_dir is not None  # the driver gives every rank the run folder
    hunt_rows.write_outputs(run.run_dir, spec, state.layout, measured, final, state.gpu_facts)
    store.update_meta(run.run_dir, communicators_created=state.communicators.created)
    return rows + hunt_rows.finding_rows(spec, state.layout, final)
