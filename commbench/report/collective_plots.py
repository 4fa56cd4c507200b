"""The report's figures of collective sweeps (bench kind `collective`). Each takes the loaded runs of that kind and
returns (figure, None) or (None, why it was skipped)."""

from typing import Literal, TypedDict

import matplotlib

from commbench.schema import common

matplotlib.use("Agg")  # files only: no display on CI machines or cluster nodes

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from commbench.errors import CommbenchError
from commbench.models.alpha_beta import AlphaBetaFit, fit_results
from commbench.models.fit_files import LOW_R2, is_low
from commbench.names import COMMBENCH_SOURCE
from commbench.report.figure_layout import CI_NOTE, Drawn, LegendEntry, ci_errors, legend_outside, ratio_axis, size_axis
from commbench.runs import LoadedRun

TIMES = [common.TIME_US_P50, common.TIME_US_CI_LO, common.TIME_US_CI_HI]


def _rows(runs: list[LoadedRun]) -> pd.DataFrame:
    rows = pd.concat([run.results.assign(run=run.name) for run in runs], ignore_index=True)
    # a log size axis has no 0 (nccl-tests prints 0-byte rows; imports keep them); a refused environment
    # combination's rows have nothing to draw
    return rows[(rows[common.SIZE_BYTES] > 0) & rows[common.TIME_US_P50].notna()]


def _series(frame: pd.DataFrame, base: list[str]) -> tuple[list[str], list[str]]:
    """The keys of one plotted line: base, plus the op, placement, timing mode and environment combination
    (--env-axis) where the rows hold more than one
    (a line through both timings of a size would zigzag between two measurements); and which of those vary."""
    varying = [key for key in ("op", "inplace", "timing", "env")
               if key in frame and frame[key].astype(str).nunique() > 1]
    return [*base, *(key for key in varying if key not in base)], varying


def _in_place(value: object) -> bool:
    return str(value) in ("True", "true", "1")


def _variant_text(named: dict[str, object], varying: list[str]) -> str:
    """' in-place batch' for the varying keys of one line, '' when nothing varies."""
    texts = [("in-place" if _in_place(named[key]) else "out-of-place") if key == "inplace" else str(named[key])
             for key in varying]
    return "".join(f" {text}" for text in texts)


class LineStyle(TypedDict, total=False):
    """The errorbar keywords a line's placement sets."""

    marker: str
    markersize: float
    markerfacecolor: str
    markeredgewidth: float
    linestyle: Literal["-", "--", "none"]
    zorder: float


IN_PLACE_STYLE: LineStyle = {"marker": "s", "markersize": 8, "markerfacecolor": "none", "markeredgewidth": 1.5,
                  "linestyle": "--", "zorder": 3}
OUT_OF_PLACE_STYLE: LineStyle = {"marker": "o", "markersize": 5, "linestyle": "-", "zorder": 2}
"""Where a panel has both placements, they often measure the same: the in-place line is drawn dashed with hollow
squares, on top and larger, so that the filled out-of-place circles still show through it."""


def _placement_style(named: dict[str, object], varying: list[str]) -> LineStyle:
    """The marker and line style of one line: by placement where the panel holds both, else the plain circle."""
    if "inplace" not in varying:
        return {"marker": "o"}
    return LineStyle(**(IN_PLACE_STYLE if _in_place(named["inplace"]) else OUT_OF_PLACE_STYLE))


def _per_collective(rows: pd.DataFrame) -> tuple[Figure, list[tuple[Axes, str, pd.DataFrame]]]:
    """A figure with one panel per collective: (figure, [(axis, collective, its rows)])."""
    collectives = list(dict.fromkeys(rows["collective"]))
    figure, axes = plt.subplots(len(collectives), 1, figsize=(10, 3.4 * len(collectives)), squeeze=False)
    return figure, [(axis, name, rows[rows["collective"] == name]) for axis, name in zip(axes[:, 0], collectives)]


def _statistic(rows: pd.DataFrame) -> str:
    """What a panel's times are, per source: commbench's median with its 95 % CI, or an imported tool's own figure,
    which has no interval (nccl-tests prints the mean per call of a batch of back-to-back calls)."""
    sources = rows["source"].astype(object).where(rows["source"].notna(), COMMBENCH_SOURCE) \
        if "source" in rows.columns else pd.Series(COMMBENCH_SOURCE, index=rows.index)
    parts = []
    for source, group in rows.groupby(sources, sort=False):
        if source == COMMBENCH_SOURCE:
            parts.append(CI_NOTE + (" (commbench rows)" if sources.nunique() > 1 else ""))
            continue
        if pd.to_numeric(group[common.TIME_US_CI_LO], errors="coerce").notna().any():  # a log of every call
            parts.append(f"{source}: median of {_counted(group, 'iters')} logged calls, 95 % CI")
            continue
        counted = _counted(group, "calls_per_sample")
        parts.append(f"{source}: mean per call of {counted} calls, no interval" if counted
                     else f"{source}: its own figure, no interval")
    return "; ".join(parts)


def _counted(group: pd.DataFrame, column: str) -> str:
    values = sorted({int(value) for value in pd.to_numeric(group[column], errors="coerce").dropna()}) \
        if column in group.columns else []
    return f"{values[0]}" if len(values) == 1 else f"{values[0]}-{values[-1]}" if values else ""


def _time_label(rows: pd.DataFrame) -> str:
    imported = "source" in rows.columns and (rows["source"].fillna(COMMBENCH_SOURCE) != COMMBENCH_SOURCE).any()
    return "time per call (µs)" if imported else "time p50 (µs)"


def _errors(center: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray | None:
    """The CI bars, or none where no row of the line has an interval (an import: no bar rather than NaN bars)."""
    bars = ci_errors(center, low, high)
    return None if np.isnan(bars).all() else bars


def _label_axis(axis: Axes, sizes: pd.Series, *, title: str, ylabel: str, fontsize: float = 8,
                handles: list[LegendEntry] | None = None) -> None:
    size_axis(axis, sizes)
    axis.set_title(title, fontsize=11)
    axis.set_ylabel(ylabel)
    axis.grid(True, alpha=0.3)
    legend_outside(axis, fontsize=fontsize, handles=handles)


def busbw_vs_size(runs: list[LoadedRun]) -> Drawn:
    rows = _rows(runs)
    figure, panels = _per_collective(rows)
    for axis, collective, mine in panels:
        keys, varying = _series(mine, ["run", "impl", "backend", "dtype"])
        for values, line in mine.groupby(keys, sort=False):
            named = dict(zip(keys, values))
            run, impl, backend, dtype = (named[key] for key in ("run", "impl", "backend", "dtype"))
            line = line.sort_values(common.SIZE_BYTES)
            busbw = line[common.BUSBW_GBPS].to_numpy(float)
            # the CI of the median time maps to a busbw interval (slower time = lower bandwidth)
            p50, ci_lo, ci_hi = (line[column].to_numpy(float) for column in TIMES)
            label = f"{run}: " if rows["run"].nunique() > 1 else ""
            axis.errorbar(line[common.SIZE_BYTES], busbw, yerr=_errors(busbw, busbw * p50 / ci_hi, busbw * p50 / ci_lo),
                          capsize=3, elinewidth=1, **_placement_style(named, varying),
                          label=f"{label}{impl} {backend} {dtype}{_variant_text(named, varying)}")
        _draw_expected(axis, mine, several_runs=rows["run"].nunique() > 1)
        _label_axis(axis, mine[common.SIZE_BYTES], title=f"{collective}: bus bandwidth ({_statistic(mine)})",
                    ylabel="busbw (GB/s)")
    figure.tight_layout()
    return figure, None


def _draw_expected(axis: Axes, rows: pd.DataFrame, *, several_runs: bool) -> None:
    """A dashed line per distinct expected busbw (commbench expect: the busbw the machine's topology allows at large
    messages), labelled with what it rests on; nothing where the rows carry none."""
    if common.EXPECTED_BUSBW_GBPS not in rows:
        return
    found = rows[pd.to_numeric(rows[common.EXPECTED_BUSBW_GBPS], errors="coerce") > 0]
    for (run, expected), group in found.groupby(["run", common.EXPECTED_BUSBW_GBPS], sort=False):
        basis = str(group[common.EXPECTED_BASIS].iloc[0]).split(";")[0] if common.EXPECTED_BASIS in group else ""
        label = f"{run}: " if several_runs else ""
        axis.axhline(float(str(expected)), linestyle="--", linewidth=1.2, color="0.35",
                     label=f"{label}expected {float(str(expected)):.3g} GB/s ({basis})")


FIT_CAPTION = "Latency vs message size with the α–β fit"
NO_FIT_CAPTION = "Latency vs message size (no α–β fit drawn)"


def latency_with_fit(runs: list[LoadedRun]) -> Drawn:
    """Times against size with each line's α–β fit where it describes the points; the titles (and the figure's
    label, the report's caption) name the fit only where one is drawn."""
    rows = _rows(runs)
    figure, panels = _per_collective(rows)
    any_fit = False
    for axis, collective, mine in panels:
        handles: list[LegendEntry] = []  # each line's points, then its fit
        drawn, low = 0, 0  # fit lines drawn, fits left out for their R²
        for run, group in mine.groupby("run", sort=False):
            keys, varying = _series(group, ["impl", "backend", "dtype", "op", "inplace"])
            for values, line in group.groupby(keys, sort=False):
                named = dict(zip(keys, values))
                impl, backend, dtype = named["impl"], named["backend"], named["dtype"]
                line = line.sort_values(common.SIZE_BYTES)
                # fitted per line, so that a fit never mixes timing modes; a single size has no line to fit
                fits = _fits(line)
                prefix = f"{run}: " if rows["run"].nunique() > 1 else ""
                p50, ci_lo, ci_hi = (line[column].to_numpy(float) for column in TIMES)
                points = axis.errorbar(line[common.SIZE_BYTES], p50, yerr=_errors(p50, ci_lo, ci_hi), capsize=3,
                                       elinewidth=1, **_placement_style(named, varying) | {"linestyle": "none"},
                                       label=f"{prefix}{impl} {backend} {dtype}{_variant_text(named, varying)}")
                handles.append(points)
                fit = fits[0] if len(fits) == 1 else None
                if fit is not None and is_low(fit):  # the line would misdescribe its points: commbench fit's rule
                    low += 1
                    handles += axis.plot([], [], " ", label=f"  no fit drawn: R² {fit.r2:.2f} below {LOW_R2:g} "
                                                            "(commbench fit)")
                elif fit is not None and fit.algbw_gbps > 0 and fit.alpha_us > 0:
                    drawn += 1
                    sizes = np.geomspace(line[common.SIZE_BYTES].min(), line[common.SIZE_BYTES].max(), 50)
                    handles += axis.plot(sizes, fit.alpha_us + sizes / (fit.algbw_gbps * 1e3), "-",
                                         color=points[0].get_color(),
                                         label=f"  its fit: α={fit.alpha_us:.1f} µs, algbw={fit.algbw_gbps:.2f} GB/s")
        axis.set_yscale("log")
        _label_axis(axis, mine[common.SIZE_BYTES],
                    title=f"{collective}: time ({_statistic(mine)}){_fit_words(drawn, low)}",
                    ylabel=_time_label(mine), fontsize=7, handles=handles)
        any_fit = any_fit or drawn > 0
    figure.set_label(FIT_CAPTION if any_fit else NO_FIT_CAPTION)
    figure.tight_layout()
    return figure, None


def _fit_words(drawn: int, low: int) -> str:
    """What a panel's title says of its fits: the model where a fit line is drawn, why none is where all were left
    out, nothing where there was nothing to fit (a single size)."""
    if drawn:
        return " and the α–β fit t = α + S / algbw"
    return f"; no α–β fit drawn (R² below {LOW_R2:g})" if low else ""


def _fits(line: pd.DataFrame) -> list[AlphaBetaFit]:
    """The α–β fit of one plotted line, fitted on its own rows so that it never mixes timing modes; none for a
    single size or no usable time (fit_results refuses those)."""
    try:
        return fit_results(line)
    except CommbenchError:
        return []


def ring_vs_builtin(runs: list[LoadedRun]) -> Drawn:
    """busbw(ring) / busbw(builtin) = t_builtin / t_ring at the same size; its bars divide the two medians' CIs
    crosswise, so they hold whenever both CIs do (at least 90 %: each misses with at most 5 %)."""
    rows = _rows(runs)
    keys = [key for key in ("run", "collective", "backend", "dtype", "op", "inplace", "timing", common.SIZE_BYTES)
            if key in rows]
    ring = rows[rows["impl"] == "ring"].set_index(keys)[TIMES]
    builtin = rows[rows["impl"] == "builtin"].set_index(keys)[TIMES]
    frame = builtin.add_suffix("_builtin").join(ring.add_suffix("_ring"), how="inner").reset_index()
    frame = frame[(frame["time_us_p50_ring"] > 0) & (frame["time_us_p50_builtin"] > 0)]
    if frame.empty:
        return None, "no collective was measured with both the ring and the builtin implementation"
    figure, axis = plt.subplots(figsize=(10, 3.8))
    ends = []  # every point and bar end, for the ratio axis' ticks
    lines = [key for key in keys if key not in ("run", common.SIZE_BYTES)]
    varying = [key for key in lines if frame[key].astype(str).nunique() > 1 and key not in ("collective", "dtype")]
    for values, line in frame.groupby(["run", *lines], sort=False):
        line = line.sort_values(common.SIZE_BYTES)
        named = dict(zip(["run", *lines], values))
        prefix = f"{named['run']}: " if frame["run"].nunique() > 1 else ""
        extra = "".join(f" {key}={named[key]}" for key in varying)
        ratio = line["time_us_p50_builtin"].to_numpy(float) / line["time_us_p50_ring"].to_numpy(float)
        low = line["time_us_ci_lo_builtin"].to_numpy(float) / line["time_us_ci_hi_ring"].to_numpy(float)
        high = line["time_us_ci_hi_builtin"].to_numpy(float) / line["time_us_ci_lo_ring"].to_numpy(float)
        axis.errorbar(line[common.SIZE_BYTES], ratio, yerr=ci_errors(ratio, low, high), marker="o", capsize=3,
                      elinewidth=1, label=f"{prefix}{named['collective']} {named['dtype']}{extra}")
        ends += [ratio, low, high]
    axis.axhline(1.0, color="grey", linewidth=1)
    ratio_axis(axis, np.concatenate(ends))
    _label_axis(axis, frame[common.SIZE_BYTES], title="ring / builtin busbw (above 1: the hand-written ring is faster)",
                ylabel="busbw ratio = t_builtin / t_ring\nbars: builtin CI ÷ ring CI (95 %)")
    figure.tight_layout()
    return figure, None
