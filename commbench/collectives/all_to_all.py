"""all_to_all: rank r's chunk p goes to rank p's chunk r; S = n·per-peer count·elt, busbw factor (n−1)/n."""

from functools import partial

import torch
import torch.distributed as dist

from commbench.collectives import check_data
from commbench.collectives.base import Buffers, Collective, Layout, per_rank_count


class AllToAll(Collective):
    name = "all_to_all"
    inplace_choices = (False,)  # an in-place all-to-all would overwrite chunks before they are sent

    def layout(self, size_bytes, elt_bytes, world):
        per_peer = per_rank_count(size_bytes, elt_bytes, world)
        return Layout(send_count=per_peer * world, recv_count=per_peer * world, count=per_peer, elt_bytes=elt_bytes)

    def algbw_bytes(self, layout, world):
        return layout.count * world * layout.elt_bytes

    def busbw_factor(self, world):
        return (world - 1) / world

    def make_buffers(self, layout, *, inplace, dtype, device, rank):
        return Buffers(send=torch.empty(layout.send_count, dtype=dtype, device=device),
                       recv=torch.empty(layout.recv_count, dtype=dtype, device=device))

    def builtin(self, buffers, *, op, group, rank):
        return partial(dist.all_to_all_single, buffers.recv, buffers.send, group=group)

    def expected(self, layout, *, rank, world, op, dtype, device):
        per_peer = layout.count
        return torch.cat([check_data.rank_pattern(source, rank * per_peer, per_peer, world=world, dtype=dtype,
                                                  device=device) for source in range(world)])


COLLECTIVE = AllToAll()
