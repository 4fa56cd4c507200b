"""broadcast from the root (--root, rank 0 by default): every rank ends with the root's input; S = count·elt, busbw
factor 1."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from commbench.collectives.base import Buffers, Layout, Runner, RunSetup, WholeMessageCollective

if TYPE_CHECKING:
    from commbench.collectives import check_data


class Broadcast(WholeMessageCollective):
    name = "broadcast"
    has_root = True

    def builtin(self, buffers: Buffers, setup: RunSetup) -> Runner:
        import torch.distributed as dist

        return partial(dist.broadcast, buffers.recv, src=setup.root)

    def expected(self, layout: Layout, *, rank: int, world: int, root: int = 0) -> list[check_data.Segment] | None:
        from commbench.collectives import check_data

        return [check_data.Segment(layout.count, source=root)]


COLLECTIVE = Broadcast()
