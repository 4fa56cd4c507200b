"""all_reduce: every rank ends with the reduction of all inputs; S = count·elt, busbw factor 2(n−1)/n."""

from functools import partial

import torch
import torch.distributed as dist

from commbench.collectives import check_data
from commbench.collectives.base import Buffers, Collective, whole_message_layout


class AllReduce(Collective):
    name = "all_reduce"
    reduces = True
    inplace_choices = (True,)  # torch.distributed.all_reduce only works in place

    def layout(self, size_bytes, elt_bytes, world):
        return whole_message_layout(size_bytes, elt_bytes)

    def algbw_bytes(self, layout, world):
        return layout.count * layout.elt_bytes

    def busbw_factor(self, world):
        return 2 * (world - 1) / world

    def make_buffers(self, layout, *, inplace, dtype, device, rank):
        buffer = torch.empty(layout.count, dtype=dtype, device=device)
        return Buffers(send=buffer, recv=buffer)

    def builtin(self, buffers, *, op, group, rank):
        return partial(dist.all_reduce, buffers.recv, op=op, group=group)

    def expected(self, layout, *, rank, world, op, dtype, device):
        return check_data.reduced_pattern(0, layout.count, world=world, op=op, dtype=dtype, device=device)


COLLECTIVE = AllReduce()
