"""broadcast from rank 0: every rank ends with rank 0's input; S = count·elt, busbw factor 1."""

from functools import partial

from commbench.collectives.base import WholeMessageCollective

ROOT = 0


class Broadcast(WholeMessageCollective):
    name = "broadcast"
    root = ROOT

    def busbw_factor(self, world):
        return 1.0

    def builtin(self, buffers, setup):
        import torch.distributed as dist

        return partial(dist.broadcast, buffers.recv, src=ROOT)

    def expected(self, layout, *, rank, world):
        from commbench.collectives import check_data

        return [check_data.Segment(layout.count, source=ROOT)]


COLLECTIVE = Broadcast()
