"""The names a user chooses from (backends, devices, dtypes, reductions, placements, implementations).

Plain strings, no torch: the command line and suites list and check them without loading torch; the modules that run
them map the names to torch objects (commbench/backends.py).
"""

NCCL, GLOO = "nccl", "gloo"
CUDA, CPU = "cuda", "cpu"
AUTO = "auto"
BACKENDS = (NCCL, GLOO)
DEVICES = (CUDA, CPU)
BACKEND_CHOICES = (AUTO, *BACKENDS)
DEVICE_CHOICES = (AUTO, *DEVICES)

DTYPES = ("float32", "float64", "bfloat16", "float16", "int32", "int64", "int8", "uint8", "float8_e4m3", "float8_e5m2")
"""float8_e4m3 is torch.float8_e4m3fn (nccl-tests' f8e4m3); the fp8 types run on NCCL 2.24+ only."""
UNREDUCED_DTYPES = {"uint32": "int32 or int64", "uint64": "int64"}
"""nccl-tests types that torch has (torch.uint32, torch.uint64) and neither of its backends runs: ProcessGroupNCCL's
type table and gloo's lack them. --dtype takes their names only to refuse them with the reason and what to use."""
DTYPE_CHOICES = (*DTYPES, *UNREDUCED_DTYPES)
"""What --dtype accepts: the dtypes that run, and those refused by name (UNREDUCED_DTYPES)."""
REDUCE_OPS = ("sum", "prod", "max", "min", "avg")
NO_OP = "none"
"""The op column of collectives that do not reduce, as nccl-tests prints it."""
GLOO_CUDA_COLLECTIVES = ("all_reduce", "broadcast")
"""The only collectives gloo runs on CUDA tensors (PyTorch's backend table in the torch.distributed documentation)."""
PLACEMENTS = {"out": (False,), "in": (True,), "both": (False, True)}
"""--placement: which of out-of-place (False) and in-place (True) buffers to measure."""
PER_ITERATION, BATCH = "per-iteration", "batch"
TIMINGS = (PER_ITERATION, BATCH)
"""The timing modes of a row (its `timing` column): a barrier before every timed call (per-call distribution), or
nccl-tests' back-to-back batches."""
TIMING_CHOICES = (*TIMINGS, AUTO)
"""What --timing takes: a mode, or auto (per point, from 5 calls after the warm-up: commbench/measure/timing.py)."""
RANK0, MEAN, MIN, MAX = "rank0", "mean", "min", "max"
RANK_AVERAGES = (RANK0, MEAN, MIN, MAX)
"""How batch timing combines the ranks' times per call (nccl-tests -a 0/1/2/3): rank 0's, the mean, the fastest
rank's or the slowest rank's."""
BLOCKING_MODES = (0, 1, 2, 3)
"""Batch timing's waits inside a batch (nccl-tests -z): 0 none; 1 wait for the device and a barrier after each
iteration; 2 the wait only; 3 the wait and a barrier after each iteration, the barrier's time not counted."""
STOP_ITERS = "iters"  # stop_reason: the fixed number of iterations ran
STOP_CI = "ci"  # adaptive: the median's confidence interval reached the target
STOP_MAX_TIME = "max_time"  # adaptive: the time budget of the point was spent first
BUILTIN = "builtin"
"""The backend's own collective (torch.distributed's call), as opposed to commbench's ring over send/recv."""
IMPLEMENTATIONS = (BUILTIN, "ring")
"""builtin: the backend's own collective; ring: the hand-written ring over send/recv (collectives/ring.py)."""
BIND_CORES_ENV = "COMMBENCH_BIND_CORES"
"""--bind-cores: the cores of a launch's local ranks, comma-separated, by local rank (set by the launcher, read by
rank.py)."""

COMMBENCH_SOURCE = "commbench"
"""The source column of rows commbench measured; an imported row names its tool (commbench import)."""
