"""Parallelism applied by small keyword-only functions (the torchtitan pattern), each taking only its own settings."""

import contextlib

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from commbench.errors import CommbenchError
from commbench.names import CPU, CUDA
from commbench.training.ddp_buckets import ddp_bucket_arguments
from commbench.training.ddp_hooks import COMM_HOOKS, register_comm_hook

DDP_COMM_HOOKS = COMM_HOOKS  # the --comm-hook names (training/ddp_hooks.py registers them)


class _DistributedDataParallel(DistributedDataParallel):
    """DDP whose no_sync() waits for a static graph's first iteration: DDP records a static graph on a synced
    iteration, and one under no_sync fails in backward (expect_autograd_hooks_ INTERNAL ASSERT, torch 2.13). So with
    gradient accumulation the first optimizer step syncs every micro-batch (the gradients are the same: an average
    summed with local gradients all-reduced later is the average of the sums); every later step skips as asked."""

    @contextlib.contextmanager
    def no_sync(self):
        if self.static_graph and not getattr(self, "_static_graph_delay_allreduce_enqueued", True):
            yield
            return
        with super().no_sync():
            yield


def apply_ddp(model: nn.Module, *, device: torch.device, bucket_cap_mb: float | None = None,
              first_bucket_mb: float | None = None, gradient_as_bucket_view: bool = False,
              static_graph: bool = False, comm_hook: str = "none") -> DistributedDataParallel:
    """Wrap in DDP. bucket_cap_mb and first_bucket_mb None keep DDP's default (a 1 MiB first bucket, then 25 MiB);
    training/ddp_buckets.py turns them into DDP's arguments."""
    if comm_hook not in COMM_HOOKS:
        raise CommbenchError(f"unknown --comm-hook {comm_hook!r}; choose from {', '.join(COMM_HOOKS)}")
    ddp = _DistributedDataParallel(model, device_ids=[device.index] if device.type == CUDA else None,
                                   gradient_as_bucket_view=gradient_as_bucket_view, static_graph=static_graph,
                                   **ddp_bucket_arguments(bucket_cap_mb, first_bucket_mb))
    register_comm_hook(ddp, comm_hook)
    return ddp


def apply_zero1(model: nn.Module, *, device: torch.device, lr: float, bucket_cap_mb: float | None = None,
                optimizer_class: type = torch.optim.AdamW):
    """ZeRO-1: DDP for the gradients, the Adam state sharded by torch's ZeroRedundancyOptimizer (optimizer_class:
    what each rank runs on its partition; MasterWeightAdamW for bf16 parameters with fp32 master copies)."""
    from torch.distributed.optim import ZeroRedundancyOptimizer

    ddp = apply_ddp(model, device=device, bucket_cap_mb=bucket_cap_mb)
    return ddp, ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=optimizer_class, lr=lr)


def apply_fsdp2(model: nn.Module, *, mesh, reshard_after_forward: bool | int = True, forward_prefetch: int = 0,
                backward_prefetch: int | None = None, bf16: bool = False, per_block: bool = True) -> nn.Module:
    """FSDP2 `fully_shard` on the embedding and each block (unless per_block is False: one unit), then on the root,
    as torchtitan lays it out (training/fsdp2_units.py: the root and the last block stay gathered after forward, the
    prefetch chains include the root and the embedding). reshard_after_forward False keeps parameters gathered from
    forward to backward (ZeRO-2); a 2-D mesh (replicate, shard) makes it HSDP. forward_prefetch / backward_prefetch
    name how many units ahead to gather explicitly (backward None = FSDP2's implicit prefetch)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from commbench.training.fsdp2_units import EMBEDDING, ROOT, block_name, fsdp2_units

    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 \
        else MixedPrecisionPolicy()
    embedding = getattr(model, "embedding", None)
    modules = {ROOT: model, EMBEDDING: embedding, **{block_name(i): block for i, block in enumerate(model.blocks)}}
    units = fsdp2_units(blocks=len(model.blocks), has_embedding=embedding is not None,
                        reshard_after_forward=reshard_after_forward, forward_prefetch=forward_prefetch,
                        backward_prefetch=backward_prefetch, per_block=per_block)
    for unit in units:  # children first, the root last
        fully_shard(modules[unit.name], mesh=mesh, reshard_after_forward=unit.reshard_after_forward, mp_policy=policy)
    for unit in units:
        if unit.forward_prefetch:
            modules[unit.name].set_modules_to_forward_prefetch([modules[name] for name in unit.forward_prefetch])
        if unit.backward_prefetch is not None:
            modules[unit.name].set_modules_to_backward_prefetch([modules[name] for name in unit.backward_prefetch])
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
    # the embedding is a unit of its own, as FSDP2's (training/fsdp2_units.py); the root keeps the norm and head
    wrap = functools.partial(ModuleWrapPolicy, {nn.Embedding, Block})() if per_block else None
    precision = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else None
    return FSDP(model, sharding_strategy=strategy, auto_wrap_policy=wrap, device_mesh=device_mesh,
                backward_prefetch=BackwardPrefetch[backward_prefetch] if backward_prefetch else None,
                forward_prefetch=forward_prefetch, limit_all_gathers=limit_all_gathers,
                mixed_precision=precision,
                device_id=device if device.type == CUDA else torch.device(CPU))
