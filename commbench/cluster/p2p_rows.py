"""`commbench p2p`'s rows (one per ordered rank pair and size) and its rank × rank matrix files; the time columns
of a timed transfer, which hunt's pair and intra-node rows share."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from commbench.cluster.matrix_files import matrix_csv, write_file
from commbench.cluster.nodes import Layout
from commbench.cluster.specs import P2pSettings, Statistic
from commbench.expect.rows import ACROSS_NODES, SAME_NODE, RunExpectation
from commbench.measure.bandwidth import busbw_gbps
from commbench.measure.stats import summarize
from commbench.schema import common
from commbench.schema import p2p as col
from commbench.schema.p2p import KEY_COLUMNS
from commbench.store import SCHEMA_VERSION

if TYPE_CHECKING:
    from commbench.cluster.exchange import Timed


def time_column(statistic: str) -> str:
    """The time column the figures come from: time_us_p50 (median) or time_us_p10 (a Statistic, or the statistic
    column read back from a results file)."""
    return common.TIME_US_P10 if statistic == "p10" else common.TIME_US_P50


def timed_columns(row: dict, timed: Timed, statistic: Statistic, keys: tuple[str, ...]) -> float:
    """Time statistics of the samples, and the samples themselves keyed by the row's `keys` (kept under _samples
    until they are written); returns the time in seconds the figures come from (the median, or the 10th percentile:
    --statistic)."""
    import numpy as np

    summary = summarize(timed.samples_s)
    p10 = float(np.percentile(timed.samples_s, 10))
    row.update({common.ITERS: summary.n, common.TIME_US_P50: summary.p50 * 1e6, common.TIME_US_P95: summary.p95 * 1e6,
                common.TIME_US_MIN: summary.min * 1e6, common.TIME_US_CI_LO: summary.ci_lo * 1e6,
                common.TIME_US_CI_HI: summary.ci_hi * 1e6, common.TIME_US_P10: p10 * 1e6, common.STATISTIC: statistic,
                common.N_WRONG: timed.n_wrong})
    row["_samples"] = [{common.SCHEMA_VERSION: SCHEMA_VERSION, **{key: row[key] for key in keys},
                        common.ITERATION: index, common.TIME_US: value * 1e6}
                       for index, value in enumerate(timed.samples_s)]
    return p10 if statistic == "p10" else summary.p50


def pair_row(spec: P2pSettings, layout: Layout, source: int, destination: int, size: int, timed: Timed) -> dict:
    """busbw = bytes sent / time (one way: what nvbandwidth and nccl-tests' sendrecv report per direction), the time
    being the median or the 10th percentile of the samples (--statistic)."""
    row: dict[str, object] = {
           common.SCHEMA_VERSION: SCHEMA_VERSION, common.RUN_ID: "", common.BENCH: "p2p", col.SRC: source,
           col.DST: destination, common.SIZE_BYTES: size, col.SRC_NODE: layout.node_of(source),
           col.DST_NODE: layout.node_of(destination), col.SCHEDULE: spec.schedule, common.BACKEND: spec.backend,
           common.DEVICE: spec.device, common.WORLD_SIZE: sum(len(members) for members in layout.ranks.values())}
    row[common.BUSBW_GBPS] = busbw_gbps(size, timed_columns(row, timed, spec.statistic, KEY_COLUMNS), 1.0)
    row[col.SAME_NODE] = row[col.SRC_NODE] == row[col.DST_NODE]
    row.update(RunExpectation(spec.expectation).columns(SAME_NODE if row[col.SAME_NODE] else ACROSS_NODES))
    return row


def matrix_file(column: str, size: int) -> str:
    return f"p2p_matrix_{column}_{size}B.csv"


def write_matrices(run_dir: Path, rows: list[dict], world: int, size: int, statistic: Statistic) -> None:
    """src down, dst across (row i, column j: rank i sending to rank j); the diagonal is empty."""
    for column in (common.BUSBW_GBPS, time_column(statistic)):
        grid: list[list[float | None]] = [[None] * world for _ in range(world)]
        for row in rows:
            grid[row[col.SRC]][row[col.DST]] = row[column]
        write_file(Path(run_dir) / matrix_file(column, size),
                   matrix_csv(list(range(world)), grid, f"src \\ dst ({column})"))
