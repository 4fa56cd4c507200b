"""Parallelism applied by small keyword-only functions (the torchtitan pattern), each taking only its own settings."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal, cast

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from commbench.errors import CommbenchError
from commbench.names import CPU, CUDA
from commbench.training.ddp_buckets import ddp_bucket_arguments
from commbench.training.ddp_hooks import COMM_HOOKS, CommHook, register_comm_hook

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.optim import ZeroRedundancyOptimizer

DDP_COMM_HOOKS: tuple[CommHook, ...] = COMM_HOOKS  # the --comm-hook names (training/ddp_hooks.py registers them)
Fsdp1Sharding = Literal["FULL_SHARD", "SHARD_GRAD_OP", "HYBRID_SHARD", "_HYBRID_SHARD_ZERO2"]
"""FSDP1's ShardingStrategy members that commbench runs, by name: ZeRO-3 and ZeRO-2, each whole or hybrid (HSDP)."""
Fsdp1BackwardPrefetch = Literal["BACKWARD_PRE", "BACKWARD_POST"]
"""FSDP1's BackwardPrefetch members, by name (None: no backward prefetch)."""


class _DistributedDataParallel(DistributedDataParallel):
    """DDP whose no_sync() waits for a static graph's first iteration: DDP records a static graph on a synced
    iteration, and one under no_sync fails in backward (expect_autograd_hooks_ INTERNAL ASSERT, torch 2.13). So with
    gradient accumulation the first optimizer step syncs every micro-batch (the gradients are the same: an average
    summed with local gradients all-reduced later is the average of the sums); every later step skips as asked."""

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
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


def compile_ddp(ddp: DistributedDataParallel) -> nn.Module:
    """torch.compile over the DDP module, as torch documents compiled DDP. DDP's own forward still runs eagerly
    (TorchDynamo breaks the graph there), so its C++ reducer, bucket hooks, comm hook, static graph and no_sync work as
    without compile; TorchDynamo compiles the model inside, split by its DDPOptimizer at bucket edges (a 1 MiB first
    piece, then DDP's cap), so each bucket's all-reduce can start while the rest of backward runs. TorchDynamo's
    caches are cleared first: every configuration of a launch compiles its own model, and earlier ones would count
    toward its recompile limit (8 per function), past which it silently runs the function eagerly."""
    torch._dynamo.reset()
    return cast(nn.Module, torch.compile(ddp))


class _ZeroStepInHook:
    """ZeroRedundancyOptimizer with overlap_with_ddp as the training step calls it: the partition's step has run in
    DDP's comm hook, so step() does nothing (torch's own would log a warning on every step); zero_grad is the
    wrapped one's, and optim its local (functional) optimizer, whose state model_state.count reads."""

    def __init__(self, zero: ZeroRedundancyOptimizer) -> None:
        self.zero = zero

    @property
    def optim(self) -> torch.optim.Optimizer:
        return self.zero.optim

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.zero.zero_grad(set_to_none=set_to_none)

    def step(self, closure: object = None) -> None:
        return None


def apply_zero1(model: nn.Module, *, device: torch.device, lr: float, bucket_cap_mb: float | None = None,
                optimizer_class: type[torch.optim.Optimizer] = torch.optim.AdamW, overlap_with_ddp: bool = False
                ) -> tuple[DistributedDataParallel, ZeroRedundancyOptimizer | _ZeroStepInHook]:
    """ZeRO-1: DDP for the gradients, the Adam state sharded by torch's ZeroRedundancyOptimizer (optimizer_class:
    what each rank runs on its partition; MasterWeightAdamW for bf16 parameters with fp32 master copies).
    overlap_with_ddp: torch's hook_with_zero_step around DDP's all-reduce hook steps each rank's partition, and
    broadcasts it, from the hook of the last bucket, overlapping DDP's outstanding all-reduces; each DDP bucket is one
    rank's (bucket b to rank b mod N). torch requires NCCL (it refuses gloo, which may hang), a functional optimizer
    (AdamW has one, MasterWeightAdamW not) and DDP's rebuilt buckets: the partition takes its first step in the third
    training step (spec._validate_zero refuses what cannot run)."""
    from torch.distributed.optim import ZeroRedundancyOptimizer

    ddp = apply_ddp(model, device=device, bucket_cap_mb=bucket_cap_mb)
    zero = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=optimizer_class, lr=lr,
                                   overlap_with_ddp=overlap_with_ddp)
    if not overlap_with_ddp:
        return ddp, zero
    from torch.distributed.algorithms.ddp_comm_hooks.ddp_zero_hook import hook_with_zero_step
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    ddp.register_comm_hook(None, hook_with_zero_step(allreduce_hook, ddp, zero))
    return ddp, _ZeroStepInHook(zero)


def apply_fsdp2(model: nn.Module, *, mesh: DeviceMesh, reshard_after_forward: bool | int | None = True,
                forward_prefetch: int = 0, backward_prefetch: int | None = None, param_dtype: torch.dtype | None = None,
                reduce_dtype: torch.dtype | None = None, per_block: bool = True, blocks_per_unit: int = 1,
                cpu_offload: bool = False) -> nn.Module:
    """FSDP2 `fully_shard` on the embedding and each block (unless per_block is False: one unit), then on the root,
    as torchtitan lays it out (training/fsdp2_units.py: the root and the last block stay gathered after forward, the
    prefetch chains include the root and the embedding). reshard_after_forward False keeps parameters gathered from
    forward to backward (ZeRO-2); a 2-D mesh (replicate, shard) makes it HSDP. forward_prefetch / backward_prefetch
    name how many units ahead to gather explicitly (backward None = FSDP2's implicit prefetch). param_dtype and
    reduce_dtype: the MixedPrecisionPolicy (training/precision.fsdp_dtypes); cpu_offload keeps the shards, their
    gradients and so the optimizer's state in host memory (CPUOffloadPolicy)."""
    from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, OffloadPolicy, fully_shard

    from commbench.training.fsdp2_units import EMBEDDING, ROOT, block_groups, fsdp2_units, group_name

    policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)
    offload = CPUOffloadPolicy() if cpu_offload else OffloadPolicy()
    embedding: nn.Module | None = getattr(model, "embedding", None)
    model_blocks = cast(nn.ModuleList, model.blocks)
    # a unit of several blocks is one fully_shard over their list; they share one FSDP state, so the first of them
    # stands for the unit wherever another unit names it to prefetch
    groups = {group_name(group): [model_blocks[i] for i in group]
              for group in block_groups(len(model_blocks), blocks_per_unit)}
    modules: dict[str, nn.Module | list[nn.Module] | None] = {
        ROOT: model, EMBEDDING: embedding, **{name: blocks if len(blocks) > 1 else blocks[0]
                                              for name, blocks in groups.items()}}
    # fully_shard below turns each into an FSDPModule (the prefetch setters are its methods)
    first = {name: cast(FSDPModule, module[0] if isinstance(module, list) else module)
             for name, module in modules.items()}
    units = fsdp2_units(blocks=len(model_blocks), has_embedding=embedding is not None,
                        reshard_after_forward=reshard_after_forward, forward_prefetch=forward_prefetch,
                        backward_prefetch=backward_prefetch, per_block=per_block, blocks_per_unit=blocks_per_unit)
    for unit in units:  # children first, the root last
        module = modules[unit.name]
        assert module is not None  # fsdp2_units names the embedding only when the model has one
        fully_shard(module, mesh=mesh, reshard_after_forward=unit.reshard_after_forward, mp_policy=policy,
                    offload_policy=offload)
    for unit in units:
        if unit.forward_prefetch:
            first[unit.name].set_modules_to_forward_prefetch([first[name] for name in unit.forward_prefetch])
        if unit.backward_prefetch is not None:
            first[unit.name].set_modules_to_backward_prefetch([first[name] for name in unit.backward_prefetch])
    return model


def apply_fsdp1(model: nn.Module, *, device: torch.device, sharding_strategy: Fsdp1Sharding = "FULL_SHARD",
                backward_prefetch: Fsdp1BackwardPrefetch | None = "BACKWARD_PRE", forward_prefetch: bool = False,
                limit_all_gathers: bool = True, per_block: bool = True, device_mesh: DeviceMesh | None = None,
                param_dtype: torch.dtype | None = None, reduce_dtype: torch.dtype | None = None,
                cpu_offload: bool = False) -> nn.Module:
    """FSDP1. HYBRID_SHARD needs an explicit 2-D device_mesh: without one it silently stops syncing replicas
    (measured on torch 2.13 CPU/gloo), so it is refused here. param_dtype/reduce_dtype: its MixedPrecision (None:
    none); cpu_offload: CPUOffload(offload_params=True), the shards and their gradients in host memory."""
    import functools

    from torch.distributed.fsdp import BackwardPrefetch, CPUOffload, MixedPrecision, ShardingStrategy
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
    precision = MixedPrecision(param_dtype=param_dtype, reduce_dtype=reduce_dtype) \
        if param_dtype is not None or reduce_dtype is not None else None
    return FSDP(model, sharding_strategy=strategy, auto_wrap_policy=wrap, device_mesh=device_mesh,
                backward_prefetch=BackwardPrefetch[backward_prefetch] if backward_prefetch else None,
                forward_prefetch=forward_prefetch, limit_all_gathers=limit_all_gathers,
                mixed_precision=precision, cpu_offload=CPUOffload(offload_params=cpu_offload),
                device_id=device if device.type == CUDA else torch.device(CPU))
