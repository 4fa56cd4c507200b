"""Exactly representable check data: small integers by rank, and the exact result each reduction must give."""

import torch

POISON = -1  # written into outputs before the check: never a pattern value nor a reduction of them
_MAX_LEVEL = 6  # values run over 0..level; small enough that sums stay exact in bfloat16 for small worlds
_RANK_STRIDE = 3  # shifts the pattern per rank so a chunk from the wrong rank or offset is caught


def _exact_integer_limit(dtype: torch.dtype) -> int:
    if dtype.is_floating_point:
        return round(2 / torch.finfo(dtype).eps)  # 2^precision: every integer up to it is exact
    return torch.iinfo(dtype).max


def _levels(dtype: torch.dtype, world: int) -> int:
    """How many distinct values a rank's pattern uses; a sum over all ranks must stay exactly representable."""
    return max(1, min(_MAX_LEVEL, _exact_integer_limit(dtype) // max(world, 1))) + 1


def _pattern(rank: int, index: torch.Tensor, levels: int) -> torch.Tensor:
    return (index + _RANK_STRIDE * rank) % levels


def rank_pattern(rank: int, start: int, length: int, *, world: int, dtype: torch.dtype,
                 device: torch.device) -> torch.Tensor:
    """Elements start..start+length of rank `rank`'s input: ((i + 3·rank) mod q), q ≤ 7."""
    index = torch.arange(start, start + length, dtype=torch.int64, device=device)
    return _pattern(rank, index, _levels(dtype, world)).to(dtype)


def reduced_pattern(start: int, length: int, *, world: int, op: str, dtype: torch.dtype,
                    device: torch.device) -> torch.Tensor:
    """Elements start..start+length of the reduction of every rank's pattern, computed exactly in float64.

    The pattern repeats every q elements, so the reduction is computed for one period and indexed.
    """
    levels = _levels(dtype, world)
    phase = torch.arange(levels, dtype=torch.float64)
    per_rank = torch.stack([_pattern(rank, phase, levels) for rank in range(world)])
    table = {
        "sum": lambda: per_rank.sum(0),
        "avg": lambda: per_rank.sum(0) / world,
        "max": lambda: per_rank.max(0).values,
        "min": lambda: per_rank.min(0).values,
    }[op]()
    index = torch.arange(start, start + length, dtype=torch.int64) % levels
    return table[index].to(dtype).to(device)


def count_wrong(actual: torch.Tensor, expected: torch.Tensor, *, op: str, world: int) -> int:
    """Mismatched elements. Exact, except avg on floats over a world that is not a power of two: backends may
    pre-multiply by a rounded 1/n (NCCL does), so allow n rounding steps of the data type there."""
    if op == "avg" and actual.dtype.is_floating_point and world & (world - 1):
        tolerance = world * torch.finfo(actual.dtype).eps * (_MAX_LEVEL + 1)
        wrong = (actual.double() - expected.double()).abs() > tolerance
    else:
        wrong = actual != expected
    return int(wrong.sum().item())
