"""What both table layouts show of a row: its keys, each placement's figures, and what the row is flagged for (a
wrong result, a noisy median, --max-time spent, a host that could not keep up)."""

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

import pandas as pd

from commbench.collectives import COLLECTIVES
from commbench.measure.stats import as_number, stored_half_width_pct
from commbench.names import COMMBENCH_SOURCE, STOP_MAX_TIME
from commbench.schema import common
from commbench.sweep import host_issue

PLACEMENTS = ((False, "out-of-place"), (True, "in-place"))
# Above this half-width a median is flagged: such a median cannot resolve the 10 % differences a sweep is read for
# (a ring 10 % slower than the builtin, a 10 % regression).
NOISY_CI_PCT = 10.0
UNKNOWN = "n/a"
WRONG = "WRONG RESULT"

Noise = Literal["noisy", "unknown"]
"""A row's noise verdict: a CI wider than NOISY_CI_PCT, or a cell without CI (None: within it)."""


def source(group: pd.DataFrame) -> str:
    """The tool a table's rows come from: commbench, or the one `commbench import` read them from."""
    if "source" not in group.columns:
        return COMMBENCH_SOURCE
    sources = group["source"].dropna().unique()
    return str(sources[0]) if len(sources) else COMMBENCH_SOURCE


def where(first: pd.Series) -> str:
    return f"{first['backend']}/{first['device']}, {first[common.WORLD_SIZE]} ranks"


@dataclass
class Verdict:
    """What a table row (its placements' cells) is flagged for."""
    wrong: bool = False
    max_time: bool = False
    noise: Noise | None = None
    widest: float = math.nan  # the widest known half-width, in %
    host_bound: bool = False  # the host could not stay ahead of the device (results.csv's host_bound)


def judge(cells: list[pd.Series], *, imported: bool) -> Verdict:
    """An imported row has no CI to judge (the table says so once)."""
    verdict = Verdict(wrong=any(is_wrong(cell[common.N_WRONG]) for cell in cells))
    if imported:
        return verdict
    verdict.host_bound = any(host_issue.is_flagged(cell) for cell in cells)
    verdict.max_time = any(cell.get("stop_reason") == STOP_MAX_TIME for cell in cells)
    widths = [ci_half_width_pct(cell) for cell in cells]
    known = [width for width in widths if not math.isnan(width)]
    verdict.widest = max(known) if known else math.nan
    if known and verdict.widest > NOISY_CI_PCT:
        verdict.noise = "noisy"
    elif len(known) < len(widths):
        verdict.noise = "unknown"
    return verdict


def rows_by_size(group: pd.DataFrame) -> Iterator[tuple[pd.Series, dict[bool, pd.Series | None]]]:
    """(first row, the row of each placement or None) per dtype × op × size, in run order."""
    for _, rows in group.groupby(["dtype", "op", common.SIZE_BYTES], sort=False):
        yield rows.iloc[0], {inplace: (rows[rows["inplace"] == inplace].iloc[0]
                                       if (rows["inplace"] == inplace).any() else None) for inplace, _ in PLACEMENTS}


def key_values(row: pd.Series) -> list[object]:
    return [row[common.SIZE_BYTES], row["count"], row["dtype"], row["op"], root(row)]


def root(row: pd.Series) -> int:
    """The row's root rank, -1 for collectives without one (as nccl-tests prints); runs stored before the root
    column: broadcast's was rank 0."""
    stored = as_number(row.get("root"))
    if not math.isnan(stored):
        return int(stored)
    collective = COLLECTIVES.get(row["collective"])
    return 0 if collective is not None and collective.has_root else -1


def cell_values(row: pd.Series) -> list[str]:
    """One placement's figures: time p50, ±CI, algbw, busbw, #wrong."""
    n_wrong = row[common.N_WRONG]
    wrong_text = "N/A" if pd.isna(n_wrong) else str(int(n_wrong))
    if str(row.get("note") or "").startswith("no-op"):
        algbw = "no-op"
    else:
        algbw = "-" if pd.isna(row[common.ALGBW_GBPS]) else f"{row[common.ALGBW_GBPS]:.3f}"
    busbw = "-" if pd.isna(row[common.BUSBW_GBPS]) else f"{row[common.BUSBW_GBPS]:.3f}"
    half_width = ci_half_width_pct(row)
    ci_text = UNKNOWN if math.isnan(half_width) else percent(half_width)
    return [f"{row[common.TIME_US_P50]:.2f}", ci_text, algbw, busbw, wrong_text]


def ci_half_width_pct(row: pd.Series | Mapping[str, object]) -> float:
    """The wider side of the median time's 95 % CI in percent of the median, as commbench.measure.stats.Summary
    defines it;
    NaN where there is none (fewer than 6 samples, a median of 0, or a file written before the CI columns)."""
    return stored_half_width_pct(row, "time_us")


def percent(value: float) -> str:
    """At most 6 characters up to 999999 %, so the ±CI column stays aligned."""
    return f"{value:.1f}" if value < 1000 else f"{value:.0f}"


def is_wrong(n_wrong: object) -> bool:
    number = as_number(n_wrong)
    return not math.isnan(number) and int(number) > 0


def world_one_notes(group: pd.DataFrame) -> list[str]:
    if int(group.iloc[0][common.WORLD_SIZE]) != 1:
        return []
    lines = ["# busbw is 0 at world size 1: no byte crosses between ranks (factor (n-1)/n = 0); read algbw"]
    if "note" in group.columns and group["note"].astype(str).str.startswith("no-op").any():
        lines.append("# no-op: in place with 1 rank the output is the input, nothing is copied or sent; its "
                     "time is the call's overhead, not a transfer, so no algbw is given")
    return lines
