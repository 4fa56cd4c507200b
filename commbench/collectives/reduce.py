"""reduce to the root (--root, rank 0 by default): the root ends with the reduction of all inputs; S = count·elt,
busbw factor 1 (nccl-tests' reduce). torch.distributed.reduce works in place; only the root's output is defined."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from commbench.collectives.base import Buffers, Layout, Runner, RunSetup, WholeMessageCollective

if TYPE_CHECKING:
    from commbench.collectives import check_data


class Reduce(WholeMessageCollective):
    name = "reduce"
    reduces = True
    has_root = True

    def builtin(self, buffers: Buffers, setup: RunSetup) -> Runner:
        import torch.distributed as dist

        return partial(dist.reduce, buffers.recv, dst=setup.root, op=setup.reduce_op)

    def expected(self, layout: Layout, *, rank: int, world: int, root: int = 0) -> list[check_data.Segment] | None:
        from commbench.collectives import check_data

        # the other ranks' buffers hold whatever the backend left there (gloo writes partial results into them)
        return [check_data.Segment(layout.count)] if rank == root else None


COLLECTIVE = Reduce()
