"""Bytes each rank sends per training step with ring collectives, and their α–β time.

With Ψ parameters of d bytes and N ranks, a ring reduce-scatter or all-gather of the model sends (N−1)/N·Ψ·d per
rank and takes (N−1) steps; an all-reduce is the two. DDP all-reduces the gradients; ZeRO-1 and ZeRO-2
reduce-scatter gradients and all-gather parameters (the same bytes); ZeRO-3/FSDP all-gathers parameters in forward
and again in backward and reduce-scatters gradients: 3 phases, 1.5× DDP.
"""

import math
from dataclasses import dataclass

from commbench.models.shard_layout import zero2_buckets
from commbench.models.strategies import STRATEGIES, WITHOUT_SHARD_GROUP

# ring phases (one reduce-scatter or all-gather of the whole model) per step; HSDP's also depend on its shard group,
# so the per-model table leaves it out
PHASES = {key: STRATEGIES[key].ring_phases for key in WITHOUT_SHARD_GROUP}


@dataclass(frozen=True)
class StepTraffic:
    strategy: str  # key: ddp, zero1, zero2, zero3
    bytes_sent_per_rank: float
    ratio_to_ddp: float | None  # None at one rank, where nothing is sent
    time_s: float | None  # α–β estimate, when α and bandwidth are known


def ring_time_s(phases: int, *, ranks: int, payload_bytes: float, alpha_us: float, busbw_gbps: float) -> float:
    """Hockney cost of `phases` ring phases: each (N−1)·α plus its (N−1)/N·payload over the bus bandwidth."""
    per_phase = (ranks - 1) * alpha_us * 1e-6 + (ranks - 1) / ranks * payload_bytes / (busbw_gbps * 1e9) \
        if ranks > 1 else 0.0
    return phases * per_phase


def traffic(*, params: float, ranks: int, dtype_bytes: float, alpha_us: float | None = None,
            busbw_gbps: float | None = None) -> list[StepTraffic]:
    payload = params * dtype_bytes
    per_phase = (ranks - 1) / ranks * payload
    rows = []
    for strategy, phases in PHASES.items():
        time_s = None
        if alpha_us is not None and busbw_gbps is not None:
            time_s = ring_time_s(phases, ranks=ranks, payload_bytes=payload, alpha_us=alpha_us, busbw_gbps=busbw_gbps)
        ratio = phases / PHASES["ddp"] if per_phase > 0 else None
        rows.append(StepTraffic(strategy, phases * per_phase, ratio, time_s))
    return rows


@dataclass(frozen=True)
class TrainingTraffic:
    """Communication of one optimizer step of a training configuration."""

    msg_elements: int
    """Σ over collectives of the message size in elements (the larger of input and output, nccl-tests' size)."""
    bytes_sent_per_rank: float
    """What ring algorithms send per rank for those messages (all-reduce 2(n−1)/n, the others (n−1)/n)."""


def _unit_message(unit: list[tuple[int, ...]], *, impl: str, shards: int) -> int:
    """Elements of one FSDP unit's all-gather output (= its reduce-scatter input), padding included: FSDP2 pads
    each parameter's dim-0 chunk, FSDP1 the unit's flat parameter."""
    if impl == "fsdp1":
        return shards * math.ceil(sum(math.prod(shape) for shape in unit) / shards)
    return shards * sum(math.ceil(shape[0] / shards) * math.prod(shape[1:]) if shape else 1 for shape in unit)


def training_traffic(*, strategy: str, impl: str, units: list[list[tuple[int, ...]]], world: int, accum_steps: int,
                     shard_group: int | None = None, gather_bytes: int = 4, reduce_bytes: int = 4,
                     accum_sync: str | None = None, bucket_cap_mb: float | None = None) -> TrainingTraffic:
    """Per optimizer step of `accum_steps` micro-batches whose gradient sync is skipped on all but the last:
      ddp    one all-reduce of the gradients;
      zero1  torch's ZeroRedundancyOptimizer: that all-reduce, then each parameter broadcast from its owner (the
             paper's ZeRO-1 reduce-scatters and all-gathers instead: 2 phases, not 3);
      zero2  an all-gather per micro-batch (forward) and one reduce-scatter; FSDP1 (SHARD_GRAD_OP) keeps the
             parameters gathered across no_sync micro-batches, so it gathers once per optimizer step; the
             partitioned ZeRO-2 (impl zero2, training/zero2.py) reduce-scatters its padded buckets every micro-batch
             (bucket_cap_mb: their cap) and all-gathers them once, after the optimizer step;
      zero3  two all-gathers per micro-batch (forward and backward) and one reduce-scatter; FSDP1 never reshards
             the root unit after forward, so the root is gathered once; FSDP2 (torchtitan's layout,
             training/fsdp2_units.py) keeps the root and the last block gathered, so both are gathered once (with
             one unit for the model, that unit reshards and is gathered twice);
      hsdp   zero3 inside each shard group, plus an all-reduce of each gradient shard across the replicas.
    `units` lists the FSDP units' parameter shapes with the root's own unit last (after the last block).
    accum_sync (FSDP under accumulation, training/step.py): None or last as above; every reduces (and HSDP
    all-reduces) every micro-batch; last-gathered (FSDP2) keeps parameters gathered after each non-last backward, so
    later micro-batches gather only what forward resharded; replicas-last (HSDP) reduce-scatters every micro-batch and
    all-reduces across replicas on the last only.
    """
    everything = sum(math.prod(shape) for unit in units for shape in unit)
    ring = lambda n: (n - 1) / n if n > 1 else 0.0  # noqa: E731  (the (n−1)/n of one ring phase)
    if impl in ("ddp", "zero1"):
        elements, sent = everything, 2 * ring(world) * everything * reduce_bytes
        if impl == "zero1":
            elements, sent = elements + everything, sent + ring(world) * everything * gather_bytes
        return TrainingTraffic(elements, sent)
    if impl == "zero2":
        padded = world * sum(bucket.shard for bucket in zero2_buckets(
            [shape for unit in units for shape in unit], world, bucket_cap_mb))
        return TrainingTraffic((accum_steps + 1) * padded,
                               ring(world) * padded * (accum_steps * reduce_bytes + gather_bytes))
    shards = shard_group or world
    messages = [_unit_message(unit, impl=impl, shards=shards) if unit else 0 for unit in units]
    unit_elements = sum(messages)
    gathered = later = 0  # elements all-gathered by the first micro-batch, and by each later one
    for index, message in enumerate(messages):
        root = index == len(messages) - 1
        kept = (impl == "fsdp1" and root) or (impl == "fsdp2" and len(messages) > 1 and index >= len(messages) - 2)
        gathered += message * (1 if strategy == "zero2" or kept else 2)
        # still gathered from the previous backward: only what forward resharded is gathered again (in backward)
        later += message * (0 if strategy == "zero2" or kept else 1)
    if accum_sync == "last-gathered":
        gathered += (accum_steps - 1) * later
    elif not ((impl, strategy) == ("fsdp1", "zero2") and accum_sync != "every"):
        gathered *= accum_steps  # (FSDP1's SHARD_GRAD_OP keeps parameters gathered across no_sync micro-batches)
    reduced = unit_elements * (1 if accum_sync in (None, "last", "last-gathered") else accum_steps)
    if shards == 1:  # a shard group of one rank holds whole parameters: FSDP gathers and reduce-scatters nothing
        gathered = reduced = 0
    elements = gathered + reduced
    sent = ring(shards) * (gathered * gather_bytes + reduced * reduce_bytes)
    replicas = world // shards
    if replicas > 1:
        shard_elements = unit_elements // shards * (accum_steps if accum_sync == "every" else 1)
        elements += shard_elements
        sent += 2 * ring(replicas) * shard_elements * reduce_bytes
    return TrainingTraffic(elements, sent)
