"""The ring/builtin busbw ratio of the points both implementations ran, with its 95 % range and its flags: the
statistics behind both layouts' ring-vs-builtin tables."""

import math
from collections.abc import Iterator
from typing import NamedTuple

import pandas as pd

from commbench.measure.stats import as_number
from commbench.schema import common
from commbench.sweep.table_cells import NOISY_CI_PCT, UNKNOWN, percent


class RatioRow(NamedTuple):
    """One point both implementations ran: its keys, each side's busbw, the ratio and its 95 % range."""

    dtype: str
    op: str
    placement: str
    size: int
    builtin_busbw: float
    ring_busbw: float
    ratio: float
    low: float
    high: float


def ratio_rows(group: pd.DataFrame) -> Iterator[RatioRow]:
    """A RatioRow per point both ran (dtype × op × placement × size)."""
    keys = ["dtype", "op", "inplace", common.SIZE_BYTES]
    builtin = group[group["impl"] == "builtin"].set_index(keys)
    ring = group[group["impl"] == "ring"].set_index(keys)
    for key in builtin.index.intersection(ring.index):
        dtype, op, inplace, size = key
        ring_row, builtin_row = ring.loc[key], builtin.loc[key]
        ring_busbw, builtin_busbw = ring_row[common.BUSBW_GBPS], builtin_row[common.BUSBW_GBPS]
        ratio = ring_busbw / builtin_busbw if builtin_busbw > 0 else math.nan
        low, high = ratio_range(builtin_row, ring_row)
        placement = "in-place" if inplace else "out-of-place"
        yield RatioRow(dtype, op, placement, size, builtin_busbw, ring_busbw, ratio, low, high)


def range_text(ratio: float, low: float, high: float) -> str:
    return "-" if math.isnan(ratio) else UNKNOWN if math.isnan(low) else f"{low:.3f}–{high:.3f}"


def ratio_range(builtin: pd.Series, ring: pd.Series) -> tuple[float, float]:
    """The 95 % range of ring/builtin busbw. busbw ∝ 1/time, so the ratio is t_builtin / t_ring; its extremes pair
    one median's CI bound with the other's opposite bound (conservative: both medians at their worst at once).
    NaN when either side has no CI."""
    b_lo, b_hi = as_number(builtin.get(common.TIME_US_CI_LO)), as_number(builtin.get(common.TIME_US_CI_HI))
    r_lo, r_hi = as_number(ring.get(common.TIME_US_CI_LO)), as_number(ring.get(common.TIME_US_CI_HI))
    if any(math.isnan(value) for value in (b_lo, b_hi, r_lo, r_hi)) or r_lo <= 0 or r_hi <= 0:
        return math.nan, math.nan
    return b_lo / r_hi, b_hi / r_lo


def ratio_verdict(ratio: float, low: float, high: float) -> list[tuple[str, str]]:
    """A ratio row's flags, each as (a short table's word, the verbose table's text)."""
    if math.isnan(ratio):
        return []
    if math.isnan(low):
        return [("no CI", "noise unknown (a side has no 95 % CI)")]
    flags = []
    spread = max(ratio - low, high - ratio) / ratio * 100
    if spread > NOISY_CI_PCT:
        flags.append(("noisy", f"noisy (ratio range ±{percent(spread)} %)"))
    if low <= 1.0 <= high and f"{ratio:.3f}" != "1.000":
        flags.append(("1 in range", "not distinguishable from 1 (range contains 1.000)"))
    return flags
