"""reduce_scatter: rank r ends with chunk r of the reduction; S = per-rank output·n·elt, busbw factor (n−1)/n."""

from functools import partial

from commbench.collectives.base import Buffers, Layout, PerRankCollective, whole_and_chunk


class ReduceScatter(PerRankCollective):
    name = "reduce_scatter"
    reduces = True
    implementations = ("builtin", "ring")

    def per_rank_layout(self, per_rank, elt_bytes, world):
        return Layout(send_count=per_rank * world, recv_count=per_rank, count=per_rank, elt_bytes=elt_bytes)

    def make_buffers(self, layout, *, inplace, dtype, device, rank, world):
        whole, chunk = whole_and_chunk(chunk_count=layout.count, world=world, rank=rank, inplace=inplace,
                                       dtype=dtype, device=device)
        return Buffers(send=whole, recv=chunk)

    def builtin(self, buffers, setup):
        from commbench.collectives import torch_api

        return partial(torch_api.reduce_scatter_single, buffers.recv, buffers.send, op=setup.reduce_op)

    def ring(self, buffers, setup):
        from commbench.collectives import ring

        return ring.reduce_scatter(buffers.send, buffers.recv, rank=setup.rank, world=setup.world,
                                   batched=setup.p2p_batched, op=setup.op, ring_chunks=setup.ring_chunks)

    def expected(self, layout, *, rank, world, root=0):
        from commbench.collectives import check_data

        return [check_data.Segment(layout.count, start=rank * layout.count)]  # chunk `rank` of the reduction


COLLECTIVE = ReduceScatter()
