"""`commbench replay`'s terminal table and the report's key numbers."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from commbench.expect.rows import expected_lines
from commbench.replay.rows import SEQUENCE
from commbench.schema import common
from commbench.schema import replay as col

if TYPE_CHECKING:
    import pandas as pd


def _number(value: float | None, digits: int = 1) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def format_table(results: pd.DataFrame) -> str:
    from commbench.units import format_bytes

    first = results.iloc[0]
    scaled = " (scaled)" if str(first["scaled"]) in ("True", "true") else ""
    known = first["step"] is not None and first["step"] == first["step"]  # NaN: the whole trace
    step = f"step {int(first['step'])}" if known else "the whole trace"
    timer = _timer(results)
    lines = [f"# replay of {step} traced at {first['traced_world_size']} ranks, on {first['backend']}/"
             f"{first['device']} at {first[common.WORLD_SIZE]} ranks{scaled}; time = median per call over "
             f"{first['iters']} iterations (a barrier before each call, the slowest rank's time{timer}); busbw with "
             "nccl-tests' factors",
             f"# {'kind':<15} {'size':>12} {'dtype':>9} {'calls':>5} {'traced (us)':>12} {'replayed (us)':>14} "
             f"{'±CI (%)':>8} {'replayed/traced':>15} {'busbw traced':>13} {'busbw replayed':>15} {'#wrong':>6}",
             f"# {'':<15} {'(B)':>12} {'':>9} {'':>5} {'':>12} {'':>14} {'':>8} {'':>15} {'(GB/s)':>13} "
             f"{'(GB/s)':>15} {'':>6}"]
    for _, row in results.iterrows():
        p50, lo, hi = row[common.TIME_US_P50], row[common.TIME_US_CI_LO], row[common.TIME_US_CI_HI]
        half = max(p50 - lo, hi - p50) / p50 * 100 if p50 and lo == lo and hi == hi else math.nan
        lines.append(f"  {row['kind']:<15} {format_bytes(int(row[common.SIZE_BYTES])):>12} {row['dtype']:>9} "
                     f"{int(row['calls']):>5} {_number(row['time_us_traced_p50']):>12} {_number(p50):>14} "
                     f"{_number(half):>8} {_number(row['replayed_vs_traced'], 2):>15} "
                     f"{_number(row['busbw_gbps_traced'], 3):>13} {_number(row[common.BUSBW_GBPS], 3):>15} "
                     f"{int(row[common.N_WRONG]):>6}")
    notes = [str(note) for note in results["note"].dropna().unique() if str(note)]
    lines += [f"# note: {note}" for note in notes]
    lines += expected_lines(results[results["kind"] != SEQUENCE])
    return "\n".join(lines)


def _timer(results: pd.DataFrame) -> str:
    """", timed by …" for the calls' timing_method (CUDA events on a GPU, the host clock on CPU), where rows say."""
    recorded = results.loc[results["kind"] != SEQUENCE, "timing_method"].dropna()
    methods = sorted({str(method).split(";")[0] for method in recorded if str(method)})  # the timer, not its cover
    return f", timed by {' / '.join(methods)}" if methods else ""


def key_numbers(results: pd.DataFrame) -> pd.DataFrame:
    columns = [col.KIND, common.SIZE_BYTES, common.DTYPE, col.CALLS, col.TIME_US_TRACED_P50, common.TIME_US_P50,
               col.REPLAYED_VS_TRACED, common.N_WRONG]
    return results[columns].rename(columns={"time_us_traced_p50": "traced (us)", common.TIME_US_P50: "replayed (us)",
                                            "replayed_vs_traced": "replayed / traced", common.N_WRONG: "#wrong"})
