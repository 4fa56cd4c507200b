"""What a collective table says about the expected busbw (commbench expect): the % of expected column, where
bandwidth dominates, and the line that says what the expected figure rests on, or why there is none."""

import math

import pandas as pd

from commbench.measure.stats import as_number
from commbench.schema import common
from commbench.sweep.bandwidth_bound import bandwidth_bound_from
from commbench.units import format_bytes


def percent_of_expected(cell: pd.Series, from_bytes: float) -> str:
    """busbw as a percentage of the expected busbw, where bandwidth dominates the time; '-' elsewhere."""
    expected = as_number(cell.get(common.EXPECTED_BUSBW_GBPS))
    busbw = as_number(cell.get(common.BUSBW_GBPS))
    if math.isnan(expected) or expected <= 0 or math.isnan(busbw) or float(cell[common.SIZE_BYTES]) < from_bytes:
        return "-"
    return f"{100 * busbw / expected:.0f}"


def expected_suffix(group: pd.DataFrame) -> str:
    expected = as_number(group.iloc[0].get(common.EXPECTED_BUSBW_GBPS))
    return "; expected: none" if math.isnan(expected) else f"; expected {expected:.3f} GB/s"


def expected_summary(results: pd.DataFrame) -> str:
    """Under the short tables, once: what the expected busbw rests on (or why there is none) and where % of expected
    is given."""
    bases = list(dict.fromkeys(str(basis) for basis in results.get(common.EXPECTED_BASIS, pd.Series(dtype=str))
                               if isinstance(basis, str) and basis))
    if not bases:
        return "# expected busbw: none (the rows carry none)"
    if all(basis.startswith("none: ") for basis in bases):
        return "# expected busbw: none (" + "; ".join(basis.removeprefix("none: ") for basis in bases) + ")"
    return ("# % of expected = busbw / the busbw the machine's topology allows (" + "; ".join(bases) + "; see "
            "commbench expect), where bandwidth dominates: from 9·α/β of each table's α–β fit, else 1 MiB")


def expected_line(group: pd.DataFrame) -> str:
    """What the expected busbw is and rests on (commbench expect), or why the rows have none."""
    first = group.iloc[0]
    basis = str(first.get(common.EXPECTED_BASIS) or "") if common.EXPECTED_BASIS in group.columns else ""
    expected = as_number(first.get(common.EXPECTED_BUSBW_GBPS))
    if math.isnan(expected):
        why = basis.removeprefix("none: ") if basis and basis != "nan" else "the rows carry none"
        return f"# expected busbw: none ({why})"
    from_bytes, how = bandwidth_bound_from(group)
    return (f"# expected busbw: {expected:.3f} GB/s ({basis}); % of expected from {_mib(from_bytes)}, where bandwidth "
            f"dominates ({how}); the model: commbench expect")


def _mib(size: float) -> str:
    return format_bytes(int(size)) if size % 1024 == 0 else f"{size / 1024**2:.2g} MiB"
