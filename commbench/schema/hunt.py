"""`commbench hunt`'s files: results.csv, a row per measurement (intra-node all_reduce, pair bandwidth and latency,
first and second pass) and a row per finding; samples.csv, each measurement's exchange times."""

from commbench.schema.column import Column, without
from commbench.schema.common import (
    BACKEND,
    BENCH,
    BUSBW_GBPS,
    DEVICE,
    EXPECTED_COLUMNS,
    ITERS,
    N_WRONG,
    NOTE,
    SAMPLE_TIMES,
    SIZE_BYTES,
    STAMP,
    STATISTIC,
    TIME_US_CI_HI,
    TIME_US_CI_LO,
    TIME_US_MIN,
    TIME_US_P10,
    TIME_US_P50,
    TIME_US_P95,
    WORLD_SIZE,
)

HUNT_FILE = "hunt.json"
"""The hunt's own document beside results.csv: suspects, tests and figures (cluster/hunt_rows.py writes it)."""

PHASE = Column("phase", "str", "intra (each node's all_reduce), pairs (first pass), second_pass, finding or note.")
TEST = Column("test", "str", "What was measured: all_reduce, bandwidth, latency; a finding's node, link or all.")
NODE_A = Column("node_a", "str", "The node (or the pair's first node, in sorted order).")
NODE_B = Column("node_b", "str", "The pair's second node; empty for one node.")
RANKS_A = Column("ranks_a", "str", "node_a's ranks.")
RANKS_B = Column("ranks_b", "str", "node_b's ranks.")
LANES = Column("lanes", "int", "Rank pairs exchanging at once between the two nodes (ranks, for all_reduce).")
LATENCY_US = Column("latency_us", "float", "A latency test's time per exchange.", unit="us")
VERDICT = Column("verdict", "str", "A finding's word: suspect, cleared, healthy; control for a second pass's "
                 "control pair.")

KEY_COLUMNS = (BENCH, PHASE, TEST, NODE_A, NODE_B, SIZE_BYTES)
RESULT_COLUMNS = (*STAMP, *KEY_COLUMNS, RANKS_A, RANKS_B, LANES, BACKEND, DEVICE, WORLD_SIZE, ITERS, TIME_US_P50,
                  TIME_US_P95, TIME_US_MIN, TIME_US_CI_LO, TIME_US_CI_HI, TIME_US_P10, STATISTIC, BUSBW_GBPS,
                  LATENCY_US, N_WRONG, VERDICT, NOTE, *EXPECTED_COLUMNS)
"""results.csv, in file order."""
REQUIRED_COLUMNS = without(RESULT_COLUMNS, EXPECTED_COLUMNS)
SAMPLE_COLUMNS = (*STAMP, *KEY_COLUMNS, *SAMPLE_TIMES)
