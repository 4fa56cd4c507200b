"""all_to_all: rank r's chunk p goes to rank p's chunk r; S = n·per-peer count·elt, busbw factor (n−1)/n."""

from functools import partial

from commbench.collectives.base import Buffers, Layout, PerRankCollective


class AllToAll(PerRankCollective):
    name = "all_to_all"
    inplace_choices = (False,)  # an in-place all-to-all would overwrite chunks before they are sent

    def per_rank_layout(self, per_rank, elt_bytes, world):
        return Layout(send_count=per_rank * world, recv_count=per_rank * world, count=per_rank, elt_bytes=elt_bytes)

    def make_buffers(self, layout, *, inplace, dtype, device, rank, world):
        import torch

        return Buffers(send=torch.empty(layout.send_count, dtype=dtype, device=device),
                       recv=torch.empty(layout.recv_count, dtype=dtype, device=device))

    def buffer_elements(self, layout, *, inplace):
        return layout.send_count + layout.recv_count  # out of place only: both world-sized

    def builtin(self, buffers, setup):
        import torch.distributed as dist

        return partial(dist.all_to_all_single, buffers.recv, buffers.send)

    def expected(self, layout, *, rank, world, root=0):
        from commbench.collectives import check_data

        # chunk p of the output is chunk `rank` of rank p's input
        return [check_data.Segment(layout.count, start=rank * layout.count, source=source) for source in range(world)]


COLLECTIVE = AllToAll()
