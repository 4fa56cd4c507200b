"""The report's figures of training sweeps (bench kinds ddp, fsdp, strategy). Each takes the loaded runs of the kinds
that list it and returns (figure, None) or (None, why it was skipped)."""

import matplotlib

from commbench.schema import training as col

matplotlib.use("Agg")  # files only: no display on CI machines or cluster nodes

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes

from commbench.report.figure_layout import (
    CI_NOTE,
    Drawn,
    bar_axis,
    bar_figure_width,
    ci_errors,
    lay_out_bars,
    legend_outside,
)
from commbench.runs import LoadedRun
from commbench.training.table import short_labels


def _sweeps(runs: list[LoadedRun]) -> list[tuple[str, pd.DataFrame]]:
    return [(run.name, run.results.reset_index(drop=True)) for run in runs]


def _column(frame: pd.DataFrame, name: str) -> np.ndarray:
    """A numeric column; NaN where a row has no value (an older file without the column reads as empty)."""
    return pd.to_numeric(frame[name], errors="coerce").to_numpy(float)


def _width(sweeps: list[tuple[str, pd.DataFrame]]) -> float:
    """Inches that give every sweep's bar labels their room (the figure's panels share one width)."""
    return max(bar_figure_width(short_labels(frame)) for _, frame in sweeps)


def _exposed(frame: pd.DataFrame) -> tuple[np.ndarray, str]:
    """The exposed communication the tables show (step − compute-only step, docs/training.md argues why), at least
    0 (a negative paired difference is noise); the trace's figure for runs that have no compute-only step."""
    if col.EXPOSED_COMM_MS_BASELINE in frame and frame[col.EXPOSED_COMM_MS_BASELINE].notna().any():
        return (np.clip(np.nan_to_num(_column(frame, col.EXPOSED_COMM_MS_BASELINE)), 0, None),
                "exposed communication\n(step − compute-only step)")  # two lines: as narrow as the legend allows
    return np.nan_to_num(_column(frame, col.EXPOSED_COMM_MS)), "exposed communication (trace)"


def _stacked_step_bars(axis: Axes, frame: pd.DataFrame, labels: list[str], title: str, *,
                       show_labels: bool = True) -> None:
    """The step-time bars with the exposed communication stacked, the legend beside them (naming the bars' numbers
    where the labels could not stand side by side)."""
    step = _column(frame, col.STEP_TIME_MS_P50)
    exposed, what = _exposed(frame)
    positions = np.arange(len(frame))
    axis.bar(positions, step - np.minimum(exposed, step), label="rest of the step")
    axis.bar(positions, np.minimum(exposed, step), bottom=step - np.minimum(exposed, step), label=what)
    axis.errorbar(positions, step, yerr=ci_errors(step, _column(frame, col.STEP_TIME_MS_CI_LO),
                                                  _column(frame, col.STEP_TIME_MS_CI_HI)),
                  fmt="none", ecolor="black", capsize=5, label="95 % CI of the median step")
    key = bar_axis(axis, labels, show=show_labels)
    axis.set_ylabel(f"step time p50 (ms)\n{CI_NOTE}", fontsize=9)
    axis.set_title(title, fontsize=11)
    legend_outside(axis, handles=axis.get_legend_handles_labels()[0] + key)


def ddp_buckets(runs: list[LoadedRun]) -> Drawn:
    sweeps = [(name, frame.sort_values(["bucket_cap_mb", col.CONFIG_INDEX]).reset_index(drop=True))
              for name, frame in _sweeps(runs)]
    figure, axes = plt.subplots(len(sweeps), 1, figsize=(_width(sweeps), 3.8 * len(sweeps)),
                                squeeze=False)
    labelled = []
    for axis, (name, frame) in zip(axes[:, 0], sweeps):
        labelled.append((axis, short_labels(frame)))
        _stacked_step_bars(axis, frame, labelled[-1][1], f"{name}: DDP step time by bucket size")
    lay_out_bars(figure, labelled)
    return figure, None


def strategy_steps_and_memory(runs: list[LoadedRun]) -> Drawn:
    """Per sweep, the step time above the peak memory, the same configuration in the same column: the labels are
    written once, under the memory bars, horizontal and wrapped (rotated labels of two side-by-side panels crowded
    each other and read at an angle)."""
    sweeps = _sweeps(runs)
    figure, axes = plt.subplots(2 * len(sweeps), 1, figsize=(_width(sweeps), 6 * len(sweeps)),
                                squeeze=False, gridspec_kw={"height_ratios": [3, 2] * len(sweeps)})
    labelled = []
    for number, (name, frame) in enumerate(sweeps):
        steps, memory = axes[2 * number, 0], axes[2 * number + 1, 0]
        labels = short_labels(frame)
        labelled.append((memory, labels))
        _stacked_step_bars(steps, frame, labels, f"{name}: step time", show_labels=False)
        memory.bar(np.arange(len(frame)), _column(frame, col.PEAK_MEM_BYTES) / 2**20, color="tab:purple")
        memory.set_xlim(steps.get_xlim())  # each bar under its step time
        key = bar_axis(memory, labels)
        memory.set_ylabel("peak memory (MiB)")
        memory.set_title(f"{name}: peak memory per rank", fontsize=11)
        if key:
            legend_outside(memory, handles=key, title="configurations")
    lay_out_bars(figure, labelled)
    return figure, None


def model_state_vs_prediction(runs: list[LoadedRun]) -> Drawn:
    sweeps = _sweeps(runs)
    figure, axes = plt.subplots(len(sweeps), 1, figsize=(_width(sweeps), 3.8 * len(sweeps)),
                                squeeze=False)
    labelled = []
    for axis, (name, frame) in zip(axes[:, 0], sweeps):
        labelled.append((axis, short_labels(frame)))
        positions = np.arange(len(frame))
        axis.bar(positions - 0.27, frame[col.MODEL_STATE_BYTES] / 2**20, width=0.27, label="measured (local tensors)")
        axis.bar(positions, frame[col.MODEL_STATE_BYTES_PREDICTED] / 2**20, width=0.27,
                 label="predicted (shard layout)")
        axis.bar(positions + 0.27, frame[col.MODEL_STATE_BYTES_FORMULA] / 2**20, width=0.27,
                 label="paper formula (fp32 Adam)")
        key = bar_axis(axis, labelled[-1][1])
        axis.set_ylabel("model state per rank (MiB)")
        axis.set_title(f"{name}: model state, measured vs predicted (deterministic: no error bars)", fontsize=11)
        legend_outside(axis, handles=axis.get_legend_handles_labels()[0] + key)
    lay_out_bars(figure, labelled)
    return figure, None
