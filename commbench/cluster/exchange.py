"""Timed transfers inside small process groups, run by many groups at once: a node pair's lanes (`commbench hunt`),
a rank pair (`commbench p2p`), a node's own ranks (hunt's intra-node all_reduce).

Every rank of the job creates every group of a round, in the same order (torch.distributed requires it); each rank
then works only in its own group, so the pairs of a round run concurrently without waiting for one another. Each
sample is the slowest rank's time of one transfer (a barrier in the group before each), and every transfer is checked
once after timing: the bytes received must be the sender's pattern (`n_wrong` counts the bytes that are not).
"""

import contextlib
from dataclasses import dataclass
from functools import partial

import torch
import torch.distributed as dist

from commbench.faults import slowed_by


@dataclass
class Timed:
    samples_s: list[float]
    """Per iteration, the slowest rank of the group."""
    n_wrong: int
    """Wrong bytes (or elements) over the group, in one untimed transfer after timing."""


@contextlib.contextmanager
def round_groups(members: list[list[int]], rank: int):
    """One process group per member list (disjoint lists: a round's pairs); yields this rank's group and its members,
    or (None, None) when the rank sits the round out. The groups are destroyed when the round ends."""
    mine, my_members = None, None
    for ranks in members:
        group = dist.new_group(ranks=sorted(ranks))
        if rank in ranks:
            mine, my_members = group, sorted(ranks)
    try:
        yield mine, my_members
    finally:
        if mine is not None:
            dist.destroy_process_group(mine)


def _pattern(rank: int) -> int:
    """The byte a rank sends: never 0, so that an untouched (zeroed) receive buffer never passes the check."""
    return rank % 251 + 1


def _timed(ctx, group, run, *, warmup: int, iters: int) -> list[float]:
    timer = ctx.platform.timer(lambda: dist.barrier(group=group))
    timer.time_iterations(run, warmup)
    timer.size_spin()
    samples = torch.tensor(timer.time_iterations(run, iters), dtype=torch.float64, device=ctx.device)
    dist.all_reduce(samples, op=dist.ReduceOp.MAX, group=group)
    return samples.tolist()


def _group_sum(ctx, group, value: int) -> int:
    total = torch.tensor([value], dtype=torch.int64, device=ctx.device)
    dist.all_reduce(total, group=group)
    return int(total.item())


def transfer(ctx, group, *, peer: int | None, sends: bool, receives: bool, size_bytes: int, warmup: int, iters: int,
             slow_share: float = 0.0) -> Timed:
    """This rank's side of timed transfers with `peer` (a global rank) in `group`: sending, receiving or both at once
    (bidirectional). Every rank of the group calls it, each with its own peer; peer None: in the group, idle."""
    send = torch.full((size_bytes,), _pattern(ctx.rank), dtype=torch.uint8, device=ctx.device)
    recv = torch.zeros(size_bytes, dtype=torch.uint8, device=ctx.device)

    # built once, outside the timed call: each timed iteration only posts and waits
    operations = []
    if sends and peer is not None:
        operations.append(dist.P2POp(dist.isend, send, peer, group=group))
    if receives and peer is not None:
        operations.append(dist.P2POp(dist.irecv, recv, peer, group=group))
    if ctx.platform.p2p_batched and operations:  # NCCL: the send and the receive in one group, or they deadlock
        post = partial(dist.batch_isend_irecv, operations)
    else:
        posts = [partial(operation.op, operation.tensor, operation.peer, group=group) for operation in operations]

        def post() -> list:
            return [start() for start in posts]

    def run() -> None:
        for work in post():
            work.wait()

    samples = _timed(ctx, group, slowed_by(run, slow_share), warmup=warmup, iters=iters)
    recv.zero_()
    run()
    ctx.platform.synchronize()
    wrong = int((recv != _pattern(peer)).sum().item()) if receives and peer is not None else 0
    return Timed(samples, _group_sum(ctx, group, wrong))


def all_reduce(ctx, group, members: list[int], *, size_bytes: int, warmup: int, iters: int,
               slow_share: float = 0.0) -> Timed:
    """A timed float32 sum all_reduce in `group` (a node's ranks), checked: every element must be the sum of the
    members' rank + 1."""
    elements = max(1, size_bytes // 4)
    tensor = torch.full((elements,), float(ctx.rank + 1), dtype=torch.float32, device=ctx.device)

    def run() -> None:
        dist.all_reduce(tensor, group=group)

    samples = _timed(ctx, group, slowed_by(run, slow_share), warmup=warmup, iters=iters)
    tensor.fill_(float(ctx.rank + 1))
    run()
    ctx.platform.synchronize()
    wrong = int((tensor != float(sum(member + 1 for member in members))).sum().item())
    return Timed(samples, _group_sum(ctx, group, wrong))
