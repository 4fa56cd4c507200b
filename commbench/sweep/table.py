"""Terminal tables of collective rows. By default one short table per collective × impl × timing mode: only the
placements it measured, units in every header, rows flagged in a word and the noise said once under all tables.
verbose: nccl-tests' full layout (both placement groups, a legend under every table, flags spelt out)."""

import math
from dataclasses import dataclass
from typing import cast

import pandas as pd

from commbench.collectives import COLLECTIVES
from commbench.measure.stats import as_number, stored_half_width_pct
from commbench.names import BATCH, COMMBENCH_SOURCE, NOT_AVAILABLE, PER_ITERATION, STOP_MAX_TIME
from commbench.sweep import host_issue
from commbench.units import format_bytes

AVERAGE_FROM_BYTES = 1024**2  # small sizes measure latency, not bandwidth: the "mean busbw ≥ 1 MiB" leaves them out
_PLACEMENTS = ((False, "out-of-place"), (True, "in-place"))
# Above this half-width a median is flagged: such a median cannot resolve the 10 % differences a sweep is read for
# (a ring 10 % slower than the builtin, a 10 % regression).
NOISY_CI_PCT = 10.0
UNKNOWN = "n/a"
_WRONG = "WRONG RESULT"
_RANK_AVERAGES = ("rank 0's time", "mean over ranks", "fastest rank", "slowest rank")  # how batch rows say it

# the verbose layout: nccl-tests' three header lines, both placement groups always
_HEAD = f"{'size':>12} {'count':>13} {'type':>9} {'redop':>6} {'root':>5}"
_UNITS = f"{'(B)':>12} {'(elements)':>13} {'':>9} {'':>6} {'':>5}"
_CELL_COLUMNS = (("time p50", "(us)", 10), ("±CI", "(%)", 6), ("algbw", "(GB/s)", 8), ("busbw", "(GB/s)", 8),
                 ("#wrong", "", 7))
_CELL_HEAD = " ".join(f"{title:>{width}}" for title, _, width in _CELL_COLUMNS)
_CELL_UNITS = " ".join(f"{unit:>{width}}" for _, unit, width in _CELL_COLUMNS)
_NO_CELL = " ".join(f"{'-':>{width}}" for _, _, width in _CELL_COLUMNS)

# the short layout: one header line, the unit in each title; columns two spaces apart
_KEYS = (("size (B)", 11), ("count (elements)", 16), ("type", 8), ("redop", 5), ("root", 4))
_CELLS = (("time (us)", 11), ("±CI (%)", 7), ("algbw (GB/s)", 12), ("busbw (GB/s)", 12), ("% of expected", 13),
          ("#wrong", 6))
_RATIO = (("size (B)", 11), ("type", 8), ("redop", 5), ("placement", 12), ("builtin busbw (GB/s)", 20),
          ("ring busbw (GB/s)", 17), ("ring/builtin", 12), ("range", 11))
_GAP = "  "


def format_tables(results: pd.DataFrame, verbose: bool = False) -> str:
    """One table per collective, implementation and timing mode, each closed by nccl-tests' Avg bus bandwidth (the
    mean busbw of its rows) and the mean busbw over sizes ≥ 1 MiB; then the ring/builtin busbw ratio of every
    collective both implementations ran. Short by default, with the noise said once at the end; verbose: the full
    layout with a legend under each table."""
    results = _with_timing(results)
    measured, unavailable = _split_unavailable(results)
    noise = _Noise()
    blocks = []
    for env, rows in _by_env(measured):
        # groupby over a list of columns gives tuple keys: (collective, impl, timing) and (collective, timing)
        tables = [(cast(tuple[str, str, str], key), group)
                  for key, group in rows.groupby(["collective", "impl", "timing"], sort=False)]
        pairs = [(cast(tuple[str, str], key), group)
                 for key, group in rows.groupby(["collective", "timing"], sort=False)
                 if {"builtin", "ring"} <= set(group["impl"])]
        if verbose:
            env_blocks = [_table(*key, group) for key, group in tables] + \
                [_ring_vs_builtin(*key, group) for key, group in pairs]
        else:
            env_blocks = [_short_table(*key, group, noise) for key, group in tables] + \
                [_short_ratio_table(*key, group) for key, group in pairs]
        blocks += [f"# env: {env}\n{block}" if env else block for block in env_blocks]
    blocks += _unavailable_lines(unavailable)
    host = host_issue.host_issue_sentence(measured, quiet_when_not_applicable=not verbose)
    host_line = "" if host is None else f"\n# {host}"
    if verbose:
        return "\n\n".join(blocks) + host_line
    return "\n\n".join(blocks) + "\n" + expected_summary(measured) + "\n" + noise.summary() + host_line


def _split_unavailable(results: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(measured rows, rows of environment combinations that were refused: noted "not available: ...")."""
    notes = results["note"].astype(object).where(results["note"].notna(), "").astype(str) \
        if "note" in results.columns else pd.Series("", results.index)
    refused = notes.str.startswith(NOT_AVAILABLE)
    return results[~refused], results[refused]


def _by_env(results: pd.DataFrame):
    """(env label, its rows) in run order; one ("", rows) for runs without --env-axis."""
    if "env" not in results.columns:
        return [("", results)]
    labels = results["env"].astype(object).where(results["env"].notna(), "").astype(str)
    return [(str(env), group) for env, group in results.groupby(labels, sort=False)]


def _unavailable_lines(rows: pd.DataFrame) -> list[str]:
    """One line per refused environment combination: what it would have measured, and NCCL's (or gloo's) words."""
    lines = []
    labels = rows["env"].astype(object).where(rows["env"].notna(), "").astype(str)
    for (env, note), group in rows.groupby([labels, rows["note"]], sort=False):
        lines.append(f"# env: {env}: {len(group)} point(s) {note}")
    return ["\n".join(lines)] if lines else []


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


def _span(values) -> str:
    values = sorted({int(value) for value in values if not pd.isna(value)})
    return "" if not values else f"{values[0]}" if len(values) == 1 else f"{values[0]}–{values[-1]}"


def _timing_text(timing: str, group: pd.DataFrame) -> str:
    source = _source(group)
    if source != COMMBENCH_SOURCE and _has_interval(group):
        return f"time = median of the {_span(group['iters'])} calls {source} logged, imported (timing_method says how)"
    if source != COMMBENCH_SOURCE:
        return f"time = the figure per call that {source} printed, imported (how it times: timing_method)"
    iters_text = _span(group["iters"])
    if timing != BATCH:
        return f"time = median of {iters_text} iterations (slowest rank each)"
    calls = _span(group.get("calls_per_sample", pd.Series(dtype=float)))
    calls_text = f" of {calls}" if calls else ""
    return f"time = median of {iters_text} batches{calls_text} back-to-back calls (time per call, mean over ranks)"


def _has_interval(group: pd.DataFrame) -> bool:
    """Whether the rows carry a 95 % CI (a source that logs every call), not one printed figure each."""
    return "time_us_ci_lo" in group.columns and bool(pd.to_numeric(group["time_us_ci_lo"], errors="coerce").notna()
                                                     .any())


def _short_timing_text(timing: str, group: pd.DataFrame) -> str:
    """The title's word on how a time was taken, e.g. `batch timing: median of 20 samples of 5 back-to-back calls,
    mean over ranks`."""
    source = _source(group)
    if source != COMMBENCH_SOURCE and _has_interval(group):  # a log of every call (NCCL Inspector): its median
        return f"time: the median of the {_span(group['iters'])} calls {source} logged, with its 95 % CI (imported)"
    if source != COMMBENCH_SOURCE:
        return f"time: the figure per call that {source} printed (imported: no samples, so no CI)"
    samples = f"median of {_span(group['iters'])} samples"
    if timing != BATCH:
        return f"{timing} timing: {samples} of one call after a barrier, slowest rank"
    calls = _span(group.get("calls_per_sample", pd.Series(dtype=float)))
    methods = " ".join(group["timing_method"].dropna().astype(str)) if "timing_method" in group.columns else ""
    average = next((text for text in _RANK_AVERAGES if text in methods), "mean over ranks")
    calls_text = "one call" if calls == "1" else f"{calls or 'K'} back-to-back calls"
    return f"{timing} timing: {samples} of {calls_text}, {average}"


def _where(first) -> str:
    return f"{first['backend']}/{first['device']}, {first['world_size']} ranks"


# -- one table ---------------------------------------------------------------------------------------------------------

@dataclass
class _Verdict:
    """What a table row (its placements' cells) is flagged for."""
    wrong: bool = False
    max_time: bool = False
    noise: str | None = None  # "noisy" (a CI wider than NOISY_CI_PCT), "unknown" (a cell without CI), or None
    widest: float = math.nan  # the widest known half-width, in %
    host_bound: bool = False  # the host could not stay ahead of the device (results.csv's host_bound)


def _judge(cells: list, *, imported: bool) -> _Verdict:
    """An imported row has no CI to judge (the table says so once)."""
    verdict = _Verdict(wrong=any(_is_wrong(cell["n_wrong"]) for cell in cells))
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


def _row_flags(cells: list, *, imported: bool = False) -> tuple[list[str], str | None]:
    """The verbose end-of-line flags of one table row and its noise verdict: noisy, unknown or None."""
    verdict = _judge(cells, imported=imported)
    flags = [_WRONG] if verdict.wrong else []
    if verdict.max_time:
        flags.append("--max-time spent before --target-ci was reached")
    if verdict.host_bound:
        flags.append(f"host-bound (issue per call ≥ {host_issue.HOST_BOUND_SHARE:g} × the time per call, or a spin "
                     "ended first)")
    if verdict.noise == "noisy":
        flags.append(f"noisy (95 % CI ±{_percent(verdict.widest)} %)")
    elif verdict.noise == "unknown":
        flags.append("noise unknown (no 95 % CI)")
    return flags, verdict.noise


def _brief_flags(verdict: _Verdict) -> str:
    """A short table's flags: a word each (the summary under the tables says what they mean); a wrong result stays
    loud."""
    words = (["noisy"] if verdict.noise == "noisy" else ["no CI"] if verdict.noise == "unknown" else []) + \
        (["max-time"] if verdict.max_time else []) + (["host-bound"] if verdict.host_bound else [])
    if verdict.wrong:
        return "   <-- " + "; ".join([_WRONG, *words])
    return (_GAP + ", ".join(words)) if words else ""


def _rows_by_size(group: pd.DataFrame):
    """(first row, the row of each placement or None) per dtype × op × size, in run order."""
    for _, rows in group.groupby(["dtype", "op", "size_bytes"], sort=False):
        yield rows.iloc[0], {inplace: (rows[rows["inplace"] == inplace].iloc[0]
                                       if (rows["inplace"] == inplace).any() else None) for inplace, _ in _PLACEMENTS}


def _key_values(row) -> list:
    return [row["size_bytes"], row["count"], row["dtype"], row["op"], _root(row)]


def _table(collective: str, impl: str, timing: str, group: pd.DataFrame) -> str:
    """The verbose table: nccl-tests' layout, both placement groups, the legend under it."""
    first = group.iloc[0]
    lines = [f"# {collective} ({impl}, {timing} timing) on {_where(first)}; {_timing_text(timing, group)}, "
             "GB = 1e9 B",
             "#" + " " * (len(_HEAD) - 1) + "".join(f" {title:^{len(_CELL_HEAD)}}" for _, title in _PLACEMENTS),
             "#" + _HEAD[1:] + (" " + _CELL_HEAD) * 2,
             "#" + _UNITS[1:] + (" " + _CELL_UNITS) * 2]
    noisy = unknown = measured = 0
    imported = _source(group) != COMMBENCH_SOURCE
    for row, by_placement in _rows_by_size(group):
        size, count, dtype, op, root = _key_values(row)
        line = f"{size:>12} {count:>13} {dtype:>9} {op:>6} {root:>5}"
        cells = [cell for cell in by_placement.values() if cell is not None]
        for cell in by_placement.values():
            line += " " + (_NO_CELL if cell is None else " ".join(
                f"{value:>{width}}" for value, (_, _, width) in zip(_cell_values(cell), _CELL_COLUMNS)))
        flags, noise = _row_flags(cells, imported=imported)
        noisy += noise == "noisy"
        unknown += noise == "unknown"
        measured += 1
        lines.append(line + ("   <-- " + "; ".join(flags) if flags else ""))
    lines.append(average_busbw_line(group))
    lines.append(expected_line(group))
    lines.append(f"# imported from {_source(group)}: one figure per row, no samples, so no 95 % CI (±CI n/a)"
                 if imported else noise_legend(noisy, unknown, measured))
    return "\n".join(lines + _world_one_notes(group))


class _Noise:
    """The points of every short table, counted for the one summary under them."""

    def __init__(self):
        self.points = self.noisy = self.unknown = self.max_time = self.imported = 0

    def add(self, cells: list, *, imported: bool) -> None:
        if imported:
            self.imported += len(cells)
            return
        for cell in cells:
            verdict = _judge([cell], imported=False)
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


def _short_table(collective: str, impl: str, timing: str, group: pd.DataFrame, noise: _Noise) -> str:
    """A title that says the timing, one header line, a row per size with the placements measured, the Avg line."""
    first = group.iloc[0]
    placements = [(inplace, title) for inplace, title in _PLACEMENTS if (group["inplace"] == inplace).any()]
    lines = [f"# {collective} ({impl}, {' and '.join(title for _, title in placements)}) on {_where(first)}; "
             f"{_short_timing_text(timing, group)}; GB = 1e9 B"]
    key_width = sum(width for _, width in _KEYS) + len(_GAP) * (len(_KEYS) - 1)
    cell_width = sum(width for _, width in _CELLS) + len(_GAP) * (len(_CELLS) - 1)
    if len(placements) > 1:
        lines.append("#" + " " * (key_width - 1) + "".join(f"{_GAP}{title:^{cell_width}}" for _, title in placements))
    lines.append("#" + _GAP.join(f"{title:>{width}}" for title, width in _KEYS + _CELLS * len(placements))[1:])
    imported = _source(group) != COMMBENCH_SOURCE
    from_bytes, _ = bandwidth_bound_from(group)
    for row, by_placement in _rows_by_size(group):
        values = _key_values(row)
        cells = [by_placement[inplace] for inplace, _ in placements]
        for cell in cells:
            if cell is None:
                values += ["-"] * len(_CELLS)
                continue
            figures = _cell_values(cell)
            values += [*figures[:4], _percent_of_expected(cell, from_bytes), figures[4]]
        measured = [cell for cell in cells if cell is not None]
        noise.add(measured, imported=imported)
        line = _GAP.join(f"{value:>{width}}" for value, (_, width) in zip(values, _KEYS + _CELLS * len(placements)))
        lines.append(line + _brief_flags(_judge(measured, imported=imported)))
    lines.append(average_busbw_line(group) + _expected_suffix(group))
    return "\n".join(lines + _world_one_notes(group))


BANDWIDTH_SHARE = 0.9
"""Bandwidth dominates a size where the α–β fit's transfer time S·β is at least this share of the fitted time:
S ≥ 9·α/β. At S = α/β a time is half latency, and real curves (protocol switches) reach far less of their ceiling
there than the line says (a two-node H100 log: 16 % at 32 MiB, 90 % at 8 GiB)."""


def bandwidth_bound_from(group: pd.DataFrame) -> tuple[float, str]:
    """The size from which bandwidth dominates a row's time, and how it was found: where the α–β fit's transfer time
    is BANDWIDTH_SHARE of the time, given two sizes or more and a fit with both terms positive; else 1 MiB."""
    from commbench.models.alpha_beta import fit_line

    usable = group[pd.to_numeric(group["time_us_p50"], errors="coerce") > 0]
    if usable["size_bytes"].nunique() >= 2:
        line = fit_line(usable["size_bytes"].astype(float).to_numpy(), usable["time_us_p50"].astype(float).to_numpy())
        if line.alpha_us > 0 and line.us_per_byte > 0:
            share = BANDWIDTH_SHARE / (1 - BANDWIDTH_SHARE)
            return share * line.alpha_us / line.us_per_byte, f"{share:.0f}·α/β of the α–β fit"
    return float(AVERAGE_FROM_BYTES), "1 MiB (no α–β fit)"


def _percent_of_expected(cell, from_bytes: float) -> str:
    """busbw as a percentage of the expected busbw, where bandwidth dominates the time; '-' elsewhere."""
    expected = as_number(cell.get("expected_busbw_gbps"))
    busbw = as_number(cell.get("busbw_gbps"))
    if math.isnan(expected) or expected <= 0 or math.isnan(busbw) or float(cell["size_bytes"]) < from_bytes:
        return "-"
    return f"{100 * busbw / expected:.0f}"


def _expected_suffix(group: pd.DataFrame) -> str:
    expected = as_number(group.iloc[0].get("expected_busbw_gbps"))
    return "; expected: none" if math.isnan(expected) else f"; expected {expected:.3f} GB/s"


def expected_summary(results: pd.DataFrame) -> str:
    """Under the short tables, once: what the expected busbw rests on (or why there is none) and where % of expected
    is given."""
    bases = list(dict.fromkeys(str(basis) for basis in results.get("expected_basis", pd.Series(dtype=str))
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
    basis = str(first.get("expected_basis") or "") if "expected_basis" in group.columns else ""
    expected = as_number(first.get("expected_busbw_gbps"))
    if math.isnan(expected):
        why = basis.removeprefix("none: ") if basis and basis != "nan" else "the rows carry none"
        return f"# expected busbw: none ({why})"
    from_bytes, how = bandwidth_bound_from(group)
    return (f"# expected busbw: {expected:.3f} GB/s ({basis}); % of expected from {_mib(from_bytes)}, where bandwidth "
            f"dominates ({how}); the model: commbench expect")


def _mib(size: float) -> str:
    return format_bytes(int(size)) if size % 1024 == 0 else f"{size / 1024**2:.2g} MiB"


def _world_one_notes(group: pd.DataFrame) -> list[str]:
    if int(group.iloc[0]["world_size"]) != 1:
        return []
    lines = ["# busbw is 0 at world size 1: no byte crosses between ranks (factor (n-1)/n = 0); read algbw"]
    if "note" in group.columns and group["note"].astype(str).str.startswith("no-op").any():
        lines.append("# no-op: in place with 1 rank the output is the input, nothing is copied or sent; its "
                     "time is the call's overhead, not a transfer, so no algbw is given")
    return lines


def _root(row) -> int:
    """The row's root rank, -1 for collectives without one (as nccl-tests prints); runs stored before the root
    column: broadcast's was rank 0."""
    root = as_number(row.get("root"))
    if not math.isnan(root):
        return int(root)
    collective = COLLECTIVES.get(row["collective"])
    return 0 if collective is not None and collective.has_root else -1


def _cell_values(row) -> list[str]:
    """One placement's figures: time p50, ±CI, algbw, busbw, #wrong."""
    n_wrong = row["n_wrong"]
    wrong_text = "N/A" if pd.isna(n_wrong) else str(int(n_wrong))
    if str(row.get("note") or "").startswith("no-op"):
        algbw = "no-op"
    else:
        algbw = "-" if pd.isna(row["algbw_gbps"]) else f"{row['algbw_gbps']:.3f}"
    busbw = "-" if pd.isna(row["busbw_gbps"]) else f"{row['busbw_gbps']:.3f}"
    half_width = ci_half_width_pct(row)
    ci_text = UNKNOWN if math.isnan(half_width) else _percent(half_width)
    return [f"{row['time_us_p50']:.2f}", ci_text, algbw, busbw, wrong_text]


def ci_half_width_pct(row) -> float:
    """The wider side of the median time's 95 % CI in percent of the median, as commbench.measure.stats.Summary
    defines it;
    NaN where there is none (fewer than 6 samples, a median of 0, or a file written before the CI columns)."""
    return stored_half_width_pct(row, "time_us")


def _percent(value: float) -> str:
    """At most 6 characters up to 999999 %, so the ±CI column stays aligned."""
    return f"{value:.1f}" if value < 1000 else f"{value:.0f}"


def _is_wrong(n_wrong) -> bool:
    return not pd.isna(n_wrong) and int(n_wrong) > 0


def noise_legend(noisy: int, unknown: int, rows: int) -> str:
    """Two lines under a verbose table: what ±CI means, then how many rows are noisy and what to do about it."""
    unknown_text = f", {unknown} unknown" if unknown else ""
    return ("# ±CI = half-width of the median time's 95 % CI, in % of the median; n/a = no CI (fewer than 6 samples "
            "or a median of 0): noise unknown\n"
            f"# noisy = above ±{NOISY_CI_PCT:.0f} % ({noisy} of {rows} rows{unknown_text}): rerun with more --iters, "
            f"with --target-ci {NOISY_CI_PCT:.0f} --max-time S, or as a run set of several launches (drift between "
            "launches is not in the CI)")


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
    tests = [(int(count), len(rows)) for (_, _, count), rows in group.groupby([files, figures, counts])]
    if any(count != rows for count, rows in tests):
        return None
    return float(figures.mean()), len(tests)


def average_busbw_line(group: pd.DataFrame) -> str:
    """nccl-tests' `# Avg bus bandwidth`, the mean busbw of every row and placement of the table (an imported
    nccl-tests table: its own Avg line, as the log prints it); then the mean busbw over the sizes ≥ 1 MiB, where
    busbw measures bandwidth rather than latency."""
    busbw = group["busbw_gbps"].dropna()
    avg_text = f"{busbw.mean():.3f} GB/s ({_results(len(busbw))})" if len(busbw) else UNKNOWN
    printed = source_average(group)
    if printed is not None:
        whose = "the log's own figure" if printed[1] == 1 else f"the Avg lines of {printed[1]} tests, by results"
        avg_text = f"{printed[0]:g} GB/s ({_results(len(group))}, {whose})"
    large = group[group["size_bytes"] >= AVERAGE_FROM_BYTES]
    large_busbw = large["busbw_gbps"].dropna()
    if large_busbw.empty:
        large_text = f"no size ≥ {format_bytes(AVERAGE_FROM_BYTES)} measured (small sizes show latency)"
    else:
        low, high = format_bytes(int(large["size_bytes"].min())), format_bytes(int(large["size_bytes"].max()))
        sizes = f"at {low}" if low == high else f"{low} to {high}"
        large_text = f"{large_busbw.mean():.3f} GB/s ({_results(len(large_busbw))}, {sizes})"
    return f"# Avg bus bandwidth: {avg_text}; mean busbw ≥ {format_bytes(AVERAGE_FROM_BYTES)}: {large_text}"


def _results(count: int) -> str:
    return f"{count} result{'' if count == 1 else 's'}"


# -- ring vs builtin ---------------------------------------------------------------------------------------------------

def _ratio_rows(group: pd.DataFrame):
    """(dtype, op, placement, size, builtin busbw, ring busbw, ratio, range low, range high) per point both ran."""
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
        yield dtype, op, placement, size, builtin_busbw, ring_busbw, ratio, low, high


def _range_text(ratio: float, low: float, high: float) -> str:
    return "-" if math.isnan(ratio) else UNKNOWN if math.isnan(low) else f"{low:.3f}–{high:.3f}"


def _ring_vs_builtin(collective: str, timing: str, group: pd.DataFrame) -> str:
    first = group.iloc[0]
    lines = [f"# ring vs builtin: {collective} on {first['backend']}/{first['device']}, {first['world_size']} ranks "
             f"(busbw from the median time, {timing} timing; ratio range: the two medians' 95 % CIs combined "
             "conservatively, builtin low / ring high to builtin high / ring low)",
             f"#{'size':>11} {'type':>9} {'redop':>6} {'placement':>13} {'builtin busbw':>14} {'ring busbw':>11} "
             f"{'ring/builtin':>13} {'ratio range':>15}",
             f"#{'(B)':>11} {'':>9} {'':>6} {'':>13} {'(GB/s)':>14} {'(GB/s)':>11} {'':>13} {'':>15}"]
    for dtype, op, placement, size, builtin_busbw, ring_busbw, ratio, low, high in _ratio_rows(group):
        flags = [text for _, text in _ratio_verdict(ratio, low, high)]
        lines.append(f"{size:>12} {dtype:>9} {op:>6} {placement:>13} {builtin_busbw:>14.3f} {ring_busbw:>11.3f} "
                     f"{ratio:>13.3f} {_range_text(ratio, low, high):>15}"
                     + ("   <-- " + "; ".join(flags) if flags else ""))
    return "\n".join(lines)


def _short_ratio_table(collective: str, timing: str, group: pd.DataFrame) -> str:
    lines = [f"# ring vs builtin: {collective} on {_where(group.iloc[0])}, {timing} timing; ratio = ring busbw / "
             "builtin busbw, range = the two medians' 95 % CIs combined conservatively",
             "#" + _GAP.join(f"{title:>{width}}" for title, width in _RATIO)[1:]]
    for dtype, op, placement, size, builtin_busbw, ring_busbw, ratio, low, high in _ratio_rows(group):
        values = [size, dtype, op, placement, f"{builtin_busbw:.3f}", f"{ring_busbw:.3f}", f"{ratio:.3f}",
                  _range_text(ratio, low, high)]
        words = [brief for brief, _ in _ratio_verdict(ratio, low, high)]
        lines.append(_GAP.join(f"{value:>{width}}" for value, (_, width) in zip(values, _RATIO))
                     + (_GAP + ", ".join(words) if words else ""))
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


def _ratio_verdict(ratio: float, low: float, high: float) -> list[tuple[str, str]]:
    """A ratio row's flags, each as (a short table's word, the verbose table's text)."""
    if math.isnan(ratio):
        return []
    if math.isnan(low):
        return [("no CI", "noise unknown (a side has no 95 % CI)")]
    flags = []
    spread = max(ratio - low, high - ratio) / ratio * 100
    if spread > NOISY_CI_PCT:
        flags.append(("noisy", f"noisy (ratio range ±{_percent(spread)} %)"))
    if low <= 1.0 <= high and f"{ratio:.3f}" != "1.000":
        flags.append(("1 in range", "not distinguishable from 1 (range contains 1.000)"))
    return flags
