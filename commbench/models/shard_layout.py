"""Exact model-state bytes of one rank, from the parameter shapes and how each implementation lays out its shards.

The ZeRO formulas (models/memory.py) divide Ψ by N as if every shard were equal. Real shards are not:
  FSDP2 (fully_shard) splits each parameter along dim 0 with torch.chunk: ⌈rows/N⌉ rows per rank, fewer (or none)
    on the last ranks, stored unpadded as far as the local tensor shows;
  FSDP1 flattens each wrapped unit into one FlatParameter and pads it to a multiple of N: every rank holds
    ⌈numel/N⌉ elements, padding included, and so do its gradient and Adam state;
  ZeRO-1 (torch's ZeroRedundancyOptimizer) gives whole parameters to ranks, largest first, each to the rank with
    the fewest elements so far: optimizer state per rank follows that greedy partition. With overlap_with_ddp it
    gives whole DDP buckets instead, bucket b to rank b mod N (torch's hook_with_zero_step);
  ZeRO-2 (training/zero2.py) keeps the whole parameters and flattens them into buckets, in the order backward
    produces their gradients, each padded to a multiple of N: every rank holds ⌈B/N⌉ elements of each bucket's
    gradient, fp32 master copy and Adam moments, padding included.
Over all ranks the unpadded layouts add up to exactly Ψ; FSDP1 adds N·⌈U/N⌉ − U padding elements per unit, ZeRO-2
N·⌈B/N⌉ − B per bucket.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

from commbench.models.memory import StateBytes
from commbench.names import DDP_DEFAULT_CAP_MB, DTYPE_BYTES


@dataclass(frozen=True)
class LocalState:
    param_elements: int
    grad_elements: int
    optim_elements: int  # elements that carry optimizer state (Adam's m and v each have this many)

    def bytes(self, state: StateBytes) -> int:
        return int(self.param_elements * state.param + self.grad_elements * state.grad
                   + self.optim_elements * state.optim)


def _numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


def dim0_chunk_elements(shape: tuple[int, ...], shard: int, shards: int) -> int:
    """Elements of torch.chunk(tensor, shards, dim=0)[shard] (0 when there are fewer chunks than shards)."""
    if not shape:
        return 1 if shard == 0 else 0
    rows = shape[0]
    per_chunk = math.ceil(rows / shards)
    mine = max(0, min(per_chunk, rows - shard * per_chunk))
    return mine * _numel(shape[1:])


def flat_padded_elements(unit_shapes: list[tuple[int, ...]], shards: int) -> int:
    """Elements of one rank's shard of an FSDP1 FlatParameter, padding included."""
    return math.ceil(sum(_numel(shape) for shape in unit_shapes) / shards)


def greedy_partition(shapes: list[tuple[int, ...]], world: int) -> list[list[int]]:
    """ZeroRedundancyOptimizer's default partition: parameter indices per rank."""
    order = sorted(range(len(shapes)), key=lambda index: _numel(shapes[index]), reverse=True)  # stable, as torch's
    owned: list[list[int]] = [[] for _ in range(world)]
    sizes = [0] * world
    for index in order:
        rank = sizes.index(min(sizes))
        owned[rank].append(index)
        sizes[rank] += _numel(shapes[index])
    return owned


def ready_order_buckets(sizes: list[int], limits: Sequence[float]) -> list[list[int]]:
    """Indices into `sizes` per bucket, formed as DDP forms its buckets over tensors listed in the order backward
    produces them: whole tensors, a bucket closing once it holds its limit or more; limits [first, cap] in the units
    of `sizes` (the last limit holds for every later bucket)."""
    buckets, current, held, limit = [], [], 0, 0
    for index, size in enumerate(sizes):
        current.append(index)
        held += size
        if held >= limits[limit]:
            buckets.append(current)
            current, held, limit = [], 0, min(limit + 1, len(limits) - 1)
    return buckets + [current] if current else buckets


ZERO2_BUCKET_CAP_MB = DDP_DEFAULT_CAP_MB
"""The partitioned ZeRO-2's bucket cap when none is given: DDP's, so ZeRO-2's buckets are the size of ZeRO-1's."""
ZERO2_GRAD_BYTES = DTYPE_BYTES["bfloat16"]  # the paper's mixed precision, the only one the partitioned ZeRO-2 runs
FP32_GRAD_BYTES = DTYPE_BYTES["float32"]
"""DDP's gradients, which ZeRO-1 with overlap_with_ddp partitions: fp32, as the parameters."""


@dataclass(frozen=True)
class Zero2Bucket:
    params: tuple[int, ...]
    """Parameter indices (parameter order) in the order the flat bucket lays them out: backward's."""
    elements: int
    shard: int
    """Elements of the bucket on each rank, padding included: ⌈elements/N⌉."""


def zero2_buckets(shapes: list[tuple[int, ...]], world: int, cap_mb: float | None = None) -> list[Zero2Bucket]:
    """The partitioned ZeRO-2's buckets (training/zero2.py builds them from this): the parameters in the reverse of
    their order (about the order backward produces gradients), a bucket closing once its bf16 gradients hold
    cap_mb MiB or more, each flattened and padded to a multiple of `world` so that reduce-scatter and all-gather split
    it evenly."""
    order = list(reversed(range(len(shapes))))
    cap_bytes = (ZERO2_BUCKET_CAP_MB if cap_mb is None else cap_mb) * 2**20
    buckets = ready_order_buckets([_numel(shapes[index]) * ZERO2_GRAD_BYTES for index in order], [cap_bytes])
    result = []
    for bucket in buckets:
        params = tuple(order[position] for position in bucket)
        elements = sum(_numel(shapes[index]) for index in params)
        result.append(Zero2Bucket(params, elements, math.ceil(elements / world)))
    return result


def overlap_partition(shapes: list[tuple[int, ...]], world: int, ddp_bucket_limits: list[int],
                      grad_bytes: int = FP32_GRAD_BYTES) -> list[list[int]]:
    """ZeroRedundancyOptimizer with overlap_with_ddp: parameter indices per rank, each DDP bucket (limits in bytes,
    training/ddp_buckets.rebuild_limits; fp32 gradients) wholly to rank bucket index mod N, as torch's
    hook_with_zero_step assigns them without shard_buckets."""
    order = list(reversed(range(len(shapes))))
    buckets = ready_order_buckets([_numel(shapes[index]) * grad_bytes for index in order], ddp_bucket_limits)
    owned: list[list[int]] = [[] for _ in range(world)]
    for number, bucket in enumerate(buckets):
        owned[number % world].extend(order[position] for position in bucket)
    return owned


def local_state(*, impl: str, units: list[list[tuple[int, ...]]], rank: int, world: int,
                shard_group: int | None = None, bucket_cap_mb: float | None = None,
                ddp_bucket_limits: list[int] | None = None) -> LocalState:
    """What `rank` holds at rest (after the optimizer step): `units` are the parameter shapes per FSDP unit, in
    parameter order (one unit per block, then the root's own parameters). Sharded implementations shard over the
    shard group (HSDP) or all ranks; rank r is shard r mod group in a (replicas, shard) mesh. bucket_cap_mb: the
    partitioned ZeRO-2's buckets (None: ZERO2_BUCKET_CAP_MB); ddp_bucket_limits: ZeRO-1 with overlap_with_ddp, whose
    partition follows DDP's buckets."""
    shapes = [shape for unit in units for shape in unit]
    everything = sum(_numel(shape) for shape in shapes)
    if impl == "ddp":
        return LocalState(everything, everything, everything)
    if impl == "zero1":
        owned = overlap_partition(shapes, world, ddp_bucket_limits) if ddp_bucket_limits \
            else greedy_partition(shapes, world)
        mine = sum(_numel(shapes[index]) for index in owned[rank])
        return LocalState(everything, everything, mine)
    if impl == "zero2":  # whole bf16 parameters; gradient, master and moments of this rank's slice of each bucket
        mine = sum(bucket.shard for bucket in zero2_buckets(shapes, world, bucket_cap_mb))
        return LocalState(everything, mine, mine)
    shards = shard_group or world
    shard = rank % shards
    if impl == "fsdp2":
        local = sum(dim0_chunk_elements(shape, shard, shards) for shape in shapes)
    elif impl == "fsdp1":
        local = sum(flat_padded_elements(unit, shards) for unit in units if unit)
    else:
        raise ValueError(f"unknown implementation {impl!r}")
    return LocalState(local, local, local)


FSDP_IMPLS = ("fsdp1", "fsdp2")


def formula_at_rest(strategy: str, impl: str) -> str:
    """The strategy whose paper formula describes what a configuration holds at rest (after the optimizer step).
    FSDP reshards ZeRO-2's parameters after backward, so between steps its ZeRO-2 holds what ZeRO-3 does (it differs
    only between forward and backward); the partitioned ZeRO-2 (impl zero2) keeps them whole: the paper's ZeRO-2."""
    return "zero3" if (strategy, impl in FSDP_IMPLS) == ("zero2", True) else strategy
