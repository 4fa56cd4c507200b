"""The report's figures of training sweeps (bench kinds ddp, fsdp, strategy). Each takes the loaded runs of the kinds
that list it and returns (figure, None) or (None, why it was skipped)."""

import matplotlib

matplotlib.use("Agg")  # files only: no display on CI machines or cluster nodes

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from commbench.report.figure_layout import CI_NOTE, ci_errors, legend_outside  # noqa: E402
from commbench.training.table import short_labels  # noqa: E402


def _sweeps(runs) -> list[tuple[str, pd.DataFrame]]:
    return [(run.name, run.results.reset_index(drop=True)) for run in runs]


def _column(frame: pd.DataFrame, name: str) -> np.ndarray:
    """A numeric column; NaN where a row has no value (an older file without the column reads as empty)."""
    return pd.to_numeric(frame[name], errors="coerce").to_numpy(float)


def _stacked_step_bars(axis, frame: pd.DataFrame, labels: list[str], title: str, *, legend: bool = True) -> None:
    step = _column(frame, "step_time_ms_p50")
    exposed = np.nan_to_num(_column(frame, "exposed_comm_ms"))
    positions = np.arange(len(frame))
    axis.bar(positions, step - np.minimum(exposed, step), label="rest of the step")
    axis.bar(positions, np.minimum(exposed, step), bottom=step - np.minimum(exposed, step),
             label="exposed communication (trace)")
    axis.errorbar(positions, step, yerr=ci_errors(step, _column(frame, "step_time_ms_ci_lo"),
                                                  _column(frame, "step_time_ms_ci_hi")),
                  fmt="none", ecolor="black", capsize=5, label="95 % CI of the median step")
    axis.set_xticks(positions, labels, rotation=30, ha="right", fontsize=7)
    axis.set_ylabel(f"step time p50 (ms)\n{CI_NOTE}", fontsize=9)
    axis.set_title(title, fontsize=11)
    if legend:
        legend_outside(axis)


def ddp_buckets(runs: list):
    sweeps = _sweeps(runs)
    figure, axes = plt.subplots(len(sweeps), 1, figsize=(10, 3.8 * len(sweeps)), squeeze=False)
    for axis, (name, frame) in zip(axes[:, 0], sweeps):
        frame = frame.sort_values(["bucket_cap_mb", "config_index"]).reset_index(drop=True)
        _stacked_step_bars(axis, frame, short_labels(frame), f"{name}: DDP step time by bucket size")
    figure.tight_layout()
    return figure, None


def strategy_steps_and_memory(runs: list):
    sweeps = _sweeps(runs)
    figure, axes = plt.subplots(len(sweeps), 2, figsize=(14, 4 * len(sweeps)), squeeze=False)
    for (left, right), (name, frame) in zip(axes, sweeps):
        labels = short_labels(frame)
        _stacked_step_bars(left, frame, labels, f"{name}: step time", legend=False)
        positions = np.arange(len(frame))
        right.bar(positions, _column(frame, "peak_mem_bytes") / 2**20, color="tab:purple")
        right.set_xticks(positions, labels, rotation=30, ha="right", fontsize=7)
        right.set_ylabel("peak memory (MiB)")
        right.set_title(f"{name}: peak memory per rank", fontsize=11)
        # the step-time legend at the figure's right edge: between the panels it pushed them a legend apart
        legend_outside(right, handles=left.get_legend_handles_labels()[0], title="step time (left)")
    figure.tight_layout()
    return figure, None


def model_state_vs_prediction(runs: list):
    sweeps = _sweeps(runs)
    figure, axes = plt.subplots(len(sweeps), 1, figsize=(10, 3.8 * len(sweeps)), squeeze=False)
    for axis, (name, frame) in zip(axes[:, 0], sweeps):
        positions = np.arange(len(frame))
        axis.bar(positions - 0.27, frame["model_state_bytes"] / 2**20, width=0.27, label="measured (local tensors)")
        axis.bar(positions, frame["model_state_bytes_predicted"] / 2**20, width=0.27, label="predicted (shard layout)")
        axis.bar(positions + 0.27, frame["model_state_bytes_formula"] / 2**20, width=0.27,
                 label="paper formula (fp32 Adam)")
        axis.set_xticks(positions, short_labels(frame), rotation=30, ha="right", fontsize=7)
        axis.set_ylabel("model state per rank (MiB)")
        axis.set_title(f"{name}: model state, measured vs predicted (deterministic: no error bars)", fontsize=11)
        legend_outside(axis)
    figure.tight_layout()
    return figure, None
