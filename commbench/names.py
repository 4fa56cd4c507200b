"""commbench's vocabulary, in one place: the names a user chooses from (backends, devices, dtypes, reductions,
placements, implementations), the dtypes' element sizes and their spellings in torch, in profiler traces and in
nccl-tests, the collectives' busbw factors, nccl-tests' names for its tests, types and ops, NCCL's names for its
collectives (NCCL Inspector's labels, kernel names), how a row says each rank average, and DDP's default buckets.

Plain data and small lookups, no torch: the command line, suites and importers list and check them without loading
torch; the modules that run them map the names to torch objects (commbench/backends.py). tests/test_names.py checks
the tables against torch and against the collectives registry.
"""

import re
from typing import Final, Literal, get_args

from commbench.errors import CommbenchError

Backend = Literal["nccl", "gloo"]
"""A process-group backend commbench runs (BACKENDS lists them)."""
Device = Literal["cuda", "cpu"]
"""A tensor device type commbench runs on (DEVICES lists them)."""
Auto = Literal["auto"]
"""An option left for commbench to choose (resolved against the machine: machine.resolve_target, timing.measure)."""
NCCL: Final = "nccl"
GLOO: Final = "gloo"
CUDA: Final = "cuda"
CPU: Final = "cpu"
AUTO: Final = "auto"
BACKENDS: tuple[Backend, ...] = get_args(Backend)
DEVICES: tuple[Device, ...] = get_args(Device)
BackendChoice = Auto | Backend
"""What --backend takes."""
DeviceChoice = Auto | Device
"""What --device takes."""
BACKEND_CHOICES: tuple[BackendChoice, ...] = (AUTO, *BACKENDS)
DEVICE_CHOICES: tuple[DeviceChoice, ...] = (AUTO, *DEVICES)

DTYPES = ("float32", "float64", "bfloat16", "float16", "int32", "int64", "int8", "uint8", "float8_e4m3", "float8_e5m2")
"""float8_e4m3 is torch.float8_e4m3fn (nccl-tests' f8e4m3); the fp8 types run on NCCL 2.24+ only."""
UNREDUCED_DTYPES = {"uint32": "int32 or int64", "uint64": "int64"}
"""nccl-tests types that torch has (torch.uint32, torch.uint64) and neither of its backends runs: ProcessGroupNCCL's
type table and gloo's lack them. --dtype takes their names only to refuse them with the reason and what to use."""
DTYPE_CHOICES = (*DTYPES, *UNREDUCED_DTYPES)
"""What --dtype accepts: the dtypes that run, and those refused by name (UNREDUCED_DTYPES)."""
DTYPE_BYTES = {"float32": 4, "float64": 8, "bfloat16": 2, "float16": 2, "int32": 4, "int64": 8, "int8": 1, "uint8": 1,
               "float8_e4m3": 1, "float8_e5m2": 1}
"""Bytes per element of each dtype that runs (torch's itemsize)."""
FLOATING_DTYPES = frozenset({"float32", "float64", "bfloat16", "float16", "float8_e4m3", "float8_e5m2"})
FP8_DTYPES = frozenset({"float8_e4m3", "float8_e5m2"})
TORCH_SPELLING = {"float8_e4m3": "float8_e4m3fn"}
"""commbench's dtype names that torch spells otherwise (torch's e4m3 without infinities is float8_e4m3fn, which is
NCCL's ncclFloat8e4m3)."""
TRACE_ONLY_BYTES = {"int16": 2, "bool": 1}
"""Element sizes of dtypes profiler traces can name and commbench does not run."""
TRACE_DTYPES = {"Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16", "Int": "int32",
                "Long": "int64", "Short": "int16", "Byte": "uint8", "Char": "int8", "Bool": "bool",
                "Float8_e4m3fn": "float8_e4m3", "Float8_e5m2": "float8_e5m2"}
"""torch's dtype names in traces (record_param_comms' "dtype": c10's ScalarType names) → commbench's."""
TRACE_CPP_TYPES = {"float": "float32", "c10::half": "float16", "c10::bfloat16": "bfloat16", "double": "float64",
                   "long": "int64", "long int": "int64", "int": "int32", "unsigned char": "uint8",
                   "signed char": "int8", "char": "int8", "bool": "bool", "short": "int16",
                   "c10::float8_e4m3fn": "float8_e4m3", "c10::float8_e5m2": "float8_e5m2"}
"""Older traces' "Input type" (a C++ type name, lower-cased) → commbench's dtype name."""


def element_bytes(dtype: str | None) -> int | None:
    """Bytes per element of a dtype as commbench names it (those it runs and those traces name); None if unknown."""
    return DTYPE_BYTES.get(dtype or "") or TRACE_ONLY_BYTES.get(dtype or "")


def trace_dtype(torch_name: object) -> str:
    """commbench's name of a dtype a trace writes as torch does ("Float", "Long", "Float8_e4m3fn", ...)."""
    return TRACE_DTYPES.get(str(torch_name), str(torch_name).lower())


ReduceOp = Literal["sum", "prod", "max", "min", "avg"]
"""A reduction a reducing collective runs (--op)."""
REDUCE_OPS: tuple[ReduceOp, ...] = get_args(ReduceOp)
NoOp = Literal["none"]
NO_OP: Final = "none"
"""The op column of collectives that do not reduce, as nccl-tests prints it."""
OpName = ReduceOp | NoOp
"""A row's op: a reduction, or none."""
GLOO_CUDA_COLLECTIVES = ("all_reduce", "broadcast")
"""The only collectives gloo runs on CUDA tensors (PyTorch's backend table in the torch.distributed documentation)."""
PLACEMENTS = {"out": (False,), "in": (True,), "both": (False, True)}
"""--placement: which of out-of-place (False) and in-place (True) buffers to measure."""
Timing = Literal["per-iteration", "batch"]
PER_ITERATION: Final = "per-iteration"
BATCH: Final = "batch"
TIMINGS: tuple[Timing, ...] = get_args(Timing)
"""The timing modes of a row (its `timing` column): a barrier before every timed call (per-call distribution), or
nccl-tests' back-to-back batches."""
TimingChoice = Timing | Auto
TIMING_CHOICES: tuple[TimingChoice, ...] = (*TIMINGS, AUTO)
"""What --timing takes: a mode, or auto (per point, from 5 calls after the warm-up: commbench/measure/timing.py)."""
RankAverage = Literal["rank0", "mean", "min", "max"]
RANK0: Final = "rank0"
MEAN: Final = "mean"
MIN: Final = "min"
MAX: Final = "max"
RANK_AVERAGES: tuple[RankAverage, ...] = get_args(RankAverage)
"""How batch timing combines the ranks' times per call (nccl-tests -a 0/1/2/3): rank 0's, the mean, the fastest
rank's or the slowest rank's."""
RANK_AVERAGE_TEXT: dict[RankAverage, str] = {RANK0: "rank 0's time", MEAN: "mean over ranks", MIN: "fastest rank",
                                             MAX: "slowest rank"}
"""How a row's timing_method says each rank average (commbench/measure/timing.py writes it, the sweep's tables find
it there again)."""
BlockingMode = Literal[0, 1, 2, 3]
BLOCKING_MODES: tuple[BlockingMode, ...] = get_args(BlockingMode)
"""Batch timing's waits inside a batch (nccl-tests -z): 0 none; 1 wait for the device and a barrier after each
iteration; 2 the wait only; 3 the wait and a barrier after each iteration, the barrier's time not counted."""
StopReason = Literal["iters", "ci", "max_time"]
"""Why a point's sampling stopped (its stop_reason column)."""
STOP_ITERS: Final = "iters"  # stop_reason: the fixed number of iterations ran
STOP_CI: Final = "ci"  # adaptive: the median's confidence interval reached the target
STOP_MAX_TIME: Final = "max_time"  # adaptive: the time budget of the point was spent first
Implementation = Literal["builtin", "ring"]
BUILTIN: Final = "builtin"
"""The backend's own collective (torch.distributed's call), as opposed to commbench's ring over send/recv."""
IMPLEMENTATIONS: tuple[Implementation, ...] = get_args(Implementation)
"""builtin: the backend's own collective; ring: the hand-written ring over send/recv (collectives/ring.py)."""
DDP_DEFAULT_FIRST_MB = 1.0
DDP_DEFAULT_CAP_MB = 25.0
"""DDP's own buckets when no bucket argument is given (a 1 MiB first bucket, then 25 MiB each), as results.csv
records them (bucket_cap_mb 25, first_bucket_mb 1): torch's _DEFAULT_FIRST_BUCKET_BYTES and its default cap, which
training/ddp_buckets.py reads from torch (the tests check the two agree). The partitioned ZeRO-2's buckets default to
the same cap (models/shard_layout.py)."""
BIND_CORES_ENV = "COMMBENCH_BIND_CORES"
"""--bind-cores: the cores of a launch's local ranks, comma-separated, by local rank (set by the launcher, read by
rank.py)."""

COLLECTIVE_BENCH = "collective"
"""The bench column (and kind name) of the collective sweep's rows, which its fits and models read."""
COMMBENCH_SOURCE = "commbench"
"""The source column of rows commbench measured; an imported row names its tool (commbench import)."""


BUSBW_FACTORS = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n, "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n, "gather": lambda n: (n - 1) / n, "scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0, "reduce": lambda n: 1.0, "sendrecv": lambda n: 1.0,
}
"""busbw = algbw × factor(n), n the ranks of the group (nccl-tests doc/PERFORMANCE.md): what each rank moves in a ring,
per byte of the size S, e.g. 2(n−1)/n for all_reduce. The collectives commbench runs read their factor here
(collectives/base.py), as do the importers and the trace readers; gather and scatter are nccl-tests' only."""


def busbw_factor(collective: str, world: int) -> float | None:
    """The busbw factor of a collective at a group size; None where it does not follow from the size alone."""
    rule = BUSBW_FACTORS.get(collective)
    return rule(world) if rule and world > 0 else None


def why_no_busbw_factor(collective: str) -> str:
    if collective == "hypercube":
        return "hypercube's algbw counts (n - 1) x the size"
    if collective == "all_to_allv":
        return "alltoallv's sizes vary by rank"
    return f"no nccl-tests formula known for {collective}"


TRACE_COLLECTIVES = {
    "allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter", "broadcast": "broadcast",
    "reduce": "reduce", "sendrecv": "sendrecv", "alltoall": "all_to_all", "alltoallv": "all_to_all",
    "alltoallbase": "all_to_all", "gather": "gather", "scatter": "scatter", "send": "send", "recv": "recv",
    "barrier": "barrier", "allgatherbase": "all_gather", "reducescatterbase": "reduce_scatter",
    "allgatherintotensor": "all_gather", "reducescattertensor": "reduce_scatter"}
"""NCCL kernel kinds (AllReduce), gloo span names (all_reduce) and torch collective names (_allgather_base), reduced
to letters → the collective's name in commbench rows (nccl-tests' where commbench runs none)."""


# NCCL's own names of its collectives (ncclFuncToString), as NCCL Inspector and NCCL's kernel names spell them

NCCL_FUNCTIONS = {"all_reduce": "AllReduce", "all_gather": "AllGather", "reduce_scatter": "ReduceScatter",
                  "broadcast": "Broadcast", "reduce": "Reduce", "all_to_all": "All2All", "sendrecv": "SendRecv"}
"""commbench's collective → NCCL's name of the function that runs it, as NCCL Inspector logs and labels it
(inspector.cc ncclFuncToString) and as NCCL's kernels are named (ncclDevKernel_AllReduce_Sum_f32_RING_LL).
nccl-tests' sendrecv is NCCL's grouped send and receive, ncclFuncSendRecv. Collectives NCCL has no function of its
own for (nccl-tests' gather, scatter, alltoallv, hypercube) are not listed."""
NCCL_KERNEL_KINDS = {**{name: NCCL_FUNCTIONS[name] for name in ("all_reduce", "all_gather", "reduce_scatter",
                                                                 "broadcast", "reduce")},
                     "barrier": NCCL_FUNCTIONS["all_reduce"],
                     **dict.fromkeys(("all_to_all", "gather", "scatter", "send", "recv"), NCCL_FUNCTIONS["sendrecv"])}
"""A collective torch issues → the NCCL function whose kernels run it (the kind in the kernel's name): torch runs
barrier as a one-element all-reduce, and all-to-all, gather, scatter, send and recv as grouped NCCL sends and
receives."""


# nccl-tests (src/*.cu getBw, src/common.cu, doc/PERFORMANCE.md)

NCCL_TESTS_COLLECTIVES = {
    "all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
    "broadcast": "broadcast", "reduce": "reduce", "alltoall": "all_to_all", "alltoallv": "all_to_allv",
    "sendrecv": "sendrecv", "gather": "gather", "scatter": "scatter", "hypercube": "hypercube",
}
"""nccl-tests' test name (the program without _perf) → the collective's name in commbench rows: commbench's where
commbench runs it, nccl-tests' own otherwise."""
NCCL_TESTS_REDUCING = {"all_reduce", "reduce_scatter", "reduce"}
"""The others print a redop column too (sum, or none in newer versions); their rows say op none, as commbench's."""
NCCL_TESTS_DTYPES = {"float": "float32", "half": "float16", "double": "float64", "int": "int32", "char": "int8",
                     "f8e4m3": "float8_e4m3", "f8e5m2": "float8_e5m2"}
"""nccl-tests' type names that commbench spells otherwise (int and char are nccl-tests' names before NCCL 2); int8,
bfloat16, ... are the same in both."""
NCCL_TESTS_TYPE_NAMES = ("int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16",
                         "f8e4m3", "f8e5m2")
"""What -d takes, in nccl-tests' order (src/common.cu test_typenames); `all` runs every one this backend has."""
NCCL_TESTS_OP_NAMES = ("sum", "prod", "max", "min", "avg")
"""What -o takes, in nccl-tests' order (test_opnames; mulsum, a PreMulSum, has no torch.distributed op)."""

_NCCL_TESTS_PROGRAM = re.compile(r"(?<![A-Za-z0-9])([a-z_]+?)_perf(?:_mpi)?(?![A-Za-z0-9])")


def nccl_tests_program_in(line: str) -> str | None:
    """The nccl-tests test a line names (./build/all_reduce_perf -b 8 ..., # Collective test starting: ...)."""
    for match in _NCCL_TESTS_PROGRAM.finditer(line):
        if match.group(1) in NCCL_TESTS_COLLECTIVES:
            return match.group(1)
    return None


def nccl_tests_collective_option(text: str) -> str:
    """--collective as nccl-tests or commbench names it: all_reduce_perf, alltoall, all_to_all, ..."""
    name = text.strip().removesuffix("_perf")
    if name in NCCL_TESTS_COLLECTIVES:
        return NCCL_TESTS_COLLECTIVES[name]
    if name in NCCL_TESTS_COLLECTIVES.values():
        return name
    raise CommbenchError(f"--collective {text!r} is not an nccl-tests test; use one of "
                         f"{', '.join(sorted(NCCL_TESTS_COLLECTIVES))} (or its _perf program name)")


def nccl_tests_dtype(name: str) -> str:
    """commbench's name of an nccl-tests type (float → float32)."""
    return NCCL_TESTS_DTYPES.get(name, name)


def nccl_tests_type_name(dtype: str) -> str:
    """The name nccl-tests prints for a commbench dtype (float32 → float)."""
    return next((name for name, ours in NCCL_TESTS_DTYPES.items() if ours == dtype and name in NCCL_TESTS_TYPE_NAMES),
                dtype)


def nccl_tests_program(collective: str) -> str:
    """The nccl-tests program of a commbench collective (all_to_all → alltoall_perf)."""
    return next(name for name, ours in NCCL_TESTS_COLLECTIVES.items() if ours == collective) + "_perf"


def nccl_tests_op(collective: str, redop: str) -> str:
    """The op column of an nccl-tests row in commbench's terms (none for collectives that do not reduce)."""
    return redop if collective in NCCL_TESTS_REDUCING else NO_OP

NOT_AVAILABLE = "not available: "
"""How the note of a row begins when its environment combination was refused before it could be measured (NCCL's
or the backend's error follows)."""
