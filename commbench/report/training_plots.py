"""The report's figures of training sweeps (bench kinds ddp, fsdp, strategy). Each takes the loaded runs of the kinds
that list it and returns (figure, None) or (None, why it was skipped)."""

import matplotlib

matplotlib.use("Agg")  # files only: no display on CI machines or cluster nodes

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from commbench.training.table import short_labels  # noqa: E402


def _sweeps(runs) -> list[tuple[str, pd.DataFrame]]:
    return [(run.name, run.results.reset_index(drop=True)) for run in runs]


def _stacked_step_bars(axis, frame: pd.DataFrame, labels: list[str], title: str) -> None:
    step = frame["step_time_ms_p50"].to_numpy(float)
    exposed = np.nan_to_num(frame["exposed_comm_ms"].to_numpy(float))
    positions = np.arange(len(frame))
    axis.bar(positions, step - np.minimum(exposed, step), label="rest of the step")
    axis.bar(positions, np.minimum(exposed, step), bottom=step - np.minimum(exposed, step),
             label="exposed communication (trace)")
    axis.set_xticks(positions, labels, rotation=30, ha="right", fontsize=7)
    axis.set_ylabel("step time p50 (ms)")
    axis.set_title(title)
    axis.legend(fontsize=8)


def ddp_buckets(runs: list):
    sweeps = _sweeps(runs)
    figure, axes = plt.subplots(len(sweeps), 1, figsize=(9, 3.8 * len(sweeps)), squeeze=False)
    for axis, (name, frame) in zip(axes[:, 0], sweeps):
        frame = frame.sort_values(["bucket_cap_mb", "config_index"]).reset_index(drop=True)
        _stacked_step_bars(axis, frame, short_labels(frame), f"{name}: DDP step time by bucket size")
    figure.tight_layout()
    return figure, None


def strategy_steps_and_memory(runs: list):
    sweeps = _sweeps(runs)
    figure, axes = plt.subplots(len(sweeps), 2, figsize=(12, 4 * len(sweeps)), squeeze=False)
    for (left, right), (name, frame) in zip(axes, sweeps):
        labels = short_labels(frame)
        _stacked_step_bars(left, frame, labels, f"{name}: step time")
        positions = np.arange(len(frame))
        right.bar(positions, frame["peak_mem_bytes"].to_numpy(float) / 2**20, color="tab:purple")
        right.set_xticks(positions, labels, rotation=30, ha="right", fontsize=7)
        right.set_ylabel("peak memory (MiB)")
        right.set_title(f"{name}: peak memory per rank")
    figure.tight_layout()
    return figure, None


def model_state_vs_prediction(runs: list):
    sweeps = _sweeps(runs)
    figure, axes = plt.subplots(len(sweeps), 1, figsize=(9, 3.8 * len(sweeps)), squeeze=False)
    for axis, (name, frame) in zip(axes[:, 0], sweeps):
        positions = np.arange(len(frame))
        axis.bar(positions - 0.27, frame["model_state_bytes"] / 2**20, width=0.27, label="measured (local tensors)")
        axis.bar(positions, frame["model_state_bytes_predicted"] / 2**20, width=0.27, label="predicted (shard layout)")
        axis.bar(positions + 0.27, frame["model_state_bytes_formula"] / 2**20, width=0.27,
                 label="paper formula (fp32 Adam)")
        axis.set_xticks(positions, short_labels(frame), rotation=30, ha="right", fontsize=7)
        axis.set_ylabel("model state per rank (MiB)")
        axis.set_title(f"{name}: model state, measured vs predicted")
        axis.legend(fontsize=8)
    figure.tight_layout()
    return figure, None


