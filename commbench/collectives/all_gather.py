"""all_gather: every rank ends with all ranks' inputs in rank order; S = per-rank input·n·elt, busbw (n−1)/n."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from commbench.collectives.base import Buffers, Layout, PerRankCollective, Runner, RunSetup, whole_and_chunk

if TYPE_CHECKING:
    import torch

    from commbench.collectives import check_data


class AllGather(PerRankCollective):
    name = "all_gather"
    implementations = ("builtin", "ring")

    def per_rank_layout(self, per_rank: int, elt_bytes: int, world: int) -> Layout:
        return Layout(send_count=per_rank, recv_count=per_rank * world, count=per_rank, elt_bytes=elt_bytes)

    def make_buffers(self, layout: Layout, *, inplace: bool, dtype: torch.dtype, device: torch.device,
                     rank: int, world: int) -> Buffers:
        whole, chunk = whole_and_chunk(chunk_count=layout.count, world=world, rank=rank, inplace=inplace,
                                       dtype=dtype, device=device)
        return Buffers(send=chunk, recv=whole)

    def buffer_elements(self, layout: Layout, *, inplace: bool) -> int:
        # the world-sized output, and the input chunk apart from it out of place (in place it is the output's chunk)
        return layout.recv_count + (0 if inplace else layout.send_count)

    def builtin(self, buffers: Buffers, setup: RunSetup) -> Runner:
        from commbench.collectives import torch_api

        return partial(torch_api.all_gather_single, buffers.recv, buffers.send)

    def ring(self, buffers: Buffers, setup: RunSetup) -> Runner:
        from commbench.collectives import ring

        return ring.all_gather(buffers.send, buffers.recv, rank=setup.rank, world=setup.world,
                               batched=setup.p2p_batched, ring_chunks=setup.ring_chunks)

    def expected(self, layout: Layout, *, rank: int, world: int, root: int = 0) -> list[check_data.Segment] | None:
        from commbench.collectives import check_data

        return [check_data.Segment(layout.count, source=source) for source in range(world)]


COLLECTIVE = AllGather()
