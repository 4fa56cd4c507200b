"""The compute-only baseline of a configuration: the same model, micro-batches and precision, stepped on this rank with
no communication at all. A row's exposed communication cost is its step time minus this baseline's (paired step by
step in training/measure.py), measured the same way for DDP, ZeRO-1, FSDP1, FSDP2 and HSDP.

What a rank computes at world size N, per implementation: DDP, ZeRO-1 and the partitioned ZeRO-2 (training/zero2.py)
hold the whole model; FSDP gathers each
unit's full parameters before computing with them. So every rank's forward and backward is the full model's on its
own micro-batch, which an unsharded local copy of the model (a plain nn.Module: no hooks, no collectives) repeats.
The optimizer step is not the full model's: a sharded rank steps only its shard (FSDP's shards, ZeRO-1's partition,
ZeRO-2's slices of its buckets),
so the baseline's AdamW steps clones of exactly the tensors the real optimizer holds on this rank (DTensors stay
DTensors: FSDP2's optimizer pays their dispatch too, and a pointwise update of a sharded DTensor communicates
nothing).

Precision as the real step: DDP, ZeRO-1 and ZeRO-2 run the copy under the same autocast (training/step.py's
step_function), with bf16 parameters and the same master-weight optimizer where the configuration keeps master
weights; FSDP's bf16 policy computes with bf16 parameters on inputs it casts to bf16, so its copy is bf16 and casts
floating inputs.
A compiled DDP configuration's copy is compiled too, as one graph: DDP's graph is split at bucket edges
(training/wrappers.compile_ddp), so what fusion the split costs counts as communication's cost.
What the baseline leaves out is the communication's own work: collectives, FSDP's copy-in/copy-out and casts for the
reduction, DDP's gradient copies into buckets, ZeRO-1's broadcast, ZeRO-2's bucket copies, reduce-scatters and
all-gathers.

Memory: the copy adds its parameters and gradients and the optimizer's tensors to what the configuration holds. When
that, on top of the configuration's measured peak, exceeds a rank's memory budget, or building or warming the copy
runs out of memory, no rank runs the baseline and the row says why.
"""

from collections.abc import Callable
from typing import Any, cast

import torch
from torch import nn

from commbench.training.batches import BatchPool
from commbench.training.build import Built
from commbench.training.checkpointing import apply_activation_checkpointing
from commbench.training.master_weights import MasterWeightAdamW
from commbench.training.model_state import local_part
from commbench.training.precision import fsdp_bf16
from commbench.training.spec import TrainConfig, TrainSpec
from commbench.training.step import Model, step_function
from commbench.training.synthetic import build_model, count_params

METHOD = "unsharded local copy"
"""What the row's compute_baseline column says when the baseline ran."""
ADAMW_STATE_BYTES = 8  # fp32 exp_avg and exp_avg_sq per element
MASTER_STATE_BYTES = 12  # MasterWeightAdamW: fp32 master, exp_avg and exp_avg_sq per element


def local_optimizer(built: Built, impl: str) -> torch.optim.Optimizer:
    """The optimizer that updates this rank's tensors: ZeroRedundancyOptimizer's own (over its partition) for ZeRO-1,
    the configuration's optimizer otherwise (over FSDP's shards, DDP's whole model)."""
    return getattr(built.optimizer, "optim", built.optimizer) if impl == "zero1" else built.optimizer


def optimizer_tensors(built: Built, impl: str) -> list[torch.Tensor]:
    """The parameters the real optimizer steps on this rank (ZeRO-2's: its slices of the parameter buckets)."""
    local = local_optimizer(built, impl)
    # ZeRO-1 with overlap_with_ddp steps a functional AdamW, which holds one param_group
    groups = local.param_groups if hasattr(local, "param_groups") else [cast(Any, local).param_group]
    return [param for group in groups for param in group["params"]]


def extra_bytes(*, copy_elements: int, copy_element_bytes: int, optimizer_elements: int, state_bytes: int,
                clone_element_bytes: int) -> int:
    """Bytes the baseline adds: the copy's parameters and gradients; the optimizer's state per element over the
    elements it steps (state_bytes: 8 for AdamW, 12 with a master copy); and where it steps clones of a shard, the
    clones and their gradients (clone_element_bytes each; 0 where it steps the copy's own parameters)."""
    return 2 * copy_elements * copy_element_bytes + optimizer_elements * (state_bytes + 2 * clone_element_bytes)


def _sixteen_bit_copy(config: TrainConfig) -> bool:
    """Whether the copy's parameters are bf16: FSDP's bf16 policy computes with bf16 parameters, and DDP/ZeRO-1
    with master weights hold bf16 parameters in the model."""
    return fsdp_bf16(config.mixed_precision, config.impl) or bool(getattr(config, "master_weights", None))


def refusal(*, peak_bytes: float | None, extra: int, capacity_bytes: float | None) -> str | None:
    """Why this rank cannot hold the baseline beside the configuration (its peak plus the copy over what the rank's
    device holds), or None when it can or nobody can tell (no peak or no capacity: running out of memory while
    building or warming the copy still stops it)."""
    if peak_bytes is None or capacity_bytes is None or peak_bytes + extra <= capacity_bytes:
        return None
    return (f"absent: the local copy needs {extra / 2**20:.0f} MiB beside the configuration's peak of "
            f"{peak_bytes / 2**20:.0f} MiB, over the {capacity_bytes / 2**20:.0f} MiB a rank's device holds")


class _CastInputs(nn.Module):
    """FSDP's bf16 policy casts the root's floating inputs to the parameter dtype; token ids stay integers."""

    def __init__(self, model: nn.Module, dtype: torch.dtype):
        super().__init__()
        self.model, self.dtype = model, dtype

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.model(inputs.to(self.dtype) if inputs.is_floating_point() else inputs)


class _ShardStep:
    """The baseline's optimizer: zero_grad clears the copy's gradients (as the real step clears its own), step
    updates the shard clones, whose gradients stay allocated (their values do not change AdamW's work)."""

    def __init__(self, model: nn.Module, shard: torch.optim.Optimizer):
        self.model, self.shard = model, shard

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.model.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        self.shard.step()


def predicted_extra(built: Built, config: TrainConfig, spec: TrainSpec) -> int:
    """What building the baseline for this configuration will add on this rank, before it is built."""
    tensors = optimizer_tensors(built, config.impl)
    master = bool(getattr(config, "master_weights", None))
    return extra_bytes(copy_elements=count_params(spec.shape), copy_element_bytes=2 if _sixteen_bit_copy(config) else 4,
                       optimizer_elements=sum(local_part(t).numel() for t in tensors),
                       state_bytes=MASTER_STATE_BYTES if master else ADAMW_STATE_BYTES,
                       clone_element_bytes=0 if config.impl == "ddp" else max(
                           (t.element_size() for t in tensors), default=4))


def build_baseline(built: Built, config: TrainConfig, spec: TrainSpec, pool: BatchPool, *,
                   device: torch.device) -> Callable[..., float]:
    """The baseline's step (as training/step.py's step_function: returns the loss): the local copy and its
    optimizer, stepping on the configuration's own micro-batch pool."""
    model = apply_activation_checkpointing(build_model(spec.shape, seed=spec.seed, device=device),
                                           config.activation_checkpointing)  # the same recomputation: compute
    if _sixteen_bit_copy(config):
        model = model.to(torch.bfloat16)
    if fsdp_bf16(config.mixed_precision, config.impl):
        model = _CastInputs(model, torch.bfloat16)
    # the local optimizer's math: ZeRO-2's optimizer is MasterWeightAdamW plus its reductions, overlap_with_ddp's a
    # functional AdamW
    optimizer_class = MasterWeightAdamW if getattr(config, "master_weights", None) else torch.optim.AdamW
    optimizer: torch.optim.Optimizer | _ShardStep
    if config.impl == "ddp":  # DDP's optimizer steps the whole model: the copy's own parameters are its equal
        optimizer = optimizer_class(model.parameters(), lr=spec.lr)
    else:
        clones = []
        with torch.no_grad():
            for tensor in optimizer_tensors(built, config.impl):
                clone = nn.Parameter(tensor.detach().clone())
                clone.grad = torch.zeros_like(clone)
                clones.append(clone)
        optimizer = _ShardStep(model, optimizer_class(clones, lr=spec.lr))
    # compiled as the configuration is (its first warm-up step compiles); TorchDynamo's caches are not cleared here,
    # so the configuration's own compiled model does not compile again in the paired steps
    stepped: Model = torch.compile(model) if getattr(config, "compile", None) else model
    return step_function(stepped, optimizer, pool, accum_steps=config.accum_steps, precision=config.mixed_precision,
                         impl=config.impl, device=device)
