"""`commbench p2p`'s files: results.csv, a row per ordered rank pair and size; samples.csv, each pair's transfer
times."""

from commbench.schema.column import Column, without
from commbench.schema.common import (
    BACKEND,
    BENCH,
    BUSBW_GBPS,
    DEVICE,
    EXPECTED_COLUMNS,
    ITERS,
    N_WRONG,
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

SRC = Column("src", "int", "The sending rank.")
DST = Column("dst", "int", "The receiving rank.")
SRC_NODE = Column("src_node", "str", "The sending rank's node.")
DST_NODE = Column("dst_node", "str", "The receiving rank's node.")
SAME_NODE = Column("same_node", "bool", "Whether both ranks are on one node.")
SCHEDULE = Column("schedule", "str", "How pairs were scheduled (one pair at a time, or rounds of disjoint pairs).")

KEY_COLUMNS = (BENCH, SRC, DST, SIZE_BYTES)
RESULT_COLUMNS = (*STAMP, *KEY_COLUMNS, SRC_NODE, DST_NODE, SAME_NODE, SCHEDULE, BACKEND, DEVICE, WORLD_SIZE, ITERS,
                  TIME_US_P50, TIME_US_P95, TIME_US_MIN, TIME_US_CI_LO, TIME_US_CI_HI, TIME_US_P10, STATISTIC,
                  BUSBW_GBPS, N_WRONG, *EXPECTED_COLUMNS)
"""results.csv, in file order. busbw_gbps is bytes sent / time, one way."""
REQUIRED_COLUMNS = without(RESULT_COLUMNS, EXPECTED_COLUMNS)
SAMPLE_COLUMNS = (*STAMP, *KEY_COLUMNS, *SAMPLE_TIMES)
