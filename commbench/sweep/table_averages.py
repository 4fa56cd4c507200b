"""The line that closes every collective table: nccl-tests' `# Avg bus bandwidth` (an imported nccl-tests table: the
figure its log printed) and the mean busbw over the sizes where busbw measures bandwidth."""

import pandas as pd

from commbench.measure.stats import as_number
from commbench.schema import common
from commbench.sweep.bandwidth_bound import AVERAGE_FROM_BYTES
from commbench.sweep.table_cells import UNKNOWN
from commbench.units import format_bytes

SOURCE_AVERAGE, SOURCE_AVERAGE_RESULTS = "source_avg_busbw_gbps", "source_avg_results"
"""An imported nccl-tests row's columns: the `# Avg bus bandwidth` its test printed, and the results it averages."""


def source_average(group: pd.DataFrame) -> tuple[float, int] | None:
    """The Avg bus bandwidth nccl-tests printed for these imported rows, and the number of tests behind it, where the
    rows are whole tests that printed one: a test's own figure, or several tests' weighted by their results (which
    is nccl-tests' mean over all of them). Its figure averages unrounded busbw, so the mean of the rows' printed
    busbw may differ in the last digit. None for rows without one or a part of a test (one dtype of `-d all`)."""
    if group.empty or not {SOURCE_AVERAGE, SOURCE_AVERAGE_RESULTS} <= set(group.columns):
        return None
    figures = pd.to_numeric(group[SOURCE_AVERAGE], errors="coerce")
    counts = pd.to_numeric(group[SOURCE_AVERAGE_RESULTS], errors="coerce")
    if figures.isna().any() or counts.isna().any():
        return None
    files = group["source_file"].astype(str) if "source_file" in group.columns else pd.Series("", group.index)
    tests = [(int(as_number(count)), len(rows)) for (_, _, count), rows in group.groupby([files, figures, counts])]
    if any(count != rows for count, rows in tests):
        return None
    return float(figures.mean()), len(tests)


def average_busbw_line(group: pd.DataFrame) -> str:
    """nccl-tests' `# Avg bus bandwidth`, the mean busbw of every row and placement of the table (an imported
    nccl-tests table: its own Avg line, as the log prints it); then the mean busbw over the sizes ≥ 1 MiB, where
    busbw measures bandwidth rather than latency."""
    busbw = group[common.BUSBW_GBPS].dropna()
    avg_text = f"{busbw.mean():.3f} GB/s ({_results(len(busbw))})" if len(busbw) else UNKNOWN
    printed = source_average(group)
    if printed is not None:
        whose = "the log's own figure" if printed[1] == 1 else f"the Avg lines of {printed[1]} tests, by results"
        avg_text = f"{printed[0]:g} GB/s ({_results(len(group))}, {whose})"
    large = group[group[common.SIZE_BYTES] >= AVERAGE_FROM_BYTES]
    large_busbw = large[common.BUSBW_GBPS].dropna()
    if large_busbw.empty:
        large_text = f"no size ≥ {format_bytes(AVERAGE_FROM_BYTES)} measured (small sizes show latency)"
    else:
        low, high = format_bytes(int(large[common.SIZE_BYTES].min())), format_bytes(int(large[common.SIZE_BYTES].max()))
        sizes = f"at {low}" if low == high else f"{low} to {high}"
        large_text = f"{large_busbw.mean():.3f} GB/s ({_results(len(large_busbw))}, {sizes})"
    return f"# Avg bus bandwidth: {avg_text}; mean busbw ≥ {format_bytes(AVERAGE_FROM_BYTES)}: {large_text}"


def _results(count: int) -> str:
    return f"{count} result{'' if count == 1 else 's'}"
