"""`commbench p2p`'s terminal tables (a rank × rank matrix per size) and the report's key numbers."""

import pandas as pd

from commbench.cluster.p2p_rows import time_column
from commbench.expect.rows import expected_lines
from commbench.schema import common, p2p
from commbench.units import format_bytes


def matrix(results: pd.DataFrame, size: int, column: str) -> pd.DataFrame:
    """src down, dst across; labels "rank (node)"."""
    rows = results[results[common.SIZE_BYTES] == size]
    nodes = dict(zip(rows["src"], rows["src_node"])) | dict(zip(rows["dst"], rows["dst_node"]))
    ranks = sorted(nodes)
    grid = rows.pivot_table(index="src", columns="dst", values=column, aggfunc="first").reindex(index=ranks,
                                                                                               columns=ranks)
    labels = {rank: f"{rank} ({nodes[rank]})" for rank in ranks}
    grid = grid.rename(index=labels, columns=labels)
    grid.index.name, grid.columns.name = "src \\ dst", None
    return grid


def asymmetry_pct(results: pd.DataFrame, size: int) -> float:
    """The largest |busbw(i→j) / busbw(j→i) − 1| in percent: a clean transport is symmetric within noise."""
    rows = results[results[common.SIZE_BYTES] == size]
    busbw = {(src, dst): value for src, dst, value in zip(rows["src"], rows["dst"], rows[common.BUSBW_GBPS])}
    ratios = [abs(value / busbw[(dst, src)] - 1) * 100 for (src, dst), value in busbw.items() if (dst, src) in busbw]
    return max(ratios) if ratios else float("nan")


def format_table(results: pd.DataFrame) -> str:
    sizes = sorted(results[common.SIZE_BYTES].unique())
    lines = []
    for size in sizes:
        lines += [f"# busbw (GB/s) at {format_bytes(int(size))}, src → dst; largest asymmetry i→j vs j→i "
                  f"{asymmetry_pct(results, size):.0f} %",
                  matrix(results, size, common.BUSBW_GBPS).to_string(na_rep="-", float_format=lambda v: f"{v:.4g}"), ""]
    smallest = sizes[0]
    column = time_column(str(results["statistic"].iloc[0]))
    lines += [f"# time {column.rsplit('_', 1)[1]} (µs) at {format_bytes(int(smallest))}, src → dst",
              matrix(results, smallest, column).to_string(na_rep="-", float_format=lambda v: f"{v:.4g}")]
    lines += expected_lines(results)
    wrong = int(results[common.N_WRONG].fillna(0).sum())
    if wrong:
        lines.append(f"# WRONG: {wrong} byte(s) received were not the sender's (see n_wrong)")
    return "\n".join(lines)


def key_numbers(results: pd.DataFrame) -> pd.DataFrame:
    grouped = results.groupby([common.SIZE_BYTES, p2p.SAME_NODE], sort=True)
    busbw = common.BUSBW_GBPS
    table = grouped.agg(**{"pairs": (busbw, "count"), "min busbw (GB/s)": (busbw, "min"),
                           "median busbw (GB/s)": (busbw, "median"), "max busbw (GB/s)": (busbw, "max"),
                           "median time (µs)": (common.TIME_US_P50, "median"),
                           "#wrong": (common.N_WRONG, "sum")}).round(4)
    table = table.reset_index()
    table[common.SIZE_BYTES] = [format_bytes(int(size)) for size in table[common.SIZE_BYTES]]
    return table.rename(columns={common.SIZE_BYTES: "size", "same_node": "within a node"})
