"""The short layout (the default): one table per collective × impl × timing mode with only the placements it
measured, the unit in every header, rows flagged in a word and the noise said once under all tables (NoiseCount);
and its ring-vs-builtin table."""

import pandas as pd

from commbench.names import COMMBENCH_SOURCE
from commbench.sweep.bandwidth_bound import bandwidth_bound_from
from commbench.sweep.expected_text import expected_suffix, percent_of_expected
from commbench.sweep.ring_ratio import range_text, ratio_rows, ratio_verdict
from commbench.sweep.table_averages import average_busbw_line
from commbench.sweep.table_cells import (
    NOISY_CI_PCT,
    PLACEMENTS,
    WRONG,
    Verdict,
    cell_values,
    judge,
    key_values,
    rows_by_size,
    source,
    where,
    world_one_notes,
)
from commbench.sweep.timing_text import short_timing_text

# one header line, the unit in each title; columns two spaces apart
_KEYS = (("size (B)", 11), ("count (elements)", 16), ("type", 8), ("redop", 5), ("root", 4))
_CELLS = (("time (us)", 11), ("±CI (%)", 7), ("algbw (GB/s)", 12), ("busbw (GB/s)", 12), ("% of expected", 13),
          ("#wrong", 6))
_RATIO = (("size (B)", 11), ("type", 8), ("redop", 5), ("placement", 12), ("builtin busbw (GB/s)", 20),
          ("ring busbw (GB/s)", 17), ("ring/builtin", 12), ("range", 11))
_GAP = "  "


class NoiseCount:
    """The points of every short table, counted for the one summary under them."""

    def __init__(self) -> None:
        self.points = self.noisy = self.unknown = self.max_time = self.imported = 0

    def add(self, cells: list[pd.Series], *, imported: bool) -> None:
        if imported:
            self.imported += len(cells)
            return
        for cell in cells:
            verdict = judge([cell], imported=False)
            self.points += 1
            self.noisy += verdict.noise is not None
            self.unknown += verdict.noise == "unknown"
            self.max_time += verdict.max_time

    def summary(self) -> str:
        imported = f"; {self.imported} imported point(s): no samples, so no CI" if self.imported else ""
        if not self.points:
            return "# ±CI (%) = half-width of the median time's 95 % CI" + imported
        head = "# ±CI (%) = half-width of the median time's 95 % CI; "
        if not self.noisy:
            return f"{head}all {self.points} points within ±{NOISY_CI_PCT:g} %{imported}"
        unknown = f" ({self.unknown} without a CI)" if self.unknown else ""
        spent = f"; {self.max_time} spent --max-time before --target-ci" if self.max_time else ""
        return (f"{head}noisy (over ±{NOISY_CI_PCT:g} % or no CI): {self.noisy} of {self.points} points{unknown}"
                f"{spent}{imported}: rerun with more --iters, --target-ci {NOISY_CI_PCT:g} --max-time S, or as a run "
                "set of launches")


def _brief_flags(verdict: Verdict) -> str:
    """A short table's flags: a word each (the summary under the tables says what they mean); a wrong result stays
    loud."""
    words = (["noisy"] if verdict.noise == "noisy" else ["no CI"] if verdict.noise == "unknown" else []) + \
        (["max-time"] if verdict.max_time else []) + (["host-bound"] if verdict.host_bound else [])
    if verdict.wrong:
        return "   <-- " + "; ".join([WRONG, *words])
    return (_GAP + ", ".join(words)) if words else ""


def _header_lines(collective: str, impl: str, timing: str, group: pd.DataFrame,
                  placements: list[tuple[bool, str]]) -> list[str]:
    """The title that says the timing, the placement groups' titles where there are two, the header line."""
    lines = [f"# {collective} ({impl}, {' and '.join(title for _, title in placements)}) on {where(group.iloc[0])}; "
             f"{short_timing_text(timing, group)}; GB = 1e9 B"]
    key_width = sum(width for _, width in _KEYS) + len(_GAP) * (len(_KEYS) - 1)
    cell_width = sum(width for _, width in _CELLS) + len(_GAP) * (len(_CELLS) - 1)
    if len(placements) > 1:
        lines.append("#" + " " * (key_width - 1) + "".join(f"{_GAP}{title:^{cell_width}}" for _, title in placements))
    lines.append("#" + _GAP.join(f"{title:>{width}}" for title, width in _KEYS + _CELLS * len(placements))[1:])
    return lines


def short_table(collective: str, impl: str, timing: str, group: pd.DataFrame, noise: NoiseCount) -> str:
    """A title that says the timing, one header line, a row per size with the placements measured, the Avg line."""
    placements = [(inplace, title) for inplace, title in PLACEMENTS if (group["inplace"] == inplace).any()]
    lines = _header_lines(collective, impl, timing, group, placements)
    imported = source(group) != COMMBENCH_SOURCE
    from_bytes, _ = bandwidth_bound_from(group)
    for row, by_placement in rows_by_size(group):
        values = key_values(row)
        cells = [by_placement[inplace] for inplace, _ in placements]
        for cell in cells:
            if cell is None:
                values += ["-"] * len(_CELLS)
                continue
            figures = cell_values(cell)
            values += [*figures[:4], percent_of_expected(cell, from_bytes), figures[4]]
        measured = [cell for cell in cells if cell is not None]
        noise.add(measured, imported=imported)
        line = _GAP.join(f"{value:>{width}}" for value, (_, width) in zip(values, _KEYS + _CELLS * len(placements)))
        lines.append(line + _brief_flags(judge(measured, imported=imported)))
    lines.append(average_busbw_line(group) + expected_suffix(group))
    return "\n".join(lines + world_one_notes(group))


def short_ratio_table(collective: str, timing: str, group: pd.DataFrame) -> str:
    """The ring/builtin busbw ratio of every point both ran, its range, and its flags in a word."""
    lines = [f"# ring vs builtin: {collective} on {where(group.iloc[0])}, {timing} timing; ratio = ring busbw / "
             "builtin busbw, range = the two medians' 95 % CIs combined conservatively",
             "#" + _GAP.join(f"{title:>{width}}" for title, width in _RATIO)[1:]]
    for dtype, op, placement, size, builtin_busbw, ring_busbw, ratio, low, high in ratio_rows(group):
        values = [size, dtype, op, placement, f"{builtin_busbw:.3f}", f"{ring_busbw:.3f}", f"{ratio:.3f}",
                  range_text(ratio, low, high)]
        words = [brief for brief, _ in ratio_verdict(ratio, low, high)]
        lines.append(_GAP.join(f"{value:>{width}}" for value, (_, width) in zip(values, _RATIO))
                     + (_GAP + ", ".join(words) if words else ""))
    return "\n".join(lines)
