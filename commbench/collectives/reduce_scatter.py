"""reduce_scatter: rank r ends with chunk r of the reduction; S = per-rank output·n·elt, busbw factor (n−1)/n."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from commbench.collectives.base import Buffers, Layout, PerRankCollective, Runner, RunSetup, whole_and_chunk

if TYPE_CHECKING:
    import torch

    from commbench.collectives import check_data


class ReduceScatter(PerRankCollective):
    name = "reduce_scatter"
    reduces = True
    implementations = ("builtin", "ring")

    def per_rank_layout(self, per_rank: int, elt_bytes: int, world: int) -> Layout:
        return Layout(send_count=per_rank * world, recv_count=per_rank, count=per_rank, elt_bytes=elt_bytes)

    def make_buffers(self, layout: Layout, *, inplace: bool, dtype: torch.dtype, device: torch.device,
                     rank: int, world: int) -> Buffers:
        whole, chunk = whole_and_chunk(chunk_count=layout.count, world=world, rank=rank, inplace=inplace,
                                       dtype=dtype, device=device)
        return Buffers(send=whole, recv=chunk)

    def buffer_elements(self, layout: Layout, *, inplace: bool) -> int:
        # the world-sized input, and the output chunk apart from it out of place (in place it is the input's chunk)
        return layout.send_count + (0 if inplace else layout.recv_count)

    def ring_spare_elements(self, layout: Layout, world: int) -> int:
        """ring.reduce_scatter: up to two landing chunks (one per alternate step, steps 0 … n−2) and up to two
        scratch chunks for partial sums (steps 0 … n−3), each the size of the output."""
        if world < 2:
            return 0
        return (min(2, world - 1) + min(2, world - 2)) * layout.recv_count

    def builtin(self, buffers: Buffers, setup: RunSetup) -> Runner:
        from commbench.collectives import torch_api

        return partial(torch_api.reduce_scatter_single, buffers.recv, buffers.send, op=setup.reduce_op)

    def ring(self, buffers: Buffers, setup: RunSetup) -> Runner:
        from commbench.collectives import ring

        return ring.reduce_scatter(buffers.send, buffers.recv, rank=setup.rank, world=setup.world,
                                   batched=setup.p2p_batched, op=setup.op, ring_chunks=setup.ring_chunks)

    def expected(self, layout: Layout, *, rank: int, world: int, root: int = 0) -> list[check_data.Segment] | None:
        from commbench.collectives import check_data

        return [check_data.Segment(layout.count, start=rank * layout.count)]  # chunk `rank` of the reduction


COLLECTIVE = ReduceScatter()
