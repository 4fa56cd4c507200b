"""The verbose layout (`--verbose`): nccl-tests' three header lines, both placement groups always, the flags spelt
out at the end of each row and a legend under every table; and its ring-vs-builtin table."""

import pandas as pd

from commbench.names import COMMBENCH_SOURCE
from commbench.sweep import host_issue
from commbench.sweep.expected_text import expected_line
from commbench.sweep.ring_ratio import range_text, ratio_rows, ratio_verdict
from commbench.sweep.table_averages import average_busbw_line
from commbench.sweep.table_cells import (
    NOISY_CI_PCT,
    PLACEMENTS,
    WRONG,
    Noise,
    cell_values,
    judge,
    key_values,
    percent,
    rows_by_size,
    source,
    where,
    world_one_notes,
)
from commbench.sweep.timing_text import timing_text

_HEAD = f"{'size':>12} {'count':>13} {'type':>9} {'redop':>6} {'root':>5}"
_UNITS = f"{'(B)':>12} {'(elements)':>13} {'':>9} {'':>6} {'':>5}"
_CELL_COLUMNS = (("time p50", "(us)", 10), ("±CI", "(%)", 6), ("algbw", "(GB/s)", 8), ("busbw", "(GB/s)", 8),
                 ("#wrong", "", 7))
_CELL_HEAD = " ".join(f"{title:>{width}}" for title, _, width in _CELL_COLUMNS)
_CELL_UNITS = " ".join(f"{unit:>{width}}" for _, unit, width in _CELL_COLUMNS)
_NO_CELL = " ".join(f"{'-':>{width}}" for _, _, width in _CELL_COLUMNS)


def verbose_table(collective: str, impl: str, timing: str, group: pd.DataFrame) -> str:
    """The verbose table: nccl-tests' layout, both placement groups, the legend under it."""
    lines = [f"# {collective} ({impl}, {timing} timing) on {where(group.iloc[0])}; {timing_text(timing, group)}, "
             "GB = 1e9 B",
             "#" + " " * (len(_HEAD) - 1) + "".join(f" {title:^{len(_CELL_HEAD)}}" for _, title in PLACEMENTS),
             "#" + _HEAD[1:] + (" " + _CELL_HEAD) * 2,
             "#" + _UNITS[1:] + (" " + _CELL_UNITS) * 2]
    noisy = unknown = measured = 0
    imported = source(group) != COMMBENCH_SOURCE
    for row, by_placement in rows_by_size(group):
        size, count, dtype, op, root = key_values(row)
        line = f"{size:>12} {count:>13} {dtype:>9} {op:>6} {root:>5}"
        cells = [cell for cell in by_placement.values() if cell is not None]
        for cell in by_placement.values():
            line += " " + (_NO_CELL if cell is None else " ".join(
                f"{value:>{width}}" for value, (_, _, width) in zip(cell_values(cell), _CELL_COLUMNS)))
        flags, noise = row_flags(cells, imported=imported)
        noisy += noise == "noisy"
        unknown += noise == "unknown"
        measured += 1
        lines.append(line + ("   <-- " + "; ".join(flags) if flags else ""))
    lines.append(average_busbw_line(group))
    lines.append(expected_line(group))
    lines.append(f"# imported from {source(group)}: one figure per row, no samples, so no 95 % CI (±CI n/a)"
                 if imported else noise_legend(noisy, unknown, measured))
    return "\n".join(lines + world_one_notes(group))


def row_flags(cells: list[pd.Series], *, imported: bool = False) -> tuple[list[str], Noise | None]:
    """The verbose end-of-line flags of one table row and its noise verdict: noisy, unknown or None."""
    verdict = judge(cells, imported=imported)
    flags = [WRONG] if verdict.wrong else []
    if verdict.max_time:
        flags.append("--max-time spent before --target-ci was reached")
    if verdict.host_bound:
        flags.append(f"host-bound (issue per call ≥ {host_issue.HOST_BOUND_SHARE:g} × the time per call, or a spin "
                     "ended first)")
    if verdict.noise == "noisy":
        flags.append(f"noisy (95 % CI ±{percent(verdict.widest)} %)")
    elif verdict.noise == "unknown":
        flags.append("noise unknown (no 95 % CI)")
    return flags, verdict.noise


def noise_legend(noisy: int, unknown: int, rows: int) -> str:
    """Two lines under a verbose table: what ±CI means, then how many rows are noisy and what to do about it."""
    unknown_text = f", {unknown} unknown" if unknown else ""
    return ("# ±CI = half-width of the median time's 95 % CI, in % of the median; n/a = no CI (fewer than 6 samples "
            "or a median of 0): noise unknown\n"
            f"# noisy = above ±{NOISY_CI_PCT:.0f} % ({noisy} of {rows} rows{unknown_text}): rerun with more --iters, "
            f"with --target-ci {NOISY_CI_PCT:.0f} --max-time S, or as a run set of several launches (drift between "
            "launches is not in the CI)")


def verbose_ring_vs_builtin(collective: str, timing: str, group: pd.DataFrame) -> str:
    """The ring/builtin busbw ratio of every point both ran, with its range and flags spelt out."""
    first = group.iloc[0]
    lines = [f"# ring vs builtin: {collective} on {first['backend']}/{first['device']}, {first['world_size']} ranks "
             f"(busbw from the median time, {timing} timing; ratio range: the two medians' 95 % CIs combined "
             "conservatively, builtin low / ring high to builtin high / ring low)",
             f"#{'size':>11} {'type':>9} {'redop':>6} {'placement':>13} {'builtin busbw':>14} {'ring busbw':>11} "
             f"{'ring/builtin':>13} {'ratio range':>15}",
             f"#{'(B)':>11} {'':>9} {'':>6} {'':>13} {'(GB/s)':>14} {'(GB/s)':>11} {'':>13} {'':>15}"]
    for dtype, op, placement, size, builtin_busbw, ring_busbw, ratio, low, high in ratio_rows(group):
        flags = [text for _, text in ratio_verdict(ratio, low, high)]
        lines.append(f"{size:>12} {dtype:>9} {op:>6} {placement:>13} {builtin_busbw:>14.3f} {ring_busbw:>11.3f} "
                     f"{ratio:>13.3f} {range_text(ratio, low, high):>15}"
                     + ("   <-- " + "; ".join(flags) if flags else ""))
    return "\n".join(lines)
