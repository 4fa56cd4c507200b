"""sendrecv (nccl-tests' sendrecv_perf): every rank sends its buffer to rank r+1 and receives rank r−1's, both in
one group; S = count·elt, busbw factor 1. Out of place only: sending and receiving one buffer at once is a race."""

from __future__ import annotations

from typing import TYPE_CHECKING

from commbench.collectives.base import Buffers, Collective, Layout, Runner, RunSetup
from commbench.names import Implementation

if TYPE_CHECKING:
    import torch

    from commbench.collectives import check_data


class SendRecv(Collective):
    name = "sendrecv"
    inplace_choices = (False,)

    def layout(self, size_bytes: int, elt_bytes: int, world: int) -> Layout:
        count = size_bytes // elt_bytes
        return Layout(send_count=count, recv_count=count, count=count, elt_bytes=elt_bytes)

    def is_noop(self, *, world: int, inplace: bool) -> bool:
        return False  # at one rank the rank sends to itself: a copy through the backend

    def algbw_bytes(self, layout: Layout, world: int) -> int:
        return layout.count * layout.elt_bytes

    def make_buffers(self, layout: Layout, *, inplace: bool, dtype: torch.dtype, device: torch.device,
                     rank: int, world: int) -> Buffers:
        import torch

        return Buffers(send=torch.empty(layout.count, dtype=dtype, device=device),
                       recv=torch.empty(layout.count, dtype=dtype, device=device))

    def buffer_elements(self, layout: Layout, *, inplace: bool) -> int:
        return 2 * layout.count  # out of place only: what leaves and what arrives

    def builtin(self, buffers: Buffers, setup: RunSetup) -> Runner:
        return self._exchange(buffers, setup, pairs=1)

    def iteration(self, impl: Implementation, buffers: Buffers, setup: RunSetup, calls: int) -> Runner:
        """-m: every iteration's pairs posted as one batch (one NCCL group), as nccl-tests groups them."""
        return self._exchange(buffers, setup, pairs=calls)

    def _exchange(self, buffers: Buffers, setup: RunSetup, *, pairs: int) -> Runner:
        import torch.distributed as dist

        # built once, outside the timed call: a call only posts the operations and waits for them
        operations = [dist.P2POp(dist.isend, buffers.send, (setup.rank + 1) % setup.world),
                      dist.P2POp(dist.irecv, buffers.recv, (setup.rank - 1) % setup.world)] * pairs

        def exchange() -> None:
            for work in dist.batch_isend_irecv(operations):
                work.wait()

        return exchange

    def expected(self, layout: Layout, *, rank: int, world: int, root: int = 0) -> list[check_data.Segment] | None:
        from commbench.collectives import check_data

        return [check_data.Segment(layout.count, source=(rank - 1) % world)]


COLLECTIVE = SendRecv()
