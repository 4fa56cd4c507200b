"""torch.distributed entry points whose names changed between releases, detected once."""

from collections.abc import Callable

import torch.distributed as dist

# torch 2.13 deprecates *_tensor in favour of *_single; older torch on GPU clusters has only the old names.
all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def grouped(call: Callable[[], object], count: int) -> Callable[[], None]:
    """`count` calls of `call` as one group, as nccl-tests' -m issues them between ncclGroupStart and ncclGroupEnd:
    torch's coalescing manager (private, present since torch 2.1; NCCL groups the calls, gloo runs them in turn).
    Without it the calls go one after another."""
    manager = getattr(dist.distributed_c10d, "_coalescing_manager", None)
    if manager is None:
        def one_after_another() -> None:
            for _ in range(count):
                call()
        return one_after_another

    def group() -> None:
        with manager(async_ops=True) as coalesced:
            for _ in range(count):
                call()
        coalesced.wait()
    return group
