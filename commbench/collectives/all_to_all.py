"""all_to_all: rank r's chunk p goes to rank p's chunk r; S = n·per-peer count·elt, busbw factor (n−1)/n."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from commbench.collectives.base import Buffers, Layout, PerRankCollective, Runner, RunSetup

if TYPE_CHECKING:
    import torch

    from commbench.collectives import check_data


class AllToAll(PerRankCollective):
    name = "all_to_all"
    inplace_choices = (False,)  # an in-place all-to-all would overwrite chunks before they are sent

    def per_rank_layout(self, per_rank: int, elt_bytes: int, world: int) -> Layout:
        return Layout(send_count=per_rank * world, recv_count=per_rank * world, count=per_rank, elt_bytes=elt_bytes)

    def make_buffers(self, layout: Layout, *, inplace: bool, dtype: torch.dtype, device: torch.device,
                     rank: int, world: int) -> Buffers:
        import torch

        return Buffers(send=torch.empty(layout.send_count, dtype=dtype, device=device),
                       recv=torch.empty(layout.recv_count, dtype=dtype, device=device))

    def buffer_elements(self, layout: Layout, *, inplace: bool) -> int:
        return layout.send_count + layout.recv_count  # out of place only: both world-sized

    def builtin(self, buffers: Buffers, setup: RunSetup) -> Runner:
        import torch.distributed as dist

        return partial(dist.all_to_all_single, buffers.recv, buffers.send)

    def expected(self, layout: Layout, *, rank: int, world: int, root: int = 0) -> list[check_data.Segment] | None:
        from commbench.collectives import check_data

        # chunk p of the output is chunk `rank` of rank p's input
        return [check_data.Segment(layout.count, start=rank * layout.count, source=source) for source in range(world)]


COLLECTIVE = AllToAll()
