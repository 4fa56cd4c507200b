"""`commbench replay`'s files: results.csv, a row per call group (the calls of one kind, size and dtype in the traced
step) and one for the whole sequence; samples.csv, every replayed call's time."""

from commbench.schema.column import Column, without
from commbench.schema.common import (
    ALGBW_GBPS,
    BACKEND,
    BENCH,
    BUSBW_GBPS,
    DEVICE,
    DTYPE,
    EXPECTED_COLUMNS,
    ITERS,
    N_WRONG,
    NOTE,
    SAMPLE_TIMES,
    SIZE_BYTES,
    STAMP,
    TIME_US_CI_HI,
    TIME_US_CI_LO,
    TIME_US_MIN,
    TIME_US_P50,
    TIME_US_P95,
    TIMING_METHOD,
    WORLD_SIZE,
)

KIND = Column("kind", "str", "The call group's collective, or sequence for the whole step.")
TRACED_WORLD_SIZE = Column("traced_world_size", "int", "Ranks of the traced job.")
SCALED = Column("scaled", "bool", "Whether the trace was replayed at another world size (--scale-world).")
STEP = Column("step", "int", "The traced step replayed.")
CALLS = Column("calls", "int", "Calls in the group (in the step, for the sequence).")
TIME_US_TRACED_P50 = Column("time_us_traced_p50", "float", "Median traced time of the group's calls (the "
                            "sequence's traced span).", unit="us")
BUSBW_GBPS_TRACED = Column("busbw_gbps_traced", "float", "busbw of the traced time.", unit="GB/s")
REPLAYED_VS_TRACED = Column("replayed_vs_traced", "float", "Replayed median time / traced time.")
GAPS_US = Column("gaps_us", "float", "The sequence row: time between calls kept from the trace.", unit="us")

KEY_COLUMNS = (BENCH, KIND, SIZE_BYTES, DTYPE)
RESULT_COLUMNS = (*STAMP, *KEY_COLUMNS, BACKEND, DEVICE, WORLD_SIZE, TRACED_WORLD_SIZE, SCALED, STEP, CALLS, ITERS,
                  TIME_US_TRACED_P50, TIME_US_P50, TIME_US_P95, TIME_US_MIN, TIME_US_CI_LO, TIME_US_CI_HI, ALGBW_GBPS,
                  BUSBW_GBPS, BUSBW_GBPS_TRACED, REPLAYED_VS_TRACED, GAPS_US, N_WRONG, TIMING_METHOD, NOTE,
                  *EXPECTED_COLUMNS)
"""results.csv, in file order."""
REQUIRED_COLUMNS = without(RESULT_COLUMNS, (TIMING_METHOD, *EXPECTED_COLUMNS))
"""A results file must have these; timing_method and the expected busbw read as empty where a run has none."""
SAMPLE_COLUMNS = (*STAMP, *KEY_COLUMNS, *SAMPLE_TIMES)
