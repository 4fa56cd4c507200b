"""broadcast from the root (--root, rank 0 by default): every rank ends with the root's input; S = count·elt, busbw
factor 1."""

from functools import partial

from commbench.collectives.base import WholeMessageCollective


class Broadcast(WholeMessageCollective):
    name = "broadcast"
    has_root = True

    def builtin(self, buffers, setup):
        import torch.distributed as dist

        return partial(dist.broadcast, buffers.recv, src=setup.root)

    def expected(self, layout, *, rank, world, root=0):
        from commbench.collectives import check_data

        return [check_data.Segment(layout.count, source=root)]


COLLECTIVE = Broadcast()
