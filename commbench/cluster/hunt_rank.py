"""The rank side of `commbench hunt`: one process-group session in three points (the kind's points), every rank
taking part in each.

1. intra: each node's own ranks all_reduce at a few large sizes, all nodes at once (a node with one rank skips), and
   on GPUs each rank reads its GPU's NVML health facts;
2. pairs: node pairs round by round (circle method or random rounds), every pair of a round at once in its own process
   group, each lane (local rank j with local rank j) exchanging both ways: bandwidth at --pair-size, latency at
   --latency-size;
3. second_pass: rank 0 diagnoses the first two, every suspect is measured again against known-good nodes, and rank 0
   names the suspects (rows, hunt.json, the node matrices).
"""

from dataclasses import dataclass, field

from commbench import faults
from commbench.bench_kind import Measured
from commbench.cluster import exchange, hunt_rows
from commbench.cluster.nodes import Layout, node_name
from commbench.cluster.pairing import circle_rounds, random_rounds


@dataclass
class HuntState:
    layout: Layout
    node: str
    intra_group: object = None
    intra_members: list[int] | None = None
    rows: list[dict] = field(default_factory=list)
    """Rank 0: every measurement row so far (the diagnosis reads them)."""
    gpu_facts: dict[str, list[dict]] = field(default_factory=dict)


def prepare(spec, ctx) -> HuntState:
    import torch.distributed as dist

    layout = Layout.from_names(ctx.gather_objects(node_name()))
    state = HuntState(layout, layout.node_of(ctx.rank))
    for node in layout.nodes:  # every rank creates every node's group, in the same order
        members = list(layout.ranks[node])
        if len(members) >= 2:
            group = dist.new_group(ranks=members)
            if ctx.rank in members:
                state.intra_group, state.intra_members = group, members
    return state


def measure(spec, point, run) -> Measured:
    phase = {"intra": _intra, "pairs": _pairs, "second_pass": _second_pass}[point.phase]
    rows = phase(spec, run.ctx, run.state, run)
    if run.ctx.rank != 0:
        return Measured(None)
    stamped = [{**row, "run_id": run.run_id} for row in rows]
    run.state.rows += stamped
    samples = [sample for row in stamped for sample in row.pop("_samples", [])]
    return Measured(stamped[0] if stamped else None, samples=samples, rows=stamped[1:])


def _intra(spec, ctx, state: HuntState, run, *, nodes: tuple[str, ...] | None = None,
           phase: str = "intra") -> list[dict]:
    """Each node's all_reduce (only `nodes`, when given); rank 0 gets the rows."""
    mine = []
    runs_here = state.intra_group is not None and (nodes is None or state.node in nodes)
    if runs_here:
        share = faults.send_slowdown(state.node, None)
        for size in spec.intra_sizes:
            timed = exchange.all_reduce(ctx, state.intra_group, state.intra_members, size_bytes=size,
                                        warmup=spec.warmup, iters=spec.iters, slow_share=share)
            mine.append((size, timed))
    leader = runs_here and ctx.rank == state.intra_members[0]
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


def _rounds(spec, layout: Layout) -> list[list[tuple[str, str]]]:
    nodes = list(layout.nodes)
    if len(nodes) < 2:
        return []
    if spec.random_rounds:
        return random_rounds(nodes, spec.random_rounds, seed=spec.seed)
    return circle_rounds(nodes)


def _pairs(spec, ctx, state: HuntState, run, *, rounds=None, phase: str = "pairs", controls=frozenset()) -> list[dict]:
    layout = state.layout
    rows = []
    if rounds is None:
        rounds = _rounds(spec, layout)
        # the first round once untimed: measured first, it read ~40 % slower than the same pairs later (processes
        # still settling after start), enough to make a healthy pair look slow
        rounds = [*rounds[:1], *rounds] if rounds else rounds
        settling = 1 if rounds else 0
    else:
        settling = 0
    if spec.pairs_at_once:  # a round in parts; the settling round's parts stay untimed
        settling = sum(len(_parts(round_, spec.pairs_at_once)) for round_ in rounds[:settling])
        rounds = [part for round_ in rounds for part in _parts(round_, spec.pairs_at_once)]
    for index, round_ in enumerate(rounds):
        lanes = {pair: layout.lanes(*pair) for pair in round_}
        members = [[rank for lane in lane_list for rank in lane] for lane_list in lanes.values()]
        result = None
        with exchange.round_groups(members, ctx.rank) as (group, my_members):
            if group is not None:
                pair = next(pair for pair, lane_list in lanes.items() if any(ctx.rank in lane for lane in lane_list))
                lane = next(lane for lane in lanes[pair] if ctx.rank in lane)
                peer = lane[1] if lane[0] == ctx.rank else lane[0]
                share = faults.send_slowdown(state.node, layout.node_of(peer))
                timed = {test: exchange.transfer(ctx, group, peer=peer, sends=True, receives=True, size_bytes=size,
                                                 warmup=spec.warmup, iters=iters, slow_share=share)
                         for test, size, iters in _pair_tests(spec)}
                if ctx.rank == my_members[0]:
                    result = (pair, len(lanes[pair]), timed)
        for found in ctx.gather_objects(result):
            if found is not None and ctx.rank == 0 and index >= settling:
                pair, lane_count, timed = found
                rows += [hunt_rows.pair_row(spec, phase, test, pair, layout, lane_count, size, timed[test],
                                            control=pair in controls)
                         for test, size, _ in _pair_tests(spec)]
    return rows


def _pair_tests(spec) -> tuple[tuple[str, int, int], ...]:
    """(test, bytes, timed exchanges) of each pair measurement."""
    return ("bandwidth", spec.pair_size, spec.iters), ("latency", spec.latency_size, spec.latency_iters)


def _parts(round_: list, size: int) -> list[list]:
    return [list(round_[start:start + size]) for start in range(0, len(round_), size)]


def _second_pass(spec, ctx, state: HuntState, run) -> list[dict]:
    from commbench.cluster import diagnosis as judge

    plan = None
    if ctx.rank == 0:
        first = hunt_rows.diagnose_rows(state.rows, spec, state.layout)
        plan = judge.confirm_plan(list(state.layout.nodes), first, partners=spec.confirm_partners)
    plan = ctx.broadcast_object(plan)
    rows = _pairs(spec, ctx, state, run, rounds=plan.rounds, phase="second_pass", controls=set(plan.controls))
    rows += _intra(spec, ctx, state, run, nodes=plan.intra, phase="second_pass")
    if ctx.rank != 0:
        return []
    measured = state.rows + rows  # measure() adds this point's rows to state.rows once it returns
    final = hunt_rows.confirm_rows(measured, spec, state.layout, state.gpu_facts)
    hunt_rows.write_outputs(run.run_dir, spec, state.layout, measured, final, state.gpu_facts)
    return rows + hunt_rows.finding_rows(spec, state.layout, final)
