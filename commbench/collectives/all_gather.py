"""all_gather: every rank ends with all ranks' inputs in rank order; S = per-rank input·n·elt, busbw (n−1)/n."""

from functools import partial

import torch

from commbench.collectives import check_data, torch_api
from commbench.collectives.base import Buffers, Collective, Layout, per_rank_count


class AllGather(Collective):
    name = "all_gather"

    def layout(self, size_bytes, elt_bytes, world):
        per_rank = per_rank_count(size_bytes, elt_bytes, world)
        return Layout(send_count=per_rank, recv_count=per_rank * world, count=per_rank, elt_bytes=elt_bytes)

    def algbw_bytes(self, layout, world):
        return layout.send_count * world * layout.elt_bytes

    def busbw_factor(self, world):
        return (world - 1) / world

    def make_buffers(self, layout, *, inplace, dtype, device, rank):
        recv = torch.empty(layout.recv_count, dtype=dtype, device=device)
        chunk = slice(rank * layout.send_count, (rank + 1) * layout.send_count)
        send = recv[chunk] if inplace else torch.empty(layout.send_count, dtype=dtype, device=device)
        return Buffers(send=send, recv=recv)

    def builtin(self, buffers, *, op, group, rank):
        return partial(torch_api.all_gather_single, buffers.recv, buffers.send, group=group)

    def expected(self, layout, *, rank, world, op, dtype, device):
        return torch.cat([check_data.rank_pattern(source, 0, layout.send_count, world=world, dtype=dtype, device=device)
                          for source in range(world)])


COLLECTIVE = AllGather()
