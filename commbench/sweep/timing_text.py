"""How a table's title says its times were taken: the timing mode, the samples behind each median, and which rank's
time it is; for imported rows, what the other tool logged or printed."""

import math
from collections.abc import Iterable

import pandas as pd

from commbench.measure.stats import as_number
from commbench.names import BATCH, COMMBENCH_SOURCE, MEAN, RANK_AVERAGE_TEXT
from commbench.sweep.table_cells import source

_RANK_AVERAGES = tuple(RANK_AVERAGE_TEXT.values())  # how batch rows say it


def span(values: Iterable[object]) -> str:
    """"6" for one value, "6–20" for several, "" for none."""
    numbers = sorted({int(number) for number in map(as_number, values) if not math.isnan(number)})
    return "" if not numbers else f"{numbers[0]}" if len(numbers) == 1 else f"{numbers[0]}–{numbers[-1]}"


def has_interval(group: pd.DataFrame) -> bool:
    """Whether the rows carry a 95 % CI (a source that logs every call), not one printed figure each."""
    return "time_us_ci_lo" in group.columns and bool(pd.to_numeric(group["time_us_ci_lo"], errors="coerce").notna()
                                                     .any())


def timing_text(timing: str, group: pd.DataFrame) -> str:
    """The verbose title's word on how a time was taken."""
    tool = source(group)
    if tool != COMMBENCH_SOURCE and has_interval(group):
        return f"time = median of the {span(group['iters'])} calls {tool} logged, imported (timing_method says how)"
    if tool != COMMBENCH_SOURCE:
        return f"time = the figure per call that {tool} printed, imported (how it times: timing_method)"
    iters_text = span(group["iters"])
    if timing != BATCH:
        return f"time = median of {iters_text} iterations (slowest rank each)"
    calls = span(group.get("calls_per_sample", pd.Series(dtype=float)))
    calls_text = f" of {calls}" if calls else ""
    return f"time = median of {iters_text} batches{calls_text} back-to-back calls (time per call, mean over ranks)"


def short_timing_text(timing: str, group: pd.DataFrame) -> str:
    """The title's word on how a time was taken, e.g. `batch timing: median of 20 samples of 5 back-to-back calls,
    mean over ranks`."""
    tool = source(group)
    if tool != COMMBENCH_SOURCE and has_interval(group):  # a log of every call (NCCL Inspector): its median
        return f"time: the median of the {span(group['iters'])} calls {tool} logged, with its 95 % CI (imported)"
    if tool != COMMBENCH_SOURCE:
        return f"time: the figure per call that {tool} printed (imported: no samples, so no CI)"
    samples = f"median of {span(group['iters'])} samples"
    if timing != BATCH:
        return f"{timing} timing: {samples} of one call after a barrier, slowest rank"
    calls = span(group.get("calls_per_sample", pd.Series(dtype=float)))
    methods = " ".join(group["timing_method"].dropna().astype(str)) if "timing_method" in group.columns else ""
    average = next((text for text in _RANK_AVERAGES if text in methods), RANK_AVERAGE_TEXT[MEAN])
    calls_text = "one call" if calls == "1" else f"{calls or 'K'} back-to-back calls"
    return f"{timing} timing: {samples} of {calls_text}, {average}"
