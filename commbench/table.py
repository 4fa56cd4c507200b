"""Terminal tables in nccl-tests' layout (size, count, type, redop, root, time/algbw/busbw/#wrong per placement)."""

import math

import pandas as pd

from commbench.collectives import COLLECTIVES
from commbench.names import BATCH, PER_ITERATION
from commbench.units import format_bytes

AVERAGE_FROM_BYTES = 1024**2  # small sizes measure latency, not bandwidth: they would drag the average down
_PLACEMENTS = ((False, "out-of-place"), (True, "in-place"))
_HEAD = f"{'size':>12} {'count':>13} {'type':>9} {'redop':>6} {'root':>5}"
_UNITS = f"{'(B)':>12} {'(elements)':>13} {'':>9} {'':>6} {'':>5}"
_CELL_HEAD = f"{'time p50':>10} {'algbw':>8} {'busbw':>8} {'#wrong':>7}"
_CELL_UNITS = f"{'(us)':>10} {'(GB/s)':>8} {'(GB/s)':>8} {'':>7}"


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


def _timing_text(timing: str, group: pd.DataFrame) -> str:
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
             f"(busbw from the median time, {timing} timing)",
             f"#{'size':>11} {'type':>9} {'redop':>6} {'placement':>13} {'builtin busbw':>14} {'ring busbw':>11} "
             f"{'ring/builtin':>13}",
             f"#{'(B)':>11} {'':>9} {'':>6} {'':>13} {'(GB/s)':>14} {'(GB/s)':>11} {'':>13}"]
    keys = ["dtype", "op", "inplace", "size_bytes"]
    builtin = group[group["impl"] == "builtin"].set_index(keys)["busbw_gbps"]
    ring = group[group["impl"] == "ring"].set_index(keys)["busbw_gbps"]
    for key in builtin.index.intersection(ring.index):
        dtype, op, inplace, size = key
        ratio = ring[key] / builtin[key] if builtin[key] > 0 else math.nan
        placement = "in-place" if inplace else "out-of-place"
        lines.append(f"{size:>12} {dtype:>9} {op:>6} {placement:>13} {builtin[key]:>14.3f} {ring[key]:>11.3f} "
                     f"{ratio:>13.3f}")
    return "\n".join(lines)


def _table(collective: str, impl: str, timing: str, group: pd.DataFrame) -> str:
    first = group.iloc[0]
    lines = [f"# {collective} ({impl}, {timing} timing) on {first['backend']}/{first['device']}, "
             f"{first['world_size']} ranks; {_timing_text(timing, group)}, GB = 1e9 B",
             "#" + " " * (len(_HEAD) - 1) + "".join(f" {title:^{len(_CELL_HEAD)}}" for _, title in _PLACEMENTS),
             "#" + _HEAD[1:] + (" " + _CELL_HEAD) * 2,
             "#" + _UNITS[1:] + (" " + _CELL_UNITS) * 2]
    root = COLLECTIVES[collective].root if collective in COLLECTIVES else -1
    keys = ["dtype", "op", "size_bytes"]
    for _, rows in group.groupby(keys, sort=False):
        row = rows.iloc[0]
        line = f"{row['size_bytes']:>12} {row['count']:>13} {row['dtype']:>9} {row['op']:>6} {root:>5}"
        wrong = False
        for inplace, _ in _PLACEMENTS:
            match = rows[rows["inplace"] == inplace]
            line += " " + (_cell(match.iloc[0]) if len(match) else f"{'-':>10} {'-':>8} {'-':>8} {'-':>7}")
            wrong |= bool(len(match)) and _is_wrong(match.iloc[0]["n_wrong"])
        lines.append(line + ("   <-- WRONG RESULT" if wrong else ""))
    lines.append(average_busbw_line(group))
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
    return f"{row['time_us_p50']:>10.2f} {algbw:>8} {busbw:>8} {wrong_text:>7}"


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
