"""Which nccl-tests test an unnamed table is (a log cut to its table, no `*_perf` command line): its busbw ÷ algbw is
the collective's busbw factor at the table's world size (2(n−1)/n for all_reduce, (n−1)/n for all_gather,
reduce_scatter and alltoall, 1 for broadcast, reduce and sendrecv), its redop column names an op only for the
reducing collectives, and its root column is a rank only for the rooted ones. Where these leave one candidate, the
table is that test; where they leave several, the import is refused naming them. A --collective that the table
contradicts is refused too."""

import math
import statistics
from dataclasses import replace

from commbench import names
from commbench.errors import CommbenchError
from commbench.imports.figures import half_unit
from commbench.imports.model import ImportedTest

UNKNOWN = "?"
"""The collective of a table whose file does not name it, until the table is read."""
DEFAULT_HALF_UNIT = 0.005
"""Half the last printed digit of a bandwidth where the row kept no printed text: nccl-tests prints 2 decimals."""
CANDIDATES = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "all_to_all", "sendrecv")
"""nccl-tests' tests whose busbw factor follows from the world size alone (commbench's names)."""
_ROOTED = {"broadcast", "reduce"}
_NO_OP = ("none", "")


def remember_columns(test: ImportedTest, *, redop: str, root: str | None) -> None:
    """Keep the redop and root a row printed: with the factor they tell the test apart."""
    test.closing.setdefault("redops", set()).add(redop)
    if root is not None:
        test.closing.setdefault("roots", set()).add(root)


def settle_collective(test: ImportedTest, *, given: str | None, where: str) -> None:
    """Name the table's collective from its rows where the file did not; check a --collective against them."""
    named = test.closing.pop("named", True)
    redops, roots = test.closing.pop("redops", set()), test.closing.pop("roots", set())
    if named or test.world_size is None:
        return
    factor, bounds = _factor(test)
    fits = candidates(bounds, test.world_size, redops=redops, roots=roots)
    printed = _evidence(factor, test.world_size, redops, roots)
    if given is not None:
        if factor is not None and given in CANDIDATES and given not in fits:
            raise CommbenchError(f"{where}: --collective {given}, but the table's {printed} fits "
                                 f"{' or '.join(fits) or 'no nccl-tests collective'}; drop --collective or import "
                                 "the right log")
        return
    if len(fits) != 1:
        which = f"one of {', '.join(fits)}" if fits else "none of nccl-tests' collectives"
        raise CommbenchError(f"{where}: the file does not name its test and its {printed} fits {which}; pass "
                             f"--collective NAME")
    (name,) = fits
    test.program = f"{names.nccl_tests_program(name)} (inferred: {printed})"
    test.closing["collective"] = name
    test.rows = [replace(row, collective=name, op=names.nccl_tests_op(name, _redop(redops))) for row in test.rows]


def candidates(bounds: list[tuple[float, float]], world: int, *, redops: set[str], roots: set[str]) -> list[str]:
    """The collectives whose busbw factor at `world` lies within every row's bounds of busbw ÷ algbw (what the
    printed figures allow, given their rounding) and whose redop and root columns look as this table's do."""
    reduces = any(op.lower() not in _NO_OP for op in redops)
    rooted = any(root.lstrip("-").isdigit() and int(root) >= 0 for root in roots)
    found = []
    for name in CANDIDATES:
        expected = names.busbw_factor(name, world)
        if expected is None or not all(low <= expected <= high for low, high in bounds):
            continue
        if roots and rooted != (name in _ROOTED):
            continue
        if redops and reduces and name not in names.NCCL_TESTS_REDUCING and name != "sendrecv":
            continue  # sendrecv prints the -o op it was given; the other non-reducing tests print none
        if redops and not reduces and name in names.NCCL_TESTS_REDUCING:
            continue
        found.append(name)
    return found


def _factor(test: ImportedTest) -> tuple[float | None, list[tuple[float, float]]]:
    """The median busbw ÷ algbw (for messages), and each row's bounds on it: the printed figures are rounded to half
    their last digit, so a row of 0.05 GB/s bounds the factor loosely and one of 150.00 GB/s tightly."""
    ratios, bounds = [], []
    for row in test.rows:
        algbw, busbw = row.algbw_gbps, row.busbw_gbps
        half = half_unit(str(row.printed.get("busbw_gbps", ""))) if row.printed else math.nan
        half = half if half == half else DEFAULT_HALF_UNIT
        if not (algbw == algbw and busbw == busbw) or algbw <= half or busbw <= 0:
            continue  # not measured, or too small a figure to bound anything
        ratios.append(busbw / algbw)
        bounds.append(((busbw - half) / (algbw + half), (busbw + half) / (algbw - half)))
    return (statistics.median(ratios) if ratios else None), bounds


def _redop(redops: set[str]) -> str:
    return next(iter(sorted(redops)), "")


def _evidence(factor: float | None, world: int, redops: set[str], roots: set[str]) -> str:
    parts = [f"busbw/algbw {factor:.4g} at {world} ranks" if factor is not None else
             "busbw/algbw (no row with a bandwidth to read it from)"]
    if redops:
        parts.append(f"redop {','.join(sorted(redops))}")
    if roots:
        parts.append(f"root {','.join(sorted(roots))}")
    return ", ".join(parts)
