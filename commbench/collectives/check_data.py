"""Exactly representable check data: small integers by rank, and the exact result each reduction must give.

Rank r's input element i is (i + 3·r) mod q with q ≤ 7 (for prod: 2 where i mod (n + 1) = r, else 1, so a product over
the n ranks is 2 or 1, exact in every type at any world size, and a rank's missing factor shows at its own positions),
so every input and every reduction of them repeats every q elements. Where even a sum of ones over the n ranks would
pass the largest exact integer of the type (int8 beyond 126 ranks, uint8 beyond 254, fp8 beyond 8 or 16), a sum or
average uses the same one-position-per-rank layout with 1 and 0: every sum is 1 or 0. Nothing here is therefore computed
per element: one period is computed exactly (float64, q values), tiled into a row of about 64 Ki elements (a whole
number of periods, so every row starts at the same phase), and the row is written into a buffer, or compared with it,
through a broadcasting 2-D view of the buffer. Filling needs no memory besides the buffer; checking needs the row and
the comparison's mask of one slice of rows (working_bytes states it, for the memory plan made before launch). (Building
the values with a buffer-sized int64 index cost 6-12× the buffer, more than the GPU had at large sizes.) torch is
imported where a function runs: the launcher, which never loads torch, asks working_bytes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

POISON = -1  # written into outputs before the check: never a pattern value nor a reduction of them
_MAX_LEVEL = 6  # values run over 0..level; small enough that sums stay exact in bfloat16 for small worlds
_RANK_STRIDE = 3  # shifts the pattern per rank so a chunk from the wrong rank or offset is caught
_ROW_ELEMENTS = 1 << 16  # target row length; a whole number of periods is used
_CHECK_SLICE_ELEMENTS = 1 << 20  # elements compared at once: bounds the mask (and avg's float64 copy) a check holds
PROD = "prod"


@dataclass(frozen=True)
class Segment:
    """`length` consecutive output elements that must hold elements start..start+length of one pattern: rank
    `source`'s input, or, with source None, the reduction of every rank's input by the point's op."""

    length: int
    start: int = 0
    source: int | None = None


def _exact_integer_limit(dtype: torch.dtype) -> int:
    import torch

    if dtype.is_floating_point:
        return round(2 / torch.finfo(dtype).eps)  # 2^precision: every integer up to it is exact
    return torch.iinfo(dtype).max - 1  # uint8's POISON (-1) reads 255: no reduction may reach it


def _one_hot(dtype: torch.dtype, world: int, op: str) -> bool:
    """Each rank puts its mark at positions of its own (ones elsewhere for prod, zeros for a sum that could
    otherwise pass the type's exact range), so every reduction stays exact at any world size."""
    return op == PROD or (op in ("sum", "avg") and _exact_integer_limit(dtype) < max(world, 1))


def _levels(dtype: torch.dtype, world: int, op: str) -> int:
    """How many distinct values a rank's pattern uses (its period); a reduction over all ranks must stay exactly
    representable (a sum of values up to `levels - 1`, or one mark per position)."""
    if _one_hot(dtype, world, op):
        return max(world, 1) + 1  # the period: one position per rank, and one where no rank puts its mark
    return max(1, min(_MAX_LEVEL, _exact_integer_limit(dtype) // max(world, 1))) + 1


def _pattern(rank: int, index: torch.Tensor, levels: int, op: str, one_hot: bool) -> torch.Tensor:
    if one_hot:  # prod: ones (a zero would hide every other rank) and one 2 per period; a sum: one 1 per period
        return (0 if op != PROD else 1) + (index % levels == rank % levels).double()
    return (index + _RANK_STRIDE * rank) % levels


_COMBINE = {"sum": "add", "avg": "add", PROD: "mul", "max": "maximum", "min": "minimum"}
"""How the reduction of the ranks' periods is accumulated (avg: the sum, divided by n at the end)."""


def _period(source: int | None, *, world: int, op: str, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """One period (q elements, from pattern index 0) of rank `source`'s pattern or of the reduction over ranks,
    accumulated rank by rank (a q-element float64 at a time, never n × q of them: q is n + 1 for prod)."""
    import torch

    levels, one_hot = _levels(dtype, world, op), _one_hot(dtype, world, op)
    phase = torch.arange(levels, dtype=torch.float64)
    if source is not None:
        values = _pattern(source, phase, levels, op, one_hot)
    else:
        combine = getattr(torch, _COMBINE[op])
        values = _pattern(0, phase, levels, op, one_hot)
        for rank in range(1, world):
            values = combine(values, _pattern(rank, phase, levels, op, one_hot))
        if op == "avg":
            values = values / world
    # via float32: torch converts float64 to every type commbench runs, fp8 included, through it exactly (the values
    # are small integers)
    return values.to(torch.float32).to(dtype).to(device)


def working_bytes(*, elt_bytes: int, world: int, op: str, floating: bool) -> int:
    """The most memory a check takes besides the point's buffers, on one rank (what the functions below allocate:
    a period and its float64 steps, a row, and one slice's comparison, whose avg-on-floats form holds two float64
    copies of the slice). An upper bound: the period is taken at its longest, n + 1 elements."""
    levels = max(world, 1) + 1
    width = max(levels, _ROW_ELEMENTS)
    period = 8 * levels * 8  # the phase, the running reduction and a rank's pattern with its temporaries, in float64
    row = 2 * (width + levels) * elt_bytes  # the period repeated past one row (a segment's and the next one's)
    compared = max(_CHECK_SLICE_ELEMENTS, width)
    comparison = compared * (1 + 2 * 8) + width * 8 if op == "avg" and floating else compared
    return period + row + comparison


class _Rows:
    """The part of a buffer a segment covers, seen as full rows that all hold one repeating row, and a shorter tail."""

    def __init__(self, part: torch.Tensor, segment: Segment, *, world: int, op: str):
        period = _period(segment.source, world=world, op=op, dtype=part.dtype, device=part.device)
        levels = period.numel()
        width = max(levels, _ROW_ELEMENTS // levels * levels)
        offset = segment.start % levels
        self.row = period.repeat(width // levels + 1)[offset:offset + width]  # pattern index start.. start+width
        full = segment.length // width
        self.full = part[:full * width].view(full, width)  # fails loudly on a non-contiguous buffer
        self.tail = part[full * width:]


def _segments_of(buffer: torch.Tensor, segments: list[Segment]) -> Iterator[tuple[torch.Tensor, Segment]]:
    """(the part of buffer each segment covers, segment), in order; the segments must cover the buffer exactly."""
    if sum(segment.length for segment in segments) != buffer.numel():
        raise ValueError(f"segments cover {sum(s.length for s in segments)} elements of a {buffer.numel()}-element "
                         "buffer")
    offset = 0
    for segment in segments:
        yield buffer.view(-1)[offset:offset + segment.length], segment
        offset += segment.length


def write_expected(out: torch.Tensor, segments: list[Segment], *, world: int, op: str = "none") -> None:
    """Write the patterns the segments describe into out, in its dtype and on its device, without temporaries."""
    for part, segment in _segments_of(out, segments):
        rows = _Rows(part, segment, world=world, op=op)
        rows.full.copy_(rows.row.expand_as(rows.full))
        rows.tail.copy_(rows.row[:rows.tail.numel()])


def write_input(buffer: torch.Tensor, *, rank: int, world: int, op: str = "none") -> None:
    """Rank `rank`'s input pattern for a point reduced by `op`, from element 0, written over the whole buffer."""
    write_expected(buffer, [Segment(buffer.numel(), source=rank)], world=world, op=op)


def rank_pattern(rank: int, start: int, length: int, *, world: int, dtype: torch.dtype,
                 device: torch.device, op: str = "none") -> torch.Tensor:
    """Elements start..start+length of rank `rank`'s input, as a new tensor: ((i + 3·rank) mod q), q ≤ 7."""
    import torch

    values = torch.empty(length, dtype=dtype, device=device)
    write_expected(values, [Segment(length, start, source=rank)], world=world, op=op)
    return values


def reduced_pattern(start: int, length: int, *, world: int, op: str, dtype: torch.dtype,
                    device: torch.device) -> torch.Tensor:
    """Elements start..start+length of the reduction of every rank's input, as a new tensor (exact: computed in
    float64 for one period, then rounded once to dtype)."""
    import torch

    values = torch.empty(length, dtype=dtype, device=device)
    write_expected(values, [Segment(length, start)], world=world, op=op)
    return values


def count_wrong(actual: torch.Tensor, segments: list[Segment], *, op: str, world: int) -> int:
    """Elements of actual that differ from what the segments describe, compared slice by slice (no expected buffer).

    Exact, except avg on floats over a world that is not a power of two: backends may pre-multiply by a rounded 1/n
    (NCCL does), so allow n rounding steps of the data type there."""
    import torch

    if op == "avg" and actual.dtype.is_floating_point and world & (world - 1):
        tolerance = world * torch.finfo(actual.dtype).eps * (_MAX_LEVEL + 1)

        def differs(values: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
            return (values.double() - expected.double()).abs_() > tolerance
    else:
        def differs(values: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
            return values != expected

    wrong = torch.zeros((), dtype=torch.int64, device=actual.device)  # summed on the device: one sync at the end
    for part, segment in _segments_of(actual, segments):
        rows = _Rows(part, segment, world=world, op=op)
        rows_per_slice = max(1, _CHECK_SLICE_ELEMENTS // rows.row.numel())
        for first in range(0, rows.full.shape[0], rows_per_slice):
            wrong += differs(rows.full[first:first + rows_per_slice], rows.row).sum()
        wrong += differs(rows.tail, rows.row[:rows.tail.numel()]).sum()
    return int(wrong.item())
