"""Timed transfers between rank pairs, many pairs at once, on the job's own communicator: a node pair's lanes
(`commbench hunt`), a rank pair (`commbench p2p`); and timed all_reduces in a node's own group (hunt's intra-node
test), that group made once per run.

No communicator is made per pair, per round or per size. Every transfer is a point-to-point send/receive on the
world group, and a pair synchronises by itself before each iteration (a one-element swap with its peer, not a
barrier of a group). On NCCL the sends and receives of an iteration are posted in one batch_isend_irecv, and torch
runs a batch inside the world communicator (ProcessGroupNCCL: "For batch_isend_irecv, ncclGroupStart() would be
called upfront", the batch then uses the collective communicator instead of a 2-rank one per peer); on gloo a send
is a tagged message on the world's connections. A group (ncclCommSplit over the whole world on NCCL) costs seconds
at scale: made per pair per round per size it was 8,128 splits per size at 128 ranks.

Each sample is the slower of the pair's two times for one transfer (a swap of the sample lists after timing), and
every transfer is checked once after timing: the bytes received must be the sender's pattern (`n_wrong` counts the
bytes that are not, summed over the pair).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from commbench.faults import Stall, slowed_by, stalled
from commbench.measure.timing import agree_on_spin

if TYPE_CHECKING:
    from commbench.bench_kind import RankContext


class Communicators:
    """The communicators one launch made (meta.json's communicators_created): the world's, and every group made
    through new_group. Made once per launch by the kind's prepare and kept in its state; every rank makes every
    group, so the count is the same on each rank."""

    def __init__(self) -> None:
        self._groups_made = 0

    def new_group(self, ranks: list[int]) -> dist.ProcessGroup:
        """dist.new_group, counted."""
        self._groups_made += 1
        group: dist.ProcessGroup = dist.new_group(ranks=sorted(ranks))
        return group

    @property
    def created(self) -> int:
        """The world's communicator and every group made through new_group so far."""
        return 1 + self._groups_made


@dataclass
class Timed:
    samples_s: list[float]
    """Per iteration, the slower rank of the pair (or of the group)."""
    n_wrong: int
    """Wrong bytes (or elements) over the pair (or the group), in one untimed transfer after timing."""

    @staticmethod
    def of_lanes(lanes: list[Timed]) -> Timed:
        """A node pair's lanes, measured at once: per iteration the slowest lane; the wrong bytes of all."""
        return Timed([max(values) for values in zip(*(lane.samples_s for lane in lanes))],
                     sum(lane.n_wrong for lane in lanes))

    @staticmethod
    def repeated(measurements: list[Timed]) -> Timed:
        """The same pair measured several times: every sample, every wrong byte."""
        return Timed([value for timed in measurements for value in timed.samples_s],
                     sum(timed.n_wrong for timed in measurements))


def _pattern(rank: int) -> int:
    """The byte a rank sends: never 0, so that an untouched (zeroed) receive buffer never passes the check."""
    return rank % 251 + 1


def _post(ctx: RankContext, operations: list[dist.P2POp]) -> list[dist.Work]:
    """Start point-to-point operations on the world group: in one batch on NCCL (a send and a receive apart would
    deadlock, and a batch stays in the world communicator), one by one on gloo."""
    if ctx.platform.p2p_batched:
        return dist.batch_isend_irecv(operations)
    return [operation.op(operation.tensor, operation.peer) for operation in operations]


def _swap(ctx: RankContext, send: torch.Tensor, recv: torch.Tensor, peer: int) -> None:
    for work in _post(ctx, [dist.P2POp(dist.isend, send, peer), dist.P2POp(dist.irecv, recv, peer)]):
        work.wait()


def _pair_max(ctx: RankContext, values: list[float], peer: int) -> list[float]:
    mine = torch.tensor(values, dtype=torch.float64, device=ctx.device)
    theirs = torch.empty_like(mine)
    _swap(ctx, mine, theirs, peer)
    return torch.maximum(mine, theirs).tolist()


def _pair_sum(ctx: RankContext, value: int, peer: int) -> int:
    mine = torch.tensor([value], dtype=torch.int64, device=ctx.device)
    theirs = torch.empty_like(mine)
    _swap(ctx, mine, theirs, peer)
    return int((mine + theirs).item())


def transfer(ctx: RankContext, *, peer: int, sends: bool, receives: bool, size_bytes: int, warmup: int, iters: int,
             slow_share: float = 0.0, stall: Stall | None = None) -> Timed:
    """This rank's side of timed transfers with `peer` (a global rank): sending, receiving or both at once
    (bidirectional). The peer calls it too, at the same time, with this rank as its peer."""
    send = torch.full((size_bytes,), _pattern(ctx.rank), dtype=torch.uint8, device=ctx.device)
    recv = torch.zeros(size_bytes, dtype=torch.uint8, device=ctx.device)
    token, token_back = (torch.zeros(1, dtype=torch.uint8, device=ctx.device) for _ in range(2))

    # built once, outside the timed call: each timed iteration only posts and waits
    operations: list[dist.P2POp] = []
    if sends:
        operations.append(dist.P2POp(dist.isend, send, peer))
    if receives:
        operations.append(dist.P2POp(dist.irecv, recv, peer))
    post = partial(_post, ctx, operations)

    def run() -> None:
        for work in post():
            work.wait()

    # the pair's own barrier, and on a GPU its meet on the device after the spin: a token swapped on the stream
    swap_tokens = partial(_swap, ctx, token, token_back, peer)
    timer = ctx.platform.timer(swap_tokens, swap_tokens)
    timed_run = stalled(slowed_by(run, slow_share, ctx.device), stall, ctx.device)
    timer.time_iterations(timed_run, warmup)
    # CUDA: the pair agrees on one spin, sized without the first call, which connected this pair (spin_plan)
    agree_on_spin(timer, timed_run, lambda needs: _pair_max(ctx, needs, peer))
    samples = _pair_max(ctx, timer.time_iterations(timed_run, iters), peer)
    recv.zero_()
    run()
    ctx.platform.synchronize()
    wrong = int((recv != _pattern(peer)).sum().item()) if receives else 0
    return Timed(samples, _pair_sum(ctx, wrong, peer))


def _timed(ctx: RankContext, group: dist.ProcessGroup, run: Callable[[], object], *, warmup: int,
           iters: int) -> list[float]:
    token = torch.zeros(1, dtype=torch.float32, device=ctx.device)
    timer = ctx.platform.timer(lambda: dist.barrier(group=group), lambda: dist.all_reduce(token, group=group))
    timer.time_iterations(run, warmup)
    agree_on_spin(timer, run, lambda needs: _group_max(ctx, group, needs))
    samples = torch.tensor(timer.time_iterations(run, iters), dtype=torch.float64, device=ctx.device)
    dist.all_reduce(samples, op=dist.ReduceOp.MAX, group=group)
    return samples.tolist()


def _group_max(ctx: RankContext, group: dist.ProcessGroup, values: list[float]) -> list[float]:
    largest = torch.tensor(values, dtype=torch.float64, device=ctx.device)
    dist.all_reduce(largest, op=dist.ReduceOp.MAX, group=group)
    return largest.tolist()


def _group_sum(ctx: RankContext, group: dist.ProcessGroup, value: int) -> int:
    total = torch.tensor([value], dtype=torch.int64, device=ctx.device)
    dist.all_reduce(total, group=group)
    return int(total.item())


def all_reduce(ctx: RankContext, group: dist.ProcessGroup, members: list[int], *, size_bytes: int, warmup: int,
               iters: int, slow_share: float = 0.0) -> Timed:
    """A timed float32 sum all_reduce in `group` (a node's ranks), checked: every element must be the sum of the
    members' rank + 1."""
    elements = max(1, size_bytes // 4)
    tensor = torch.full((elements,), float(ctx.rank + 1), dtype=torch.float32, device=ctx.device)

    def run() -> None:
        dist.all_reduce(tensor, group=group)

    samples = _timed(ctx, group, slowed_by(run, slow_share, ctx.device), warmup=warmup, iters=iters)
    tensor.fill_(float(ctx.rank + 1))
    run()
    ctx.platform.synchronize()
    wrong = int((tensor != float(sum(member + 1 for member in members))).sum().item())
    return Timed(samples, _group_sum(ctx, group, wrong))
