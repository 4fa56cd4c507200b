"""`commbench hunt`'s terminal table, suspects first, and the report's key numbers; read from the rows."""

import re

import pandas as pd

from commbench.cluster.hunt_rows import CLEARED, FIRST_PASS, HEALTHY, SUSPECT, matrices
from commbench.expect.rows import expected_lines
from commbench.schema import common, hunt


def format_table(results: pd.DataFrame) -> str:
    lines = []
    findings = results[results["phase"] == "finding"]
    for _, row in findings[findings["verdict"] == SUSPECT].iterrows():
        where = f"{row['node_a']}–{row['node_b']}" if row["test"] == "link" else row["node_a"]
        lines.append(f"# SUSPECT {row['test']} {where}: {row['note']}")
    for _, row in findings[findings["verdict"] == HEALTHY].iterrows():
        lines.append(f"# healthy: {row['note']}")
    for _, row in findings[findings["verdict"] == CLEARED].iterrows():
        where = f"{row['node_a']}–{row['node_b']}" if row["test"] == "link" else row["node_a"]
        lines.append(f"# cleared in the second pass: {row['test']} {where}: {row['note']}")
    for note in results.loc[results["phase"] == "note", "note"]:
        lines.append(f"# note: {note}")
    for column, title in ((common.BUSBW_GBPS, "pair busbw (GB/s, as nccl-tests' sendrecv)"),
                          ("latency_us", "pair latency (µs)")):
        grid = node_matrix(results, column)
        if grid is not None:
            statistic = results.loc[results["phase"] == FIRST_PASS, "statistic"].iloc[0]
            lines += ["", f"# {title} from each pair's {statistic} time, first pass",
                      grid.to_string(na_rep="-", float_format=lambda v: f"{v:.4g}")]
    intra = results[(results["test"] == "all_reduce")]
    if not intra.empty:
        shown = intra[[hunt.PHASE, hunt.NODE_A, hunt.RANKS_A, common.SIZE_BYTES, common.TIME_US_P50,
                       common.BUSBW_GBPS, common.N_WRONG]].rename(
            columns={hunt.NODE_A: "node", hunt.RANKS_A: "ranks", common.SIZE_BYTES: "size (B)",
                     common.TIME_US_P50: "time p50 (µs)", common.BUSBW_GBPS: "busbw (GB/s)", common.N_WRONG: "#wrong"})
        lines += ["", "# intra-node all_reduce", shown.to_string(index=False, float_format=lambda v: f"{v:.4g}")]
    lines += expected_lines(results[results[common.BUSBW_GBPS].notna()])
    wrong = results[results[common.N_WRONG].fillna(0) > 0]
    if not wrong.empty:
        lines.append(f"# WRONG: {len(wrong)} measurement(s) delivered wrong bytes (see #wrong in results.csv)")
    return "\n".join(lines)


def node_matrix(results: pd.DataFrame, column: str) -> pd.DataFrame | None:
    """The first pass's node × node figures (symmetric), nodes in the order of their lowest rank."""
    test = "bandwidth" if column == common.BUSBW_GBPS else "latency"
    pairs = results[(results["phase"] == FIRST_PASS) & (results["test"] == test)]
    if pairs.empty:
        return None
    first_rank: dict[str, int] = {}
    for node_column, ranks_column in (("node_a", "ranks_a"), ("node_b", "ranks_b")):
        for node, ranks in zip(pairs[node_column], pairs[ranks_column]):
            lowest = re.match(r"\d+", str(ranks))  # "0-3", "4", or 4.0 as pandas reads it
            assert lowest is not None  # a first-pass pair row always names its ranks
            first_rank[node] = int(lowest.group())
    nodes = sorted(first_rank, key=first_rank.__getitem__)  # in rank order, as hunt.json lists them
    # the same matrix hunt.json and the CSV files hold, from the same rows
    grid = pd.DataFrame(matrices(pairs.to_dict("records"), nodes)[column], index=nodes, columns=nodes, dtype=float)
    grid.index.name = "node"
    return grid


def key_numbers(results: pd.DataFrame) -> pd.DataFrame:
    findings = results[results["phase"] == "finding"]
    return findings[["test", "node_a", "node_b", "verdict", "note"]].rename(
        columns={"test": "finding", "node_a": "node", "node_b": "other node"})
