"""Parallelism applied by small keyword-only functions (the torchtitan pattern), each taking only its own settings."""

import torch
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from commbench.errors import CommbenchError
from commbench.names import CPU, CUDA

DDP_COMM_HOOKS = {
    "none": None,
    "bf16": default_hooks.bf16_compress_hook,  # gradients travel as bfloat16: half the bytes
    "fp16": default_hooks.fp16_compress_hook,
}


def apply_ddp(model: nn.Module, *, device: torch.device, bucket_cap_mb: float | None = None,
              gradient_as_bucket_view: bool = False, static_graph: bool = False, comm_hook: str = "none"
              ) -> DistributedDataParallel:
    """Wrap in DDP. bucket_cap_mb None keeps DDP's default (25 MiB, with the 1 MiB first bucket)."""
    if comm_hook not in DDP_COMM_HOOKS:
        raise CommbenchError(f"unknown --comm-hook {comm_hook!r}; choose from {', '.join(DDP_COMM_HOOKS)}")
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == CUDA else None,
                                  bucket_cap_mb=bucket_cap_mb, gradient_as_bucket_view=gradient_as_bucket_view,
                                  static_graph=static_graph)
    if DDP_COMM_HOOKS[comm_hook] is not None:
        ddp.register_comm_hook(state=None, hook=DDP_COMM_HOOKS[comm_hook])
    return ddp


def apply_zero1(model: nn.Module, *, device: torch.device, lr: float, bucket_cap_mb: float | None = None):
    """ZeRO-1: DDP for the gradients, the Adam state sharded by torch's ZeroRedundancyOptimizer."""
    from torch.distributed.optim import ZeroRedundancyOptimizer

    ddp = apply_ddp(model, device=device, bucket_cap_mb=bucket_cap_mb)
    return ddp, ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.AdamW, lr=lr)


def apply_fsdp2(model: nn.Module, *, mesh, reshard_after_forward: bool | int = True, forward_prefetch: int = 0,
                backward_prefetch: int | None = None, bf16: bool = False, per_block: bool = True) -> nn.Module:
    """FSDP2 `fully_shard` on each block (unless per_block is False: one unit), then on the root.
    reshard_after_forward False keeps parameters gathered from forward to backward (ZeRO-2); a 2-D mesh
    (replicate, shard) makes it HSDP. forward_prefetch / backward_prefetch name how many blocks ahead to gather
    explicitly (backward None = FSDP2's own default)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 \
        else MixedPrecisionPolicy()
    blocks = list(model.blocks) if per_block else []
    for block in blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard_after_forward, mp_policy=policy)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward, mp_policy=policy)
    for index, block in enumerate(blocks):
        if forward_prefetch:
            block.set_modules_to_forward_prefetch(blocks[index + 1:index + 1 + forward_prefetch])
        if backward_prefetch is not None:
            block.set_modules_to_backward_prefetch(list(reversed(blocks[max(0, index - backward_prefetch):index])))
    return model


def apply_fsdp1(model: nn.Module, *, device: torch.device, sharding_strategy: str = "FULL_SHARD",
                backward_prefetch: str | None = "BACKWARD_PRE", forward_prefetch: bool = False,
                limit_all_gathers: bool = True, per_block: bool = True, device_mesh=None, bf16: bool = False
                ) -> nn.Module:
    """FSDP1. HYBRID_SHARD needs an explicit 2-D device_mesh: without one it silently stops syncing replicas
    (measured on torch 2.13 CPU/gloo), so it is refused here."""
    import functools

    from torch.distributed.fsdp import BackwardPrefetch, MixedPrecision, ShardingStrategy
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    from commbench.training.synthetic import Block

    strategy = ShardingStrategy[sharding_strategy]
    if strategy in (ShardingStrategy.HYBRID_SHARD, ShardingStrategy._HYBRID_SHARD_ZERO2) and (
            device_mesh is None or device_mesh.ndim != 2):
        raise CommbenchError("FSDP1 HYBRID_SHARD needs a 2-D device mesh (replicate × shard); without one its "
                             "replicas silently stop syncing. Give --shard-group N")
    wrap = functools.partial(ModuleWrapPolicy, {Block})() if per_block else None
    precision = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else None
    return FSDP(model, sharding_strategy=strategy, auto_wrap_policy=wrap, device_mesh=device_mesh,
                backward_prefetch=BackwardPrefetch[backward_prefetch] if backward_prefetch else None,
                forward_prefetch=forward_prefetch, limit_all_gathers=limit_all_gathers,
                mixed_precision=precision,
                device_id=device if device.type == CUDA else torch.device(CPU))
