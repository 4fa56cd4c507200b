"""sendrecv (nccl-tests' sendrecv_perf): every rank sends its buffer to rank r+1 and receives rank r−1's, both in
one group; S = count·elt, busbw factor 1. Out of place only: sending and receiving one buffer at once is a race."""

from commbench.collectives.base import Buffers, Collective, Layout


class SendRecv(Collective):
    name = "sendrecv"
    inplace_choices = (False,)

    def layout(self, size_bytes, elt_bytes, world):
        count = size_bytes // elt_bytes
        return Layout(send_count=count, recv_count=count, count=count, elt_bytes=elt_bytes)

    def is_noop(self, *, world, inplace):
        return False  # at one rank the rank sends to itself: a copy through the backend

    def algbw_bytes(self, layout, world):
        return layout.count * layout.elt_bytes

    def make_buffers(self, layout, *, inplace, dtype, device, rank, world):
        import torch

        return Buffers(send=torch.empty(layout.count, dtype=dtype, device=device),
                       recv=torch.empty(layout.count, dtype=dtype, device=device))

    def buffer_elements(self, layout, *, inplace):
        return 2 * layout.count  # out of place only: what leaves and what arrives

    def builtin(self, buffers, setup):
        return self._exchange(buffers, setup, pairs=1)

    def iteration(self, impl, buffers, setup, calls):
        """-m: every iteration's pairs posted as one batch (one NCCL group), as nccl-tests groups them."""
        return self._exchange(buffers, setup, pairs=calls)

    def _exchange(self, buffers, setup, *, pairs: int):
        import torch.distributed as dist

        # built once, outside the timed call: a call only posts the operations and waits for them
        operations = [dist.P2POp(dist.isend, buffers.send, (setup.rank + 1) % setup.world),
                      dist.P2POp(dist.irecv, buffers.recv, (setup.rank - 1) % setup.world)] * pairs

        def exchange():
            for work in dist.batch_isend_irecv(operations):
                work.wait()

        return exchange

    def expected(self, layout, *, rank, world, root=0):
        from commbench.collectives import check_data

        return [check_data.Segment(layout.count, source=(rank - 1) % world)]


COLLECTIVE = SendRecv()
