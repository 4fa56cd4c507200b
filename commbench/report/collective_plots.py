"""The report's figures of collective sweeps (bench kind `collective`). Each takes the loaded runs of that kind and
returns (figure, None) or (None, why it was skipped)."""

import matplotlib

matplotlib.use("Agg")  # files only: no display on CI machines or cluster nodes

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from commbench.models.alpha_beta import fit_results  # noqa: E402


def _rows(runs) -> pd.DataFrame:
    return pd.concat([run.results.assign(run=run.name) for run in runs], ignore_index=True)


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


def busbw_vs_size(runs: list):
    rows = _rows(runs)
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


def latency_with_fit(runs: list):
    rows = _rows(runs)
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


def ring_vs_builtin(runs: list):
    rows = _rows(runs)
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


