"""all_reduce: every rank ends with the reduction of all inputs; S = count·elt, busbw factor 2(n−1)/n."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from commbench.collectives.base import Buffers, Layout, Runner, RunSetup, WholeMessageCollective

if TYPE_CHECKING:
    from commbench.collectives import check_data


class AllReduce(WholeMessageCollective):
    name = "all_reduce"
    reduces = True
    implementations = ("builtin", "ring")

    def ring_spare_elements(self, layout: Layout, world: int) -> int:
        """ring.all_reduce: up to two landing pieces for the reduce-scatter phase (one per alternate step), each the
        largest of the n chunks the buffer is cut into; the all-gather phase receives in place."""
        if world < 2:
            return 0
        return min(2, world - 1) * -(-layout.count // world)

    def builtin(self, buffers: Buffers, setup: RunSetup) -> Runner:
        import torch.distributed as dist

        return partial(dist.all_reduce, buffers.recv, op=setup.reduce_op)

    def ring(self, buffers: Buffers, setup: RunSetup) -> Runner:
        from commbench.collectives import ring

        return ring.all_reduce(buffers.recv, rank=setup.rank, world=setup.world, batched=setup.p2p_batched, op=setup.op,
                               ring_chunks=setup.ring_chunks)

    def expected(self, layout: Layout, *, rank: int, world: int, root: int = 0) -> list[check_data.Segment] | None:
        from commbench.collectives import check_data

        return [check_data.Segment(layout.count)]  # the reduction of every rank's whole input


COLLECTIVE = AllReduce()
