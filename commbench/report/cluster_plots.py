"""The report's figures of cluster acceptance runs: hunt's node × node matrices with its suspects marked, and p2p's
rank × rank matrices with the node boundaries drawn. Each takes the loaded runs of its kind and returns (figure,
None) or (None, why it was skipped); the last run of the kind is drawn (a matrix does not overlay)."""

import matplotlib

from commbench.schema import common

matplotlib.use("Agg")  # files only: no display on CI machines or cluster nodes

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes

from commbench.cluster.hunt_table import node_matrix
from commbench.cluster.p2p_rows import time_column
from commbench.cluster.p2p_table import matrix
from commbench.report.figure_layout import Drawn
from commbench.runs import LoadedRun
from commbench.units import format_bytes


def _heatmap(axis: Axes, grid: pd.DataFrame, title: str, unit: str, *, higher_is_better: bool) -> None:
    values = grid.to_numpy(dtype=float)
    # dark = slow either way: bandwidth low or latency high
    image = axis.imshow(np.ma.masked_invalid(values), cmap="viridis" if higher_is_better else "viridis_r")
    axis.figure.colorbar(image, ax=axis, label=unit, shrink=0.8)
    labels = [str(label) for label in grid.index]
    axis.set_xticks(range(len(labels)), labels, rotation=90 if len(labels) > 8 else 0, fontsize=8)
    axis.set_yticks(range(len(labels)), labels, fontsize=8)
    axis.set_title(title, fontsize=10)
    if len(labels) <= 16:  # the figure itself, where it can be read
        for (row, column), value in np.ndenumerate(values):
            if np.isfinite(value):
                axis.text(column, row, f"{value:.3g}", ha="center", va="center", fontsize=7, color="white")


def hunt_node_matrix(runs: list[LoadedRun]) -> Drawn:
    run = runs[-1]
    busbw, latency = node_matrix(run.results, common.BUSBW_GBPS), node_matrix(run.results, "latency_us")
    if busbw is None or latency is None:
        return None, f"{run.name} has no node pairs (one node)"
    grids = [(busbw, "pair busbw (nccl-tests sendrecv)", "GB/s", True), (latency, "pair latency", "µs", False)]
    figure, axes = plt.subplots(1, 2, figsize=(12, 5.2))
    suspects = run.results[(run.results["phase"] == "finding") & (run.results["verdict"] == "suspect")]
    for axis, (grid, title, unit, up) in zip(axes, grids):
        _heatmap(axis, grid, f"{run.name}: {title}", unit, higher_is_better=up)
        names = list(grid.index)
        for _, row in suspects.iterrows():  # a suspect node's row and column, a suspect link's two cells, in red
            if row["test"] == "node" and row["node_a"] in names:
                at = names.index(row["node_a"])
                axis.add_patch(plt.Rectangle((-0.5, at - 0.5), len(names), 1, fill=False, edgecolor="red", lw=2))
                axis.add_patch(plt.Rectangle((at - 0.5, -0.5), 1, len(names), fill=False, edgecolor="red", lw=2))
            elif row["test"] == "link" and {row["node_a"], row["node_b"]} <= set(names):
                a, b = names.index(row["node_a"]), names.index(row["node_b"])
                for x, y in ((a, b), (b, a)):
                    axis.add_patch(plt.Rectangle((x - 0.5, y - 0.5), 1, 1, fill=False, edgecolor="red", lw=2))
    figure.tight_layout()
    return figure, None


def p2p_matrix(runs: list[LoadedRun]) -> Drawn:
    run = runs[-1]
    sizes = sorted(run.results[common.SIZE_BYTES].unique())
    column = time_column(str(run.results["statistic"].iloc[0]))
    panels = [(int(sizes[-1]), common.BUSBW_GBPS, "busbw", "GB/s", True),
              (int(sizes[0]), column, f"time {column.rsplit('_', 1)[1]}", "µs", False)]
    figure, axes = plt.subplots(1, 2, figsize=(12, 5.4))
    for axis, (size, column, title, unit, up) in zip(axes, panels):
        grid = matrix(run.results, size, column)
        _heatmap(axis, grid, f"{run.name}: {title} at {format_bytes(size)} (src ↓, dst →)", unit, higher_is_better=up)
        nodes = [label.rsplit(" (", 1)[1].rstrip(")") for label in grid.index]
        for at in range(1, len(nodes)):  # the node boundary: where the next rank sits on another node
            if nodes[at] != nodes[at - 1]:
                axis.axhline(at - 0.5, color="red", lw=1.5)
                axis.axvline(at - 0.5, color="red", lw=1.5)
    figure.tight_layout()
    return figure, None
