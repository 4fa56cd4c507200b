"""`commbench sweep`'s files (bench kind collective): results.csv (one row per collective × impl × dtype × op ×
placement × size × timing mode × environment), samples.csv, gpu_samples.csv and iteration_times.csv. Rows imported
from other tools (commbench import) have the same columns."""

from commbench.schema import gpu
from commbench.schema.column import Column, without
from commbench.schema.common import (
    ALGBW_GBPS,
    BACKEND,
    BENCH,
    BUSBW_GBPS,
    DEVICE,
    DTYPE,
    EXPECTED_BASIS,
    EXPECTED_BUSBW_GBPS,
    ITERATION,
    ITERS,
    N_WRONG,
    NOTE,
    RUN_ID,
    SAMPLE_TIMES,
    SIZE_BYTES,
    STAMP,
    TIME_US,
    TIME_US_CI_HI,
    TIME_US_CI_LO,
    TIME_US_MIN,
    TIME_US_P50,
    TIME_US_P95,
    TIMING_METHOD,
    WARMUP,
    WORLD_SIZE,
)

COLLECTIVE = Column("collective", "str", "The collective: all_reduce, reduce_scatter, all_gather, broadcast, reduce, "
                    "all_to_all, sendrecv (an imported row may name the source's own).")
IMPL = Column("impl", "str", "builtin (the backend's own collective) or ring (commbench's, over send/recv).")
OP = Column("op", "str", "The reduction (sum, prod, max, min, avg); none for collectives that reduce nothing.")
INPLACE = Column("inplace", "bool", "Whether the output buffer is the input (in place).")
TIMING = Column("timing", "str", "The timing mode: batch (nccl-tests' method) or per-iteration.")
ENV = Column("env", "str", "The --env-axis combination's label (NAME=value,...); empty without --env-axis.")
COUNT = Column("count", "int", "Elements per rank of the message, as nccl-tests' count column.")
STOP_REASON = Column("stop_reason", "str", "Why sampling stopped: iters, target_ci or max_time.")
TIME_US_MEAN = Column("time_us_mean", "float", "Mean time per call over the samples.", unit="us")
TIME_US_STDEV = Column("time_us_stdev", "float", "Standard deviation of the time per call.", unit="us")
BYTES_SENT_PER_RANK = Column("bytes_sent_per_rank", "float", "Bytes each rank sends per call.", unit="bytes")
BYTES_SOURCE = Column("bytes_source", "str", "Where bytes_sent_per_rank comes from: model (the algorithm's count) "
                      "or the ring's own count.")
RING_CHUNKS = Column("ring_chunks", "int", "The ring's pieces in flight per step (--ring-chunks); empty for builtin.")
CALLS_PER_SAMPLE = Column("calls_per_sample", "int", "Calls behind one sample: 1 per-iteration, the batch's calls "
                          "under batch timing.")
TIME_US_MAX = Column("time_us_max", "float", "Slowest sample's time per call.", unit="us")
TIME_US_P75 = Column("time_us_p75", "float", "75th percentile of the time per call (PARAM imports print it).",
                     unit="us")
SOURCE = Column("source", "str", "Who measured the row: commbench, or the tool an import came from.")
SOURCE_FILE = Column("source_file", "str", "An imported row's file.")
BUSBW_CHECK = Column("busbw_check", "str", "An imported row: whether its printed busbw follows from its size and "
                     "time.")
ROOT = Column("root", "int", "The root rank of broadcast and reduce; -1 for the others (as nccl-tests prints).")
ISSUE_US_PER_CALL = Column("issue_us_per_call", "float", "The host's time to issue one call (the slowest rank's).",
                           unit="us")
SPIN_COVERED = Column("spin_covered", "bool", "Whether the spin ahead of the calls outlasted their issue.")
HOST_BOUND = Column("host_bound", "str", "yes where the host could not stay ahead of the device, not applicable "
                    "where nothing runs ahead of the host (gloo), empty where not recorded.")
BATCH = Column("batch", "int", "The batch (sample) an iteration belongs to.")
RANK = Column("rank", "int", "The rank whose time it is.")

KEY_COLUMNS = (BENCH, COLLECTIVE, IMPL, BACKEND, DEVICE, WORLD_SIZE, DTYPE, OP, INPLACE, SIZE_BYTES, TIMING, ENV)
"""One row per collective × impl × dtype × op × placement × size × timing mode × environment combination (and where
it ran); env is the combination's label (commbench/sweep/env_axes.py), "" without --env-axis."""
RESULT_COLUMNS = (*STAMP, *KEY_COLUMNS, COUNT, ITERS, WARMUP, STOP_REASON, TIME_US_P50, TIME_US_P95, TIME_US_MIN,
                  TIME_US_MEAN, TIME_US_STDEV, TIME_US_CI_LO, TIME_US_CI_HI, ALGBW_GBPS, BUSBW_GBPS,
                  BYTES_SENT_PER_RANK, BYTES_SOURCE, RING_CHUNKS, N_WRONG, CALLS_PER_SAMPLE, TIMING_METHOD, NOTE,
                  *gpu.SUMMARY_COLUMNS, TIME_US_MAX, TIME_US_P75, SOURCE, SOURCE_FILE, BUSBW_CHECK, ROOT,
                  EXPECTED_BUSBW_GBPS, EXPECTED_BASIS, ISSUE_US_PER_CALL, SPIN_COVERED, HOST_BOUND)
"""results.csv, in file order."""
REQUIRED_COLUMNS = without(RESULT_COLUMNS, (
    RUN_ID, TIMING, ENV, STOP_REASON, TIME_US_STDEV, BYTES_SENT_PER_RANK, BYTES_SOURCE, RING_CHUNKS,
    *RESULT_COLUMNS[RESULT_COLUMNS.index(CALLS_PER_SAMPLE):]))
"""A results file must have these; columns added later (ring bytes, GPU sampling, timing, env...) are filled in when
absent."""
SAMPLE_COLUMNS = (*STAMP, *KEY_COLUMNS, *SAMPLE_TIMES)
ITERATION_COLUMNS = (*STAMP, *KEY_COLUMNS, BATCH, RANK, ITERATION, TIME_US)
"""--iteration-times: each rank's time per call in each iteration of each batch (nccl-tests -I 1)."""
GPU_SAMPLE_COLUMNS = (*STAMP, *KEY_COLUMNS, *gpu.SAMPLE_FIELDS)
