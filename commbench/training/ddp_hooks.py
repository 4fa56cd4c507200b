"""DDP communication hooks by their --comm-hook name: what each sends, and its registration on a DDP module.

bf16 and fp16 send the gradient bucket in half precision (half the bytes): divide by the world size, all-reduce in
place, copy the result back into the fp32 bucket, as torch's bf16_compress_hook / fp16_compress_hook do. torch's
DDP.register_comm_hook refuses its own bf16_compress_hook by name (a TypeError, "required CUDA 11+ and NCCL 2.10+")
on any build without CUDA and NCCL, whatever the backend, although gloo all-reduces bfloat16 (torch 2.13). So both
hooks here are commbench's own, the same steps under another name: the same bytes travel on NCCL and gloo.

powersgd is torch's PowerSGD hook (rank 1, error feedback, warm start), plain all-reduce for its first two
iterations (torch needs them while DDP settles its buckets), so every timed step (after the warm-up of 2 or more) is
compressed. It needs NCCL: its later all-reduces start from the collective futures' callbacks, which gloo runs on
its own threads, so ranks with several buckets issue them in different orders and gloo aborts on the mismatch
(training/spec.validate refuses it on gloo before launch).

No torch at import: the command line lists the hooks without loading it.
"""

from collections.abc import Callable
from typing import TYPE_CHECKING, Literal, get_args

if TYPE_CHECKING:
    import torch
    from torch.distributed import GradBucket
    from torch.nn.parallel import DistributedDataParallel

CommHook = Literal["none", "bf16", "fp16", "powersgd"]
"""--comm-hook: DDP's own all-reduce, a half-precision bucket, or PowerSGD."""
COMM_HOOKS: tuple[CommHook, ...] = get_args(CommHook)
HALF_PRECISION_HOOKS = {"bf16": "bfloat16", "fp16": "float16"}
POWERSGD_RANK = 1
"""PowerSGD's matrix approximation rank: torch's default, and the rank of the PowerSGD paper's main results."""
POWERSGD_START_ITERATION = 2
"""The first iteration PowerSGD compresses (earlier ones all-reduce plainly): the fewest torch accepts with error
feedback; --warmup-steps is at least 2, so the timed steps are compressed."""


def register_comm_hook(ddp: "DistributedDataParallel", name: str) -> None:
    """Register the hook named by --comm-hook on a DistributedDataParallel module (none: DDP's own all-reduce)."""
    if name == "none":
        return
    if name in HALF_PRECISION_HOOKS:
        ddp.register_comm_hook(state=None, hook=_half_precision_hook(HALF_PRECISION_HOOKS[name]))
        return
    if name == "powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook

        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=POWERSGD_RANK,
                                            start_powerSGD_iter=POWERSGD_START_ITERATION)
        ddp.register_comm_hook(state=state, hook=powerSGD_hook.powerSGD_hook)
        return
    raise ValueError(f"unknown comm hook {name!r}")


def _half_precision_hook(dtype_name: str) -> "Callable[[object, GradBucket], torch.futures.Future[torch.Tensor]]":
    import torch
    import torch.distributed as dist
    from torch.distributed import GradBucket

    dtype = getattr(torch, dtype_name)

    # annotated with the real objects, evaluated here (no postponed annotations in this module): DDP's
    # register_comm_hook compares a hook's annotations with dist.GradBucket and Future[Tensor] and refuses others
    def hook(state: object, bucket: GradBucket) -> torch.futures.Future[torch.Tensor]:
        group = dist.group.WORLD
        buffer = bucket.buffer()
        compressed = buffer.to(dtype).div_(dist.get_world_size(group))  # divide first: fp16 sums can overflow

        def decompress(_: "torch.futures.Future[list[torch.Tensor]]") -> torch.Tensor:
            buffer.copy_(compressed)  # the all-reduce wrote its result into `compressed`
            return buffer

        return dist.all_reduce(compressed, group=group, async_op=True).get_future().then(decompress)

    return hook
