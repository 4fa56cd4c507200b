"""all_gather: every rank ends with all ranks' inputs in rank order; S = per-rank input·n·elt, busbw (n−1)/n."""

from functools import partial

from commbench.collectives.base import Buffers, Layout, PerRankCollective, whole_and_chunk


class AllGather(PerRankCollective):
    name = "all_gather"
    implementations = ("builtin", "ring")

    def per_rank_layout(self, per_rank, elt_bytes, world):
        return Layout(send_count=per_rank, recv_count=per_rank * world, count=per_rank, elt_bytes=elt_bytes)

    def make_buffers(self, layout, *, inplace, dtype, device, rank, world):
        whole, chunk = whole_and_chunk(chunk_count=layout.count, world=world, rank=rank, inplace=inplace,
                                       dtype=dtype, device=device)
        return Buffers(send=chunk, recv=whole)

    def buffer_elements(self, layout, *, inplace):
        # the world-sized output, and the input chunk apart from it out of place (in place it is the output's chunk)
        return layout.recv_count + (0 if inplace else layout.send_count)

    def builtin(self, buffers, setup):
        from commbench.collectives import torch_api

        return partial(torch_api.all_gather_single, buffers.recv, buffers.send)

    def ring(self, buffers, setup):
        from commbench.collectives import ring

        return ring.all_gather(buffers.send, buffers.recv, rank=setup.rank, world=setup.world,
                               batched=setup.p2p_batched, ring_chunks=setup.ring_chunks)

    def expected(self, layout, *, rank, world, root=0):
        from commbench.collectives import check_data

        return [check_data.Segment(layout.count, source=source) for source in range(world)]


COLLECTIVE = AllGather()
