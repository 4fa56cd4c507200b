"""reduce_scatter: rank r ends with chunk r of the reduction; S = per-rank output·n·elt, busbw factor (n−1)/n."""

from functools import partial

import torch

from commbench.collectives import check_data, torch_api
from commbench.collectives.base import Buffers, Collective, Layout, per_rank_count


class ReduceScatter(Collective):
    name = "reduce_scatter"
    reduces = True

    def layout(self, size_bytes, elt_bytes, world):
        per_rank = per_rank_count(size_bytes, elt_bytes, world)
        return Layout(send_count=per_rank * world, recv_count=per_rank, count=per_rank, elt_bytes=elt_bytes)

    def algbw_bytes(self, layout, world):
        return layout.recv_count * world * layout.elt_bytes

    def busbw_factor(self, world):
        return (world - 1) / world

    def make_buffers(self, layout, *, inplace, dtype, device, rank):
        send = torch.empty(layout.send_count, dtype=dtype, device=device)
        chunk = slice(rank * layout.recv_count, (rank + 1) * layout.recv_count)
        recv = send[chunk] if inplace else torch.empty(layout.recv_count, dtype=dtype, device=device)
        return Buffers(send=send, recv=recv)

    def builtin(self, buffers, *, op, group, rank):
        return partial(torch_api.reduce_scatter_single, buffers.recv, buffers.send, op=op, group=group)

    def expected(self, layout, *, rank, world, op, dtype, device):
        return check_data.reduced_pattern(rank * layout.recv_count, layout.recv_count, world=world, op=op,
                                          dtype=dtype, device=device)


COLLECTIVE = ReduceScatter()
