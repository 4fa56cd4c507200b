"""`commbench p2p`'s rows (one per ordered rank pair and size) and its rank × rank matrix files."""

from pathlib import Path

from commbench.cluster.matrix_files import matrix_csv, write_file
from commbench.expect.rows import ACROSS_NODES, SAME_NODE, RunExpectation
from commbench.expect.rows import COLUMNS as EXPECTED_COLUMNS
from commbench.measure.bandwidth import busbw_gbps
from commbench.measure.stats import summarize
from commbench.store import SCHEMA_VERSION

KEY_COLUMNS = ("bench", "src", "dst", "size_bytes")
RESULT_COLUMNS = ("schema_version", "run_id", *KEY_COLUMNS, "src_node", "dst_node", "same_node", "schedule",
                  "backend", "device", "world_size", "iters", "time_us_p50", "time_us_p95", "time_us_min",
                  "time_us_ci_lo", "time_us_ci_hi", "time_us_p10", "statistic", "busbw_gbps", "n_wrong",
                  *EXPECTED_COLUMNS)
REQUIRED_COLUMNS = RESULT_COLUMNS[:-len(EXPECTED_COLUMNS)]
SAMPLE_COLUMNS = ("schema_version", "run_id", *KEY_COLUMNS, "iteration", "time_us")
def time_column(statistic: str) -> str:
    """The time column the figures come from: time_us_p50 (median) or time_us_p10."""
    return "time_us_p10" if statistic == "p10" else "time_us_p50"


def pair_row(spec, layout, source: int, destination: int, size: int, timed) -> dict:
    """busbw = bytes sent / time (one way: what nvbandwidth and nccl-tests' sendrecv report per direction), the time
    being the median or the 10th percentile of the samples (--statistic)."""
    import numpy as np

    summary = summarize(timed.samples_s)
    p10 = float(np.percentile(timed.samples_s, 10))
    row = {"schema_version": SCHEMA_VERSION, "run_id": "", "bench": "p2p", "src": source, "dst": destination,
           "size_bytes": size, "src_node": layout.node_of(source), "dst_node": layout.node_of(destination),
           "schedule": spec.schedule, "backend": spec.backend, "device": spec.device,
           "world_size": sum(len(members) for members in layout.ranks.values()), "iters": summary.n,
           "time_us_p50": summary.p50 * 1e6, "time_us_p95": summary.p95 * 1e6, "time_us_min": summary.min * 1e6,
           "time_us_ci_lo": summary.ci_lo * 1e6, "time_us_ci_hi": summary.ci_hi * 1e6, "time_us_p10": p10 * 1e6,
           "statistic": spec.statistic, "busbw_gbps": busbw_gbps(size, p10 if spec.statistic == "p10" else summary.p50,
                                                                  1.0), "n_wrong": timed.n_wrong}
    row["same_node"] = row["src_node"] == row["dst_node"]
    row.update(RunExpectation(spec.expectation).columns(SAME_NODE if row["same_node"] else ACROSS_NODES))
    row["_samples"] = [{"schema_version": SCHEMA_VERSION, **{key: row[key] for key in KEY_COLUMNS},
                        "iteration": index, "time_us": value * 1e6} for index, value in enumerate(timed.samples_s)]
    return row


def matrix_file(column: str, size: int) -> str:
    return f"p2p_matrix_{column}_{size}B.csv"


def write_matrices(run_dir: Path, rows: list[dict], world: int, size: int, statistic: str) -> None:
    """src down, dst across (row i, column j: rank i sending to rank j); the diagonal is empty."""
    for column in ("busbw_gbps", time_column(statistic)):
        grid: list[list[float | None]] = [[None] * world for _ in range(world)]
        for row in rows:
            grid[row["src"]][row["dst"]] = row[column]
        write_file(Path(run_dir) / matrix_file(column, size),
                   matrix_csv(list(range(world)), grid, f"src \\ dst ({column})"))
