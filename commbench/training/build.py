"""Turn one configuration into a model and optimizer on this rank, plus what the measurements need to know of it."""

from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.nn.parallel import DistributedDataParallel

from commbench.training.checkpointing import apply_activation_checkpointing
from commbench.training.ddp_buckets import rebuild_limits
from commbench.training.fsdp2_units import block_groups
from commbench.training.master_weights import MasterWeightAdamW
from commbench.training.meshes import DeviceMeshes
from commbench.training.precision import apply_matmul_precision, fsdp_dtypes
from commbench.training.spec import Fsdp1Backward, TrainConfig, TrainSpec
from commbench.training.synthetic import build_model
from commbench.training.wrappers import (
    Fsdp1BackwardPrefetch,
    Fsdp1Sharding,
    apply_ddp,
    apply_fsdp1,
    apply_fsdp2,
    apply_zero1,
    compile_ddp,
)
from commbench.training.zero2 import Zero2AdamW

_FSDP1_BACKWARD: dict[Fsdp1Backward, Fsdp1BackwardPrefetch | None] = {"pre": "BACKWARD_PRE", "post": "BACKWARD_POST",
                                                                      "none": None}


@dataclass
class Built:
    model: nn.Module
    optimizer: torch.optim.Optimizer
    ddp: nn.Module | None  # the DistributedDataParallel module, whose logging data we read
    units: list[list[tuple[int, ...]]]  # parameter shapes per FSDP unit (embedding, blocks, then the root's own)
    replica_of: int  # ranks with the same value hold identical state (DDP: all; FSDP: a shard's replicas)
    layout: dict = field(default_factory=dict)
    """models/shard_layout.local_state's keyword arguments beyond the shapes: the buckets the partitioned ZeRO-2
    shards and ZeRO-1 with overlap_with_ddp partitions by."""


def parameter_units(model: nn.Module, *, per_block: bool, blocks_per_unit: int = 1) -> list[list[tuple[int, ...]]]:
    """Parameter shapes grouped as FSDP wraps them, in parameter order: the embedding (a transformer's), each block
    (or each run of blocks_per_unit blocks), then the root's own (final norm and head)."""
    if not per_block:
        return [[tuple(p.shape) for p in model.parameters()]]
    blocks = cast(nn.ModuleList, model.blocks)
    children = ([[cast(nn.Module, model.embedding)]] if getattr(model, "embedding", None) is not None else []) + [
        [blocks[i] for i in group] for group in block_groups(len(blocks), blocks_per_unit)]
    in_children = {id(p) for unit in children for child in unit for p in child.parameters()}
    units = [[tuple(p.shape) for child in unit for p in child.parameters()] for unit in children]
    return units + [[tuple(p.shape) for p in model.parameters() if id(p) not in in_children]]


def _mesh(config: TrainConfig, device: torch.device, world: int, meshes: DeviceMeshes) -> DeviceMesh:
    """HSDP's (replicas × shard group) mesh, or the 1-D mesh of all ranks; shared by configurations of one shape."""
    if config.shard_group:
        return meshes.get(device.type, (world // config.shard_group, config.shard_group), ("replicate", "shard"))
    return meshes.get(device.type, (world,))


def build(config: TrainConfig, spec: TrainSpec, *, rank: int, world: int, device: torch.device,
          meshes: DeviceMeshes) -> Built:
    """meshes: the launch's device meshes (FSDP), shared by its configurations."""
    apply_matmul_precision(config.mixed_precision)  # process-wide: set for every configuration, on or off
    model: nn.Module = build_model(spec.shape, seed=spec.seed, device=device)
    if config.master_weights:  # the ZeRO paper's mixed precision: bf16 in the model, fp32 master in the optimizer
        model = model.to(torch.bfloat16)
    model = apply_activation_checkpointing(model, config.activation_checkpointing)
    units = parameter_units(model, per_block=config.wrap != "model", blocks_per_unit=config.blocks_per_unit or 1)
    model, optimizer, ddp, layout = _wrapped(model, config, spec, device=device, world=world, meshes=meshes)
    if ddp is not None:
        ddp._set_ddp_runtime_logging_sample_rate(1)  # log every iteration, not a sample of them
    optimizer = optimizer or (MasterWeightAdamW if config.master_weights else torch.optim.AdamW)(
        model.parameters(), lr=spec.lr)
    shards = config.shard_group or world
    replica_of = 0 if config.impl in ("ddp", "zero1", "zero2") else rank % shards  # ZeRO-2: whole parameters
    return Built(model, optimizer, ddp, units, replica_of, layout)


def _wrapped(model: nn.Module, config: TrainConfig, spec: TrainSpec, *, device: torch.device, world: int,
             meshes: DeviceMeshes
             ) -> tuple[nn.Module, torch.optim.Optimizer | None, DistributedDataParallel | None, dict[str, Any]]:
    """The model as the configuration's implementation wraps it; the optimizer where the implementation brings its
    own, the DDP module whose logging is read, and Built.layout."""
    per_block = config.wrap != "model"
    param_dtype, reduce_dtype = fsdp_dtypes(config.mixed_precision, config.impl, config.reduce_dtype)
    if config.impl == "ddp":
        ddp = apply_ddp(model, device=device, bucket_cap_mb=config.bucket_cap_mb,
                        first_bucket_mb=config.first_bucket_mb,
                        gradient_as_bucket_view=bool(config.gradient_as_bucket_view),
                        static_graph=bool(config.static_graph), comm_hook=config.comm_hook or "none")
        # compiled, Built.ddp stays the DDP module: its logging is read through it
        return (compile_ddp(ddp) if config.compile else ddp), None, ddp, {}
    if config.impl == "zero1":
        optimizer_class = MasterWeightAdamW if config.master_weights else torch.optim.AdamW
        ddp, zero = apply_zero1(model, device=device, lr=spec.lr, bucket_cap_mb=config.bucket_cap_mb,
                                optimizer_class=optimizer_class, overlap_with_ddp=bool(config.overlap_with_ddp))
        # with overlap_with_ddp, ZeroRedundancyOptimizer partitions by DDP's buckets
        layout = {"ddp_bucket_limits": rebuild_limits(config.bucket_cap_mb, None)} if config.overlap_with_ddp else {}
        # with overlap_with_ddp a stand-in: its zero_grad, step and optim are all the step and model_state use
        return ddp, cast(torch.optim.Optimizer, zero), ddp, layout
    if config.impl == "zero2":  # the paper's ZeRO-2 (bf16 model: master weights, validated before launch)
        return model, Zero2AdamW(model, lr=spec.lr, bucket_cap_mb=config.bucket_cap_mb), None, {
            "bucket_cap_mb": config.bucket_cap_mb}
    if config.impl == "fsdp2":
        backward = config.backward_prefetch
        return apply_fsdp2(model, mesh=_mesh(config, device, world, meshes),
                           reshard_after_forward=config.reshard_after_forward,
                           forward_prefetch=config.forward_prefetch or 0,
                           backward_prefetch=None if backward in (None, "default") else int(backward),
                           param_dtype=param_dtype, reduce_dtype=reduce_dtype, per_block=per_block,
                           blocks_per_unit=config.blocks_per_unit or 1, cpu_offload=bool(config.cpu_offload)
                           ), None, None, {}
    if config.impl == "fsdp1":
        return apply_fsdp1(model, device=device, sharding_strategy=_fsdp1_sharding(config),
                           # plan.py gives FSDP1 configurations FSDP1's prefetch values only
                           backward_prefetch=_FSDP1_BACKWARD[cast(Fsdp1Backward, config.backward_prefetch or "pre")],
                           forward_prefetch=bool(config.forward_prefetch),
                           limit_all_gathers=config.limit_all_gathers is not False, per_block=per_block,
                           device_mesh=_mesh(config, device, world, meshes) if config.shard_group else None,
                           param_dtype=param_dtype, reduce_dtype=reduce_dtype,
                           cpu_offload=bool(config.cpu_offload)), None, None, {}
    raise ValueError(f"unknown implementation {config.impl!r}")


def _fsdp1_sharding(config: TrainConfig) -> Fsdp1Sharding:
    """FULL_SHARD (ZeRO-3) or SHARD_GRAD_OP (ZeRO-2) by reshard_after_forward, hybrid with a shard group (HSDP)."""
    if config.reshard_after_forward:
        return "HYBRID_SHARD" if config.shard_group else "FULL_SHARD"
    return "_HYBRID_SHARD_ZERO2" if config.shard_group else "SHARD_GRAD_OP"
