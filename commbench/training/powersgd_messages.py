"""The all-reduces torch's PowerSGD hook issues in one optimizer step once it compresses, predicted from DDP's bucket
layout (training/ddp_buckets.py) and the settings training/ddp_hooks.py registers it with.

torch 2.13's powerSGD_hook, per bucket: views each gradient as a matrix of its first dimension by the rest
(tensor.view(shape[0], -1): a bias or a norm's weight is n × 1); compresses it when (n + m)·r·min_compression_rate
< n·m, r = min(n, m, matrix_approximation_rank) (its _should_compress), so vectors never are; then all-reduces three
messages in turn: the gradients it does not compress, concatenated (a call of 0 elements when it compresses them
all), the P matrices of the compressed ones (n·r each, one buffer) and their Q matrices (m·r each, one buffer).
Batching same-shaped tensors (batch_tensors_with_same_shape) changes neither buffer's size.

No torch at import: the pure functions take shapes.
"""

import math

from commbench.models.comm_volume import TrainingTraffic
from commbench.training.ddp_hooks import POWERSGD_RANK
from commbench.training.spec import ModelShape

MIN_COMPRESSION_RATE = 2
"""PowerSGDState's default min_compression_rate, which training/ddp_hooks.py keeps."""


def bucket_messages(shapes: list[tuple[int, ...]], *, rank: int = POWERSGD_RANK,
                    min_compression_rate: float = MIN_COMPRESSION_RATE) -> tuple[int, int, int]:
    """Elements of one bucket's three all-reduces: the uncompressed gradients, the Ps and the Qs."""
    uncompressed = ps = qs = 0
    for shape in shapes:
        rows, cols = shape[0], math.prod(shape[1:])
        approximation_rank = min(rows, cols, rank)
        if (rows + cols) * approximation_rank * min_compression_rate < rows * cols:
            ps += rows * approximation_rank
            qs += cols * approximation_rank
        else:
            uncompressed += rows * cols
    return uncompressed, ps, qs


def step_messages(buckets: list[list[tuple[int, ...]]], *, rank: int = POWERSGD_RANK,
                  min_compression_rate: float = MIN_COMPRESSION_RATE) -> list[int]:
    """Elements of every all-reduce of a compressed step, bucket after bucket (three per bucket)."""
    return [elements for bucket in buckets
            for elements in bucket_messages(bucket, rank=rank, min_compression_rate=min_compression_rate)]


def powersgd_traffic(buckets: list[list[tuple[int, ...]]], *, world: int, element_bytes: int,
                     rank: int = POWERSGD_RANK, min_compression_rate: float = MIN_COMPRESSION_RATE
                     ) -> TrainingTraffic:
    """One optimizer step's messages (gradient accumulation syncs the last micro-batch only) and the bytes a ring
    all-reduce sends per rank for them: 2(n−1)/n of each message."""
    elements = sum(step_messages(buckets, rank=rank, min_compression_rate=min_compression_rate))
    ring = 2 * (world - 1) / world if world > 1 else 0.0
    return TrainingTraffic(elements, ring * elements * element_bytes)


def predicted_traffic(shape: ModelShape, *, cap_mb: float | None, first_mb: float | None, world: int,
                      element_bytes: int) -> TrainingTraffic:
    """powersgd_traffic over the buckets DDP forms for this model (ModelShape) at its rebuild, before the first
    compressed step; element_bytes: the gradients' (2 for bf16 parameters, else 4)."""
    from commbench.training.ddp_buckets import predicted_bucket_shapes

    buckets = predicted_bucket_shapes(shape, cap_mb, first_mb, element_bytes=element_bytes)
    return powersgd_traffic(buckets, world=world, element_bytes=element_bytes)
