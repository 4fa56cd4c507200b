"""Columns more than one bench kind writes, with one meaning in each: the stamp every row and sample carries, where
it ran, the time statistics and bandwidths, the check, and the expected bandwidth."""

from commbench.schema.column import Column

SCHEMA_VERSION = Column("schema_version", "int", "Version of the file layout the row was written in (commbench "
                        "refuses newer ones).")
RUN_ID = Column("run_id", "str", "The run folder's name (suite-run/bench for a bench of a suite).")
BENCH = Column("bench", "str", "The bench kind that wrote the row (collective, ddp, fsdp, strategy, p2p, hunt, "
               "replay).")
BACKEND = Column("backend", "str", "The torch.distributed backend: nccl or gloo.")
DEVICE = Column("device", "str", "Where the tensors live: cuda or cpu.")
WORLD_SIZE = Column("world_size", "int", "Ranks in the job.")
SIZE_BYTES = Column("size_bytes", "int", "The message size: bytes of the collective's buffer as nccl-tests counts "
                    "them (its total over the sequence for replay's sequence row).", unit="bytes")
DTYPE = Column("dtype", "str", "Element type of the message (float32, bfloat16, ...).")
ITERS = Column("iters", "int", "Timed samples behind the statistics.")
WARMUP = Column("warmup", "int", "Untimed iterations before timing.")

TIME_US_P50 = Column("time_us_p50", "float", "Median time per call over the samples.", unit="us")
TIME_US_P95 = Column("time_us_p95", "float", "95th percentile of the time per call.", unit="us")
TIME_US_MIN = Column("time_us_min", "float", "Fastest sample's time per call.", unit="us")
TIME_US_CI_LO = Column("time_us_ci_lo", "float", "Lower end of the 95 % confidence interval of the median.",
                       unit="us")
TIME_US_CI_HI = Column("time_us_ci_hi", "float", "Upper end of the 95 % confidence interval of the median.",
                       unit="us")
TIME_US_P10 = Column("time_us_p10", "float", "10th percentile of the time per exchange (--statistic p10 takes its "
                     "figures from it).", unit="us")
STATISTIC = Column("statistic", "str", "Which time the bandwidth comes from: p50 (median) or p10.")
ALGBW_GBPS = Column("algbw_gbps", "float", "Algorithm bandwidth: size_bytes / time_us_p50.", unit="GB/s")
BUSBW_GBPS = Column("busbw_gbps", "float", "Bus bandwidth: algbw × the collective's bus factor (nccl-tests' "
                    "busbw), comparable across world sizes.", unit="GB/s")
N_WRONG = Column("n_wrong", "int", "What the correctness check found wrong: wrong elements (collectives), failed "
                 "ranks (training); empty where nothing was checked.")
NOTE = Column("note", "str", "What was measured differently from what was asked, or why nothing was.")
TIMING_METHOD = Column("timing_method", "str", "How the time was taken (the clock, and for batch timing the calls per "
                       "sample and how ranks were combined).")

ITERATION = Column("iteration", "int", "The sample's index within its point.")
TIME_US = Column("time_us", "float", "One sample's time per call.", unit="us")

EXPECTED_BUSBW_GBPS = Column("expected_busbw_gbps", "float", "The busbw the machine's topology allows at large "
                             "messages (commbench expect); empty where there is none.", unit="GB/s")
EXPECTED_BASIS = Column("expected_basis", "str", "What expected_busbw_gbps rests on, or why there is none.")
EXPECTED_COLUMNS = (EXPECTED_BUSBW_GBPS, EXPECTED_BASIS)
"""The columns every kind that stores busbw adds to its rows (older runs lack them: they read as empty)."""

STAMP = (SCHEMA_VERSION, RUN_ID)
"""What every row and sample starts with."""
SAMPLE_TIMES = (ITERATION, TIME_US)
"""A sample's own columns after its row's keys, for the kinds that time calls."""
