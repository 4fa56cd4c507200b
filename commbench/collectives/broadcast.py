"""broadcast from rank 0: every rank ends with rank 0's input; S = count·elt, busbw factor 1."""

from functools import partial

import torch.distributed as dist

from commbench.collectives import check_data
from commbench.collectives.base import WholeMessageCollective

ROOT = 0


class Broadcast(WholeMessageCollective):
    name = "broadcast"
    root = ROOT

    def busbw_factor(self, world):
        return 1.0

    def builtin(self, buffers, setup):
        return partial(dist.broadcast, buffers.recv, src=ROOT)

    def expected(self, layout, *, rank, world):
        return [check_data.Segment(layout.count, source=ROOT)]


COLLECTIVE = Broadcast()
