"""The replay's figure: each call group's replayed time against its traced time (log-log, the diagonal where they
agree), one marker per kind."""

import matplotlib

from commbench.schema import common

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from commbench.replay.rows import SEQUENCE
from commbench.report.figure_layout import Drawn
from commbench.runs import LoadedRun
from commbench.units import format_bytes


def traced_vs_replayed(runs: list[LoadedRun]) -> Drawn:
    figure, axis = plt.subplots(figsize=(7, 5.5))
    everything = []
    for run in runs:
        rows = run.results[run.results["kind"] != SEQUENCE]
        for kind, group in rows.groupby("kind", sort=False):
            traced, replayed = group["time_us_traced_p50"].to_numpy(float), group[common.TIME_US_P50].to_numpy(float)
            label = f"{run.name}: {kind}" if len(runs) > 1 else kind
            axis.scatter(traced, replayed, label=label, s=40)
            for x, y, size in zip(traced, replayed, group[common.SIZE_BYTES]):
                axis.annotate(format_bytes(int(size)), (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
            everything += [*traced, *replayed]
    values = np.array([value for value in everything if value > 0])
    if values.size == 0:
        plt.close(figure)
        return None, "no call group with a time above 0"
    low, high = values.min() / 1.5, values.max() * 1.5
    axis.plot([low, high], [low, high], color="grey", linewidth=1, label="replayed = traced")
    axis.set_xscale("log")
    axis.set_yscale("log")
    axis.set_xlabel("traced time per call, median (us)")
    axis.set_ylabel("replayed time per call, median (us)")
    axis.set_title("replay: traced vs replayed, per call group (kind, size)")
    axis.grid(True, which="both", alpha=0.3)
    axis.legend(fontsize=8)
    figure.tight_layout()
    return figure, None
