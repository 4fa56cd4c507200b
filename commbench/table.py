"""Terminal tables in nccl-tests' layout (size, count, type, redop, root, time/±CI/algbw/busbw/#wrong per placement),
with rows whose median time is too uncertain to read flagged."""

import math

import pandas as pd

from commbench.collectives import COLLECTIVES
from commbench.names import BATCH, COMMBENCH_SOURCE, PER_ITERATION, STOP_MAX_TIME
from commbench.stats import as_number, stored_half_width_pct
from commbench.units import format_bytes

AVERAGE_FROM_BYTES = 1024**2  # small sizes measure latency, not bandwidth: they would drag the average down
_PLACEMENTS = ((False, "out-of-place"), (True, "in-place"))
_HEAD = f"{'size':>12} {'count':>13} {'type':>9} {'redop':>6} {'root':>5}"
_UNITS = f"{'(B)':>12} {'(elements)':>13} {'':>9} {'':>6} {'':>5}"
_CELL_COLUMNS = (("time p50", "(us)", 10), ("±CI", "(%)", 6), ("algbw", "(GB/s)", 8), ("busbw", "(GB/s)", 8),
                 ("#wrong", "", 7))
_CELL_HEAD = " ".join(f"{title:>{width}}" for title, _, width in _CELL_COLUMNS)
_CELL_UNITS = " ".join(f"{unit:>{width}}" for _, unit, width in _CELL_COLUMNS)
_NO_CELL = " ".join(f"{'-':>{width}}" for _, _, width in _CELL_COLUMNS)
# Above this half-width a median is flagged: such a median cannot resolve the 10 % differences a sweep is read for
# (a ring 10 % slower than the builtin, a 10 % regression).
NOISY_CI_PCT = 10.0
UNKNOWN = "n/a"


def format_tables(results: pd.DataFrame) -> str:
    """One table per collective and implementation, each with its average busbw over sizes ≥ 1 MiB, then the
    ring/builtin busbw ratio of every collective both implementations ran."""
    blocks = []
    results = _with_timing(results)
    for (collective, impl, timing), group in results.groupby(["collective", "impl", "timing"], sort=False):
        blocks.append(_table(collective, impl, timing, group))
    for (collective, timing), group in results.groupby(["collective", "timing"], sort=False):
        if {"builtin", "ring"} <= set(group["impl"]):
            blocks.append(_ring_vs_builtin(collective, timing, group))
    return "\n\n".join(blocks)


def _with_timing(results: pd.DataFrame) -> pd.DataFrame:
    if "timing" in results.columns and results["timing"].notna().all():
        return results
    results = results.copy()
    filled = results["timing"] if "timing" in results.columns else pd.Series(None, index=results.index)
    results["timing"] = filled.fillna(PER_ITERATION)
    return results


def _source(group: pd.DataFrame) -> str:
    """The tool a table's rows come from: commbench, or the one `commbench import` read them from."""
    sources = group["source"].dropna().unique() if "source" in group.columns else []
    return str(sources[0]) if len(sources) else COMMBENCH_SOURCE


def _timing_text(timing: str, group: pd.DataFrame) -> str:
    source = _source(group)
    if source != COMMBENCH_SOURCE:
        return f"time = the figure per call that {source} printed, imported (how it times: timing_method)"
    iters = sorted(set(group["iters"]))
    iters_text = f"{iters[0]}" if len(iters) == 1 else f"{iters[0]}–{iters[-1]}"
    if timing != BATCH:
        return f"time = median of {iters_text} iterations (slowest rank each)"
    calls = sorted({int(value) for value in group.get("calls_per_sample", pd.Series(dtype=float)).dropna()})
    calls_text = "" if not calls else f" of {calls[0]}" + (f"–{calls[-1]}" if len(calls) > 1 else "")
    return f"time = median of {iters_text} batches{calls_text} back-to-back calls (time per call, mean over ranks)"


def _ring_vs_builtin(collective: str, timing: str, group: pd.DataFrame) -> str:
    first = group.iloc[0]
    lines = [f"# ring vs builtin: {collective} on {first['backend']}/{first['device']}, {first['world_size']} ranks "
             f"(busbw from the median time, {timing} timing; ratio range: the two medians' 95 % CIs combined "
             "conservatively, builtin low / ring high to builtin high / ring low)",
             f"#{'size':>11} {'type':>9} {'redop':>6} {'placement':>13} {'builtin busbw':>14} {'ring busbw':>11} "
             f"{'ring/builtin':>13} {'ratio range':>15}",
             f"#{'(B)':>11} {'':>9} {'':>6} {'':>13} {'(GB/s)':>14} {'(GB/s)':>11} {'':>13} {'':>15}"]
    keys = ["dtype", "op", "inplace", "size_bytes"]
    builtin = group[group["impl"] == "builtin"].set_index(keys)
    ring = group[group["impl"] == "ring"].set_index(keys)
    for key in builtin.index.intersection(ring.index):
        dtype, op, inplace, size = key
        ring_row, builtin_row = ring.loc[key], builtin.loc[key]
        ring_busbw, builtin_busbw = ring_row["busbw_gbps"], builtin_row["busbw_gbps"]
        ratio = ring_busbw / builtin_busbw if builtin_busbw > 0 else math.nan
        low, high = ratio_range(builtin_row, ring_row)
        placement = "in-place" if inplace else "out-of-place"
        range_text = "-" if math.isnan(ratio) else UNKNOWN if math.isnan(low) else f"{low:.3f}–{high:.3f}"
        lines.append(f"{size:>12} {dtype:>9} {op:>6} {placement:>13} {builtin_busbw:>14.3f} {ring_busbw:>11.3f} "
                     f"{ratio:>13.3f} {range_text:>15}" + _flags(_ratio_flags(ratio, low, high)))
    return "\n".join(lines)


def ratio_range(builtin, ring) -> tuple[float, float]:
    """The 95 % range of ring/builtin busbw. busbw ∝ 1/time, so the ratio is t_builtin / t_ring; its extremes pair
    one median's CI bound with the other's opposite bound (conservative: both medians at their worst at once).
    NaN when either side has no CI."""
    b_lo, b_hi = as_number(builtin.get("time_us_ci_lo")), as_number(builtin.get("time_us_ci_hi"))
    r_lo, r_hi = as_number(ring.get("time_us_ci_lo")), as_number(ring.get("time_us_ci_hi"))
    if any(math.isnan(value) for value in (b_lo, b_hi, r_lo, r_hi)) or r_lo <= 0 or r_hi <= 0:
        return math.nan, math.nan
    return b_lo / r_hi, b_hi / r_lo


def _ratio_flags(ratio: float, low: float, high: float) -> list[str]:
    if math.isnan(ratio):
        return []
    if math.isnan(low):
        return ["noise unknown (a side has no 95 % CI)"]
    flags = []
    spread = max(ratio - low, high - ratio) / ratio * 100
    if spread > NOISY_CI_PCT:
        flags.append(f"noisy (ratio range ±{_percent(spread)} %)")
    if low <= 1.0 <= high and f"{ratio:.3f}" != "1.000":
        flags.append("not distinguishable from 1 (range contains 1.000)")
    return flags


def _table(collective: str, impl: str, timing: str, group: pd.DataFrame) -> str:
    first = group.iloc[0]
    lines = [f"# {collective} ({impl}, {timing} timing) on {first['backend']}/{first['device']}, "
             f"{first['world_size']} ranks; {_timing_text(timing, group)}, GB = 1e9 B",
             "#" + " " * (len(_HEAD) - 1) + "".join(f" {title:^{len(_CELL_HEAD)}}" for _, title in _PLACEMENTS),
             "#" + _HEAD[1:] + (" " + _CELL_HEAD) * 2,
             "#" + _UNITS[1:] + (" " + _CELL_UNITS) * 2]
    root = COLLECTIVES[collective].root if collective in COLLECTIVES else -1
    keys = ["dtype", "op", "size_bytes"]
    noisy = unknown = measured = 0
    imported = _source(group) != COMMBENCH_SOURCE
    for _, rows in group.groupby(keys, sort=False):
        row = rows.iloc[0]
        line = f"{row['size_bytes']:>12} {row['count']:>13} {row['dtype']:>9} {row['op']:>6} {root:>5}"
        cells = []
        for inplace, _ in _PLACEMENTS:
            match = rows[rows["inplace"] == inplace]
            line += " " + (_cell(match.iloc[0]) if len(match) else _NO_CELL)
            cells += [match.iloc[0]] if len(match) else []
        flags, noise = _row_flags(cells, imported=imported)
        noisy += noise == "noisy"
        unknown += noise == "unknown"
        measured += 1
        lines.append(line + _flags(flags))
    lines.append(average_busbw_line(group))
    lines.append(f"# imported from {_source(group)}: one figure per row, no samples, so no 95 % CI (±CI n/a)"
                 if imported else noise_legend(noisy, unknown, measured))
    if int(first["world_size"]) == 1:
        lines.append("# busbw is 0 at world size 1: no byte crosses between ranks (factor (n-1)/n = 0); read algbw")
        if "note" in group.columns and group["note"].astype(str).str.startswith("no-op").any():
            lines.append("# no-op: in place with 1 rank the output is the input, nothing is copied or sent; its "
                         "time is the call's overhead, not a transfer, so no algbw is given")
    return "\n".join(lines)


def _cell(row) -> str:
    n_wrong = row["n_wrong"]
    wrong_text = "N/A" if pd.isna(n_wrong) else str(int(n_wrong))
    if str(row.get("note") or "").startswith("no-op"):
        algbw = "no-op"
    else:
        algbw = "-" if pd.isna(row["algbw_gbps"]) else f"{row['algbw_gbps']:.3f}"
    busbw = "-" if pd.isna(row["busbw_gbps"]) else f"{row['busbw_gbps']:.3f}"
    half_width = ci_half_width_pct(row)
    ci_text = UNKNOWN if math.isnan(half_width) else _percent(half_width)
    return f"{row['time_us_p50']:>10.2f} {ci_text:>6} {algbw:>8} {busbw:>8} {wrong_text:>7}"


def ci_half_width_pct(row) -> float:
    """The wider side of the median time's 95 % CI in percent of the median, as commbench.stats.Summary defines it;
    NaN where there is none (fewer than 6 samples, a median of 0, or a file written before the CI columns)."""
    return stored_half_width_pct(row, "time_us")


def _row_flags(cells: list, *, imported: bool = False) -> tuple[list[str], str | None]:
    """The end-of-line flags of one table row (its placements' cells) and its noise verdict: noisy, unknown or
    None. An imported row has no CI to judge (the table says so once)."""
    flags = ["WRONG RESULT"] if any(_is_wrong(cell["n_wrong"]) for cell in cells) else []
    if imported:
        return flags, None
    if any(cell.get("stop_reason") == STOP_MAX_TIME for cell in cells):
        flags.append("--max-time spent before --target-ci was reached")
    widths = [ci_half_width_pct(cell) for cell in cells]
    known = [width for width in widths if not math.isnan(width)]
    if known and max(known) > NOISY_CI_PCT:
        flags.append(f"noisy (95 % CI ±{_percent(max(known))} %)")
        return flags, "noisy"
    if len(known) < len(widths):
        flags.append("noise unknown (no 95 % CI)")
        return flags, "unknown"
    return flags, None


def _percent(value: float) -> str:
    """At most 6 characters up to 999999 %, so the ±CI column stays aligned."""
    return f"{value:.1f}" if value < 1000 else f"{value:.0f}"


def _flags(flags: list[str]) -> str:
    return "   <-- " + "; ".join(flags) if flags else ""


def noise_legend(noisy: int, unknown: int, rows: int) -> str:
    """Two lines under a table: what ±CI means, then how many rows are noisy and what to do about it."""
    unknown_text = f", {unknown} unknown" if unknown else ""
    return ("# ±CI = half-width of the median time's 95 % CI, in % of the median; n/a = no CI (fewer than 6 samples "
            "or a median of 0): noise unknown\n"
            f"# noisy = above ±{NOISY_CI_PCT:.0f} % ({noisy} of {rows} rows{unknown_text}): rerun with more --iters, "
            f"with --target-ci {NOISY_CI_PCT:.0f} --max-time S, or as a run set of several launches (drift between "
            "launches is not in the CI)")


def _is_wrong(n_wrong) -> bool:
    return not pd.isna(n_wrong) and int(n_wrong) > 0


def average_busbw_line(group: pd.DataFrame) -> str:
    large = group[group["size_bytes"] >= AVERAGE_FROM_BYTES]
    if large.empty:
        return (f"# Avg bus bandwidth: no size ≥ {format_bytes(AVERAGE_FROM_BYTES)} measured "
                "(small sizes show latency)")
    value = large["busbw_gbps"].mean()
    low, high = format_bytes(int(large["size_bytes"].min())), format_bytes(int(large["size_bytes"].max()))
    value_text = "nan" if math.isnan(value) else f"{value:.3f}"
    return f"# Avg bus bandwidth over sizes {low} to {high} ({len(large)} results): {value_text} GB/s"
