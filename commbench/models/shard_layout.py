"""Exact model-state bytes of one rank, from the parameter shapes and how each implementation lays out its shards.

The ZeRO formulas (models/memory.py) divide Ψ by N as if every shard were equal. Real shards are not:
  FSDP2 (fully_shard) splits each parameter along dim 0 with torch.chunk: ⌈rows/N⌉ rows per rank, fewer (or none)
    on the last ranks, stored unpadded as far as the local tensor shows;
  FSDP1 flattens each wrapped unit into one FlatParameter and pads it to a multiple of N: every rank holds
    ⌈numel/N⌉ elements, padding included, and so do its gradient and Adam state;
  ZeRO-1 (torch's ZeroRedundancyOptimizer) gives whole parameters to ranks, largest first, each to the rank with
    the fewest elements so far: optimizer state per rank follows that greedy partition.
Over all ranks the unpadded layouts add up to exactly Ψ; FSDP1 adds N·⌈U/N⌉ − U padding elements per unit.
"""

import math
from dataclasses import dataclass

from commbench.models.memory import StateBytes


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
    sizes, owned = [0] * world, [[] for _ in range(world)]
    for index in order:
        rank = sizes.index(min(sizes))
        owned[rank].append(index)
        sizes[rank] += _numel(shapes[index])
    return owned


def local_state(*, impl: str, units: list[list[tuple[int, ...]]], rank: int, world: int,
                shard_group: int | None = None) -> LocalState:
    """What `rank` holds at rest (after the optimizer step): `units` are the parameter shapes per FSDP unit, in
    parameter order (one unit per block, then the root's own parameters). Sharded implementations shard over the
    shard group (HSDP) or all ranks; rank r is shard r mod group in a (replicas, shard) mesh."""
    shapes = [shape for unit in units for shape in unit]
    everything = sum(_numel(shape) for shape in shapes)
    if impl == "ddp":
        return LocalState(everything, everything, everything)
    if impl == "zero1":
        mine = sum(_numel(shapes[index]) for index in greedy_partition(shapes, world)[rank])
        return LocalState(everything, everything, mine)
    shards = shard_group or world
    shard = rank % shards
    if impl == "fsdp2":
        local = sum(dim0_chunk_elements(shape, shard, shards) for shape in shapes)
    elif impl == "fsdp1":
        local = sum(flat_padded_elements(unit, shards) for unit in units if unit)
    else:
        raise ValueError(f"unknown implementation {impl!r}")
    return LocalState(local, local, local)


# The strategy whose paper formula describes what each configuration holds at rest. FSDP reshards ZeRO-2's
# parameters after backward, so between steps ZeRO-2 holds what ZeRO-3 does; it differs only between forward and
# backward.
FORMULA_AT_REST = {"ddp": "ddp", "zero1": "zero1", "zero2": "zero3", "zero3": "zero3", "hsdp": "hsdp"}
