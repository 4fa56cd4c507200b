"""What every report figure shares: legends outside the axes (they used to cover points and bars), message-size
axes labelled 1 KiB … 1 GiB, configuration axes whose labels fit side by side, and error bars from the 95 % CI of a
median."""

import math
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")  # files only: no display on CI machines or cluster nodes

import numpy as np
import pandas as pd
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.lines import Line2D
from matplotlib.textpath import TextToPath
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter
from numpy.typing import ArrayLike

from commbench.units import format_bytes

CI_NOTE = "error bars: 95 % CI of the median"
Drawn = tuple[Figure, None] | tuple[None, str]
LegendEntry = Artist | tuple[Artist, ...]
"""A legend entry: an artist, or a container of artists (what errorbar returns)."""
"""What a figure function returns: the figure, or no figure and why it was skipped."""
MAX_SIZE_TICKS = 11
_TICK_STRIDES = (1, 2, 3, 5, 10, 20)  # in powers of two; 10 and 20 land on KiB, MiB, GiB


def legend_outside(axis: Axes, *, fontsize: float = 8, handles: Sequence[LegendEntry] | None = None,
                   title: str | None = None) -> None:
    """The legend right of the axes, where no data can be; tight_layout and savefig(bbox_inches='tight') make room.
    `handles` (artists with their labels) fixes the order: matplotlib lists lines before error bars otherwise."""
    handles = handles if handles is not None else axis.get_legend_handles_labels()[0]
    if handles:
        axis.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0,
                    fontsize=fontsize, title=title, title_fontsize=fontsize)


def _power_of_two_exponents(low: float, high: float) -> range:
    """Exponents of powers of two from one at or below `low` to one at or above `high`, every 1st, 2nd, 3rd, …
    so that at most MAX_SIZE_TICKS remain; multiples of the stride, so the ticks land on round units. The outer
    ones may lie beyond the data, where the axis does not show them."""
    first, last = math.floor(math.log2(low)), math.ceil(math.log2(high))
    for stride in _TICK_STRIDES:
        exponents = range(first // stride * stride, -(-last // stride) * stride + 1, stride)
        if len(exponents) <= MAX_SIZE_TICKS:
            break
    return exponents


def size_ticks(low: float, high: float) -> list[int]:
    """Byte sizes to label on a size axis spanning [low, high] (1 KiB … 1 GiB: every 2nd power, 11 ticks)."""
    return [2**power for power in _power_of_two_exponents(max(low, 1), max(high, 1))]


def size_label(size: int) -> str:
    """format_bytes (1 KiB, 16 MiB, 4 GiB), with TiB above, as --sizes also reads them: 1048576 GiB would not fit."""
    tib = 1024**4
    return f"{size // tib} TiB" if size >= tib and size % tib == 0 else format_bytes(size)


def size_axis(axis: Axes, sizes: ArrayLike) -> None:
    """Log2 x axis of message sizes, ticks labelled as the CLI takes sizes (4 KiB, 16 MiB), the others unlabelled."""
    values = np.asarray(sizes, dtype=float)
    ticks = size_ticks(values.min(), values.max())
    axis.set_xscale("log", base=2)
    axis.xaxis.set_major_locator(FixedLocator(ticks))
    axis.xaxis.set_major_formatter(FuncFormatter(lambda value, _: size_label(int(round(value)))))
    every_power = [2**power for power in range(int(math.log2(ticks[0])), int(math.log2(ticks[-1])) + 1)]
    axis.xaxis.set_minor_locator(FixedLocator(every_power))
    axis.xaxis.set_minor_formatter(NullFormatter())
    axis.tick_params(axis="x", which="major", labelsize=8)  # 11 labels of up to 7 characters beside a legend
    axis.set_xlabel("message size")


BAR_LABEL_PT = 7
BAR_GAP_IN = 0.15  # between two bars' labels
FIGURE_MIN_IN, FIGURE_MAX_IN = 10.0, 14.0
"""A bar figure is as wide as its labels need, within these: report.html shows it at most 1200 px wide (14 inches
at 110 dpi are 1540 px, shown at 78 %), so a wider one would shrink its text below reading size; beyond the most,
bars are numbered and the legend names them."""
_AROUND_BARS_IN = 3.8  # the y label on the left, the legend on the right


def wrap_label(label: str, width: int) -> str:
    """A configuration label on lines of at most `width` characters, a longer word alone on its line ("zero3
    fwd_prefetch=0 bwd_prefetch=default" at 20 → two lines): horizontal labels that take little width and never cut a
    setting in two."""
    lines: list[str] = []
    for word in label.split():
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += f" {word}"
        else:
            lines.append(word)
    return "\n".join(lines)


def _text_width_in(text: str) -> float:
    """The drawn width of the widest line, in inches, at BAR_LABEL_PT (matplotlib's own font metrics)."""
    font = FontProperties(size=BAR_LABEL_PT)
    return max(TextToPath().get_text_width_height_descent(line, font, ismath=False)[0]
               for line in text.split("\n")) / 72


def bar_figure_width(labels: list[str]) -> float:
    """Inches that give each bar's wrapped label its own room, between FIGURE_MIN_IN and FIGURE_MAX_IN."""
    return min(max(_bars_width(labels) + _AROUND_BARS_IN, FIGURE_MIN_IN), FIGURE_MAX_IN)


def _wrapped(labels: list[str]) -> list[str]:
    """Every label wrapped to the same width, the longest word among them all: bars side by side read alike."""
    width = max((len(word) for label in labels for word in label.split()), default=0)
    return [wrap_label(label, width) for label in labels]


def _bars_width(labels: list[str]) -> float:
    return len(labels) * (max((_text_width_in(text) for text in _wrapped(labels)), default=0) + BAR_GAP_IN)


def numbered(labels: list[str]) -> bool:
    """Whether the labels cannot stand side by side even at FIGURE_MAX_IN: the bars then carry numbers."""
    return _bars_width(labels) + _AROUND_BARS_IN > FIGURE_MAX_IN


def lay_out_bars(figure: Figure, labelled: list[tuple[Axes, list[str]]]) -> None:
    """tight_layout, then room for the bar labels: tight_layout gives the y label and the legend what they need and
    the bars what is left, which a wide legend (or a two-line y label) can make less than _AROUND_BARS_IN assumed.
    Where an axis (`labelled`: (axis, its labels)) gives a bar less room than its label needs, the figure widens by
    the difference, up to FIGURE_MAX_IN."""
    figure.tight_layout()
    short = 0.0
    for axis, labels in labelled:
        if not labels or numbered(labels):
            continue
        low, high = axis.get_xlim()
        needed = (high - low) * (max(_text_width_in(text) for text in _wrapped(labels)) + BAR_GAP_IN)
        short = max(short, needed - axis.get_position().width * figure.get_figwidth())
    if short > 0:
        figure.set_figwidth(min(figure.get_figwidth() + short, FIGURE_MAX_IN))
        figure.tight_layout()


def bar_axis(axis: Axes, labels: list[str], *, show: bool = True) -> list[LegendEntry]:
    """Bars at 0 … n-1 labelled horizontally with their wrapped labels, or, where those would not fit side by side,
    with 1 … n; returns the legend entries that then name each number (none otherwise). show=False: ticks without
    labels (a panel above another with the same bars)."""
    positions = np.arange(len(labels))
    if not show:
        axis.set_xticks(positions, [""] * len(labels))
        return []
    if numbered(labels):
        axis.set_xticks(positions, [str(number) for number in positions + 1], fontsize=BAR_LABEL_PT + 1)
        axis.set_xlabel("configuration (numbered: see the legend)")
        return [Line2D([], [], linestyle="none", label=f"{number}: {label}")
                for number, label in enumerate(labels, start=1)]
    axis.set_xticks(positions, _wrapped(labels), rotation=0, ha="center", fontsize=BAR_LABEL_PT)
    return []


def ratio_axis(axis: Axes, ratios: ArrayLike) -> None:
    """Log2 y axis for a ratio: 1/2 and 2 lie equally far from 1, and 0.07 and 5 both stay readable."""
    values = np.asarray(ratios, dtype=float)
    values = values[np.isfinite(values) & (values > 0)]
    axis.set_yscale("log", base=2)
    if values.size:
        exponents = _power_of_two_exponents(min(values.min(), 1.0), max(values.max(), 1.0))
        axis.yaxis.set_major_locator(FixedLocator([2.0**power for power in exponents]))
        axis.yaxis.set_major_formatter(FuncFormatter(
            lambda value, _: f"{value:g}" if value >= 1 else f"1/{1 / value:g}"))
        axis.yaxis.set_minor_formatter(NullFormatter())


def ci_errors(center: ArrayLike, low: ArrayLike, high: ArrayLike) -> np.ndarray:
    """yerr for errorbar: distances from the center down to `low` and up to `high`; NaN (no bar drawn, rather than a
    bar of zero length that would claim certainty) where the interval is unknown: fewer than 6 samples have none."""
    center, low, high = (pd.to_numeric(pd.Series(np.asarray(values)), errors="coerce").to_numpy(float)
                         for values in (center, low, high))
    below, above = center - low, high - center
    return np.clip(np.vstack([below, above]), 0, None)  # a rounding hair below 0 would be refused by matplotlib
