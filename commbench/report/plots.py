"""The report's figures, each drawn only when the runs hold its data; otherwise the reason it was skipped.

Every function takes the loaded runs and returns (figure, None) or (None, why-skipped).
"""

from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on CI machines or cluster nodes

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from commbench.models.alpha_beta import fit_results  # noqa: E402
from commbench.training.table import short_labels  # noqa: E402


@dataclass
class LoadedRun:
    name: str
    path: Path
    kind: str  # "collective" or "training"
    results: pd.DataFrame
    meta: dict


def _collective_rows(runs: list[LoadedRun]) -> pd.DataFrame:
    frames = [run.results.assign(run=run.name) for run in runs if run.kind == "collective"]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _training_rows(runs: list[LoadedRun], benches: tuple[str, ...]) -> list[tuple[str, pd.DataFrame]]:
    return [(run.name, run.results[run.results["bench"].isin(benches)].reset_index(drop=True)) for run in runs
            if run.kind == "training" and run.results["bench"].isin(benches).any()]


def _per_collective(rows: pd.DataFrame):
    """A figure with one panel per collective: (figure, [(axis, collective, its rows)])."""
    collectives = list(dict.fromkeys(rows["collective"]))
    figure, axes = plt.subplots(len(collectives), 1, figsize=(8, 3.2 * len(collectives)), squeeze=False)
    return figure, [(axis, name, rows[rows["collective"] == name]) for axis, name in zip(axes[:, 0], collectives)]


def _size_axis(axis, *, title: str, ylabel: str, fontsize: int = 8) -> None:
    axis.set_xscale("log", base=2)
    axis.set_title(title)
    axis.set_xlabel("message size (bytes)")
    axis.set_ylabel(ylabel)
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=fontsize)


def busbw_vs_size(runs: list[LoadedRun]):
    rows = _collective_rows(runs)
    if rows.empty:
        return None, "no collective sweep among the runs"
    figure, panels = _per_collective(rows)
    for axis, collective, mine in panels:
        for (run, impl, backend, dtype), line in mine.groupby(["run", "impl", "backend", "dtype"], sort=False):
            line = line.sort_values("size_bytes")
            busbw = line["busbw_gbps"].to_numpy(float)
            # the CI of the median time maps to a busbw interval (slower time = lower bandwidth)
            low = busbw * line["time_us_p50"].to_numpy(float) / line["time_us_ci_hi"].to_numpy(float)
            high = busbw * line["time_us_p50"].to_numpy(float) / line["time_us_ci_lo"].to_numpy(float)
            label = f"{run}: " if rows["run"].nunique() > 1 else ""
            axis.errorbar(line["size_bytes"], busbw, yerr=[busbw - low, high - busbw], marker="o", capsize=3,
                          label=f"{label}{impl} {backend} {dtype}")
        _size_axis(axis, title=f"{collective}: bus bandwidth (error bars: 95 % CI of the median)",
                   ylabel="busbw (GB/s)")
    figure.tight_layout()
    return figure, None


def latency_with_fit(runs: list[LoadedRun]):
    rows = _collective_rows(runs)
    if rows.empty:
        return None, "no collective sweep among the runs"
    figure, panels = _per_collective(rows)
    for axis, collective, mine in panels:
        for run, group in mine.groupby("run", sort=False):
            single_size = group.groupby(["impl", "backend", "dtype", "op", "inplace"])["size_bytes"].nunique().max() < 2
            fits = {} if single_size else {(fit.impl, fit.backend, fit.dtype, fit.op, fit.inplace): fit
                                          for fit in fit_results(group)}  # a single size has no line to fit
            for (impl, backend, dtype, op, inplace), line in group.groupby(
                    ["impl", "backend", "dtype", "op", "inplace"], sort=False):
                line = line.sort_values("size_bytes")
                prefix = f"{run}: " if rows["run"].nunique() > 1 else ""
                points = axis.plot(line["size_bytes"], line["time_us_p50"], "o",
                                   label=f"{prefix}{impl} {backend} {dtype}")[0]
                fit = fits.get((impl, backend, dtype, op, inplace))
                if fit is not None and fit.algbw_gbps > 0 and fit.alpha_us > 0:
                    sizes = np.geomspace(line["size_bytes"].min(), line["size_bytes"].max(), 50)
                    axis.plot(sizes, fit.alpha_us + sizes / (fit.algbw_gbps * 1e3), "-", color=points.get_color(),
                              label=f"  fit α={fit.alpha_us:.1f} µs, algbw={fit.algbw_gbps:.2f} GB/s")
        axis.set_yscale("log")
        _size_axis(axis, title=f"{collective}: time p50 and the α–β fit t = α + S / algbw", ylabel="time (µs)",
                   fontsize=7)
    figure.tight_layout()
    return figure, None


def ring_vs_builtin(runs: list[LoadedRun]):
    rows = _collective_rows(runs)
    if rows.empty:
        return None, "no collective sweep among the runs"
    keys = ["run", "collective", "backend", "dtype", "op", "inplace", "size_bytes"]
    ring = rows[rows["impl"] == "ring"].set_index(keys)["busbw_gbps"]
    builtin = rows[rows["impl"] == "builtin"].set_index(keys)["busbw_gbps"]
    ratio = (ring / builtin).dropna()
    if ratio.empty:
        return None, "no collective was measured with both the ring and the builtin implementation"
    figure, axis = plt.subplots(figsize=(8, 3.5))
    frame = ratio.rename("ratio").reset_index()
    for (run, collective, dtype), line in frame.groupby(["run", "collective", "dtype"], sort=False):
        line = line.sort_values("size_bytes")
        prefix = f"{run}: " if frame["run"].nunique() > 1 else ""
        axis.plot(line["size_bytes"], line["ratio"], marker="o", label=f"{prefix}{collective} {dtype}")
    axis.axhline(1.0, color="grey", linewidth=1)
    _size_axis(axis, title="ring / builtin busbw (above 1: the hand-written ring is faster)", ylabel="ratio")
    figure.tight_layout()
    return figure, None


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


def ddp_buckets(runs: list[LoadedRun]):
    sweeps = _training_rows(runs, ("ddp",))
    if not sweeps:
        return None, "no DDP sweep (commbench ddp) among the runs"
    figure, axes = plt.subplots(len(sweeps), 1, figsize=(9, 3.8 * len(sweeps)), squeeze=False)
    for axis, (name, frame) in zip(axes[:, 0], sweeps):
        frame = frame.sort_values(["bucket_cap_mb", "config_index"]).reset_index(drop=True)
        _stacked_step_bars(axis, frame, short_labels(frame), f"{name}: DDP step time by bucket size")
    figure.tight_layout()
    return figure, None


def strategy_steps_and_memory(runs: list[LoadedRun]):
    sweeps = _training_rows(runs, ("fsdp", "strategy"))
    if not sweeps:
        return None, "no FSDP or strategy sweep (commbench fsdp / zero) among the runs"
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


def model_state_vs_prediction(runs: list[LoadedRun]):
    sweeps = _training_rows(runs, ("ddp", "fsdp", "strategy"))
    if not sweeps:
        return None, "no training sweep among the runs"
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


# (file stem, caption, function), in report order
PLOTS = [
    ("busbw_vs_size", "Bus bandwidth vs message size", busbw_vs_size),
    ("latency_fit", "Latency vs message size with the α–β fit", latency_with_fit),
    ("ring_vs_builtin", "Ring / builtin busbw ratio", ring_vs_builtin),
    ("ddp_buckets", "DDP: step time by bucket size, exposed communication stacked", ddp_buckets),
    ("strategy_steps_memory", "FSDP / strategies: step time, exposed communication, peak memory",
     strategy_steps_and_memory),
    ("model_state", "Model state per rank: measured vs predicted", model_state_vs_prediction),
]
