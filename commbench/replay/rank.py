"""The replay on every rank: the planned calls with commbench's own collectives (their buffers, builtin runners and
checks), timed one by one (a barrier before each; the slowest rank's time) and as the whole sequence (back to back,
or with the traced gaps between calls slept or spun), then each distinct call checked once (n_wrong).

A call is timed by the platform's per-iteration timer, as a sweep times one: on CUDA by CUDA events around it on its
stream, a spin kernel covering the host's issue time, so that it compares with the kernel durations a GPU trace
records; on CPU by the host clock (gloo returns when the call is done). The sequence is timed by the host clock on
every device: its traced gaps are host waits."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from commbench.bench_kind import Measured, RankRun
from commbench.measure.stream_hops import hop_text, hops_per_iteration
from commbench.measure.timing import agree_on_spin
from commbench.replay import rows as replay_rows
from commbench.replay.rows import CallKey, ReplayedSpec

if TYPE_CHECKING:
    from commbench.bench_kind import RankContext
    from commbench.collectives.base import Buffers, Collective, Layout, Runner
    from commbench.measure.timers import Timer
    from commbench.names import OpName

    Prepared = tuple[Collective, Layout, Buffers, Runner, OpName]
    """A planned call ready to run: its collective, layout, buffers, runner and reduction."""

_SPIN_BELOW_S = 0.002
"""Gaps shorter than this are spun: a sleep that short wakes a scheduler tick late."""
SEQUENCE_TIMER = "host clock"
"""How the whole sequence is timed, on every device (its gaps are host sleeps and spins)."""


def prepare(spec: ReplayedSpec, ctx: RankContext) -> None:
    return None


def _runners(spec: ReplayedSpec, ctx: RankContext) -> tuple[list[Prepared], dict[CallKey, Prepared]]:
    """One (collective, layout, buffers, call) per planned call; calls of the same kind, size and dtype share
    buffers."""
    from commbench.backends import DTYPES
    from commbench.collectives import get_collective
    from commbench.collectives.base import Layout, RunSetup

    shared: dict[CallKey, Prepared] = {}
    found = []
    for call in spec.calls:
        key = (call["kind"], call["elements"], call["dtype"])
        if key not in shared:
            collective = get_collective(call["kind"])
            elt = DTYPES[call["dtype"]].itemsize
            count = call["elements"]
            if call["kind"] == "all_gather":
                layout = Layout(send_count=count, recv_count=count * ctx.world, count=count, elt_bytes=elt)
            elif call["kind"] == "reduce_scatter":
                layout = Layout(send_count=count * ctx.world, recv_count=count, count=count, elt_bytes=elt)
            elif call["kind"] == "all_to_all":
                layout = Layout(send_count=count * ctx.world, recv_count=count * ctx.world, count=count,
                                elt_bytes=elt)
            else:
                layout = Layout(send_count=count, recv_count=count, count=count, elt_bytes=elt)
            inplace = collective.inplace_choices[0]
            buffers = collective.make_buffers(layout, inplace=inplace, dtype=DTYPES[call["dtype"]],
                                              device=ctx.device, rank=ctx.rank, world=ctx.world)
            collective.fill_inputs(buffers, rank=ctx.rank, world=ctx.world)
            op: OpName = "sum" if collective.reduces else "none"
            setup = RunSetup(rank=ctx.rank, world=ctx.world, p2p_batched=ctx.platform.p2p_batched, op=op)
            shared[key] = (collective, layout, buffers, collective.runner("builtin", buffers, setup), op)
        found.append(shared[key])
    return found, shared


def _wait(seconds: float) -> None:
    if seconds <= 0:
        return
    if seconds >= _SPIN_BELOW_S:
        time.sleep(seconds)
        return
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _timers(ctx: RankContext, runners: list[Prepared]) -> list[Timer]:
    """One per-iteration timer per call. On a GPU each times its call untimed first (after the warm-up, so no
    first-call connection setup): the host's issue time of that call, agreed over the ranks, sizes the spin that
    covers it."""
    timers = [ctx.platform.timer(ctx.barrier, ctx.meet_on_device) for _ in runners]
    for timer, (_, _, _, call, _) in zip(timers, runners):
        agree_on_spin(timer, call, ctx.max_over_ranks)
    return timers


def measure(spec: ReplayedSpec, point: object, run: RankRun) -> Measured:
    ctx = run.ctx
    runners, shared = _runners(spec, ctx)
    sync = ctx.platform.synchronize
    for _ in range(spec.warmup):
        for _, _, _, call, _ in runners:
            call()
        sync()
    timers = _timers(ctx, runners)
    per_call = [[0.0] * spec.iters for _ in runners]
    for iteration in range(spec.iters):
        for position, (timer, (_, _, _, call, _)) in enumerate(zip(timers, runners)):
            per_call[position][iteration] = timer.time_iterations(call, 1)[0]
    gaps = [call["gap_before_us"] * 1e-6 if spec.with_gaps else 0.0 for call in spec.calls]
    sequence = []
    for _ in range(spec.iters):
        ctx.barrier()
        started = time.perf_counter()
        for gap, (_, _, _, call, _) in zip(gaps, runners):
            _wait(gap)
            call()
        sync()
        sequence.append(time.perf_counter() - started)
    wrong = {key: _check(collective, layout, buffers, call, op, ctx)
             for key, (collective, layout, buffers, call, op) in shared.items()}
    gathered = ctx.gather_objects((per_call, sequence))
    wrong = {key: ctx.sum_over_ranks(count) for key, count in sorted(wrong.items())}
    if ctx.rank != 0:
        return Measured(None)
    # the slowest rank's time of each call and of the sequence, per iteration
    slowest = [[max(rank_times[0][position][iteration] for rank_times in gathered) for iteration in range(spec.iters)]
               for position in range(len(runners))]
    sequence_s = [max(rank_times[1][iteration] for rank_times in gathered) for iteration in range(spec.iters)]
    # rank 0's: the cover is per rank; a replayed call is a builtin call, one per iteration
    methods = [timer.method + timer.launch_cover() +
               hop_text(hops_per_iteration(call["kind"], backend=ctx.backend, device=ctx.device.type))
               for timer, call in zip(timers, spec.calls)]
    rows, samples = replay_rows.build(spec, slowest, sequence_s, wrong, run.run_id, world=ctx.world,
                                      backend=ctx.backend, device=ctx.device.type, gaps_s=sum(gaps),
                                      methods=methods, sequence_method=SEQUENCE_TIMER)
    return Measured(rows[0], samples=samples, rows=rows[1:])


def _check(collective: Collective, layout: Layout, buffers: Buffers, call: Runner, op: OpName,
           ctx: RankContext) -> int:
    from commbench.collectives import check_data

    collective.refill_for_check(buffers, rank=ctx.rank, world=ctx.world)
    call()
    ctx.platform.synchronize()
    expected = collective.expected(layout, rank=ctx.rank, world=ctx.world)
    assert expected is not None  # None only on a reduce's non-roots: each replayed collective defines every output
    return check_data.count_wrong(buffers.recv, expected, op=op, world=ctx.world)
