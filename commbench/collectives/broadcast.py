"""broadcast from rank 0: every rank ends with rank 0's input; S = count·elt, busbw factor 1."""

from functools import partial

import torch
import torch.distributed as dist

from commbench.collectives import check_data
from commbench.collectives.base import Buffers, Collective, whole_message_layout

ROOT = 0


class Broadcast(Collective):
    name = "broadcast"
    inplace_choices = (True,)  # torch.distributed.broadcast only works in place
    root = ROOT

    def layout(self, size_bytes, elt_bytes, world):
        return whole_message_layout(size_bytes, elt_bytes)

    def algbw_bytes(self, layout, world):
        return layout.count * layout.elt_bytes

    def busbw_factor(self, world):
        return 1.0

    def make_buffers(self, layout, *, inplace, dtype, device, rank):
        buffer = torch.empty(layout.count, dtype=dtype, device=device)
        return Buffers(send=buffer, recv=buffer)

    def builtin(self, buffers, *, op, group, rank):
        return partial(dist.broadcast, buffers.recv, src=ROOT, group=group)

    def expected(self, layout, *, rank, world, op, dtype, device):
        return check_data.rank_pattern(ROOT, 0, layout.count, world=world, dtype=dtype, device=device)


COLLECTIVE = Broadcast()
