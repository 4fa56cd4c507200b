"""nccl-tests' vocabulary in commbench's terms (nccl-tests src/*.cu getBw, src/common.cu, doc/PERFORMANCE.md).

One home for the importers (commbench import nccl-tests) and `commbench perf`: the collective a program measures,
type and op names both ways, the busbw factor of each collective, and how nccl-tests times."""

import re

from commbench.errors import CommbenchError
from commbench.names import NO_OP, UNREDUCED_DTYPES

TOOL = "nccl-tests"
BACKEND, DEVICE = "nccl", "cuda"

COLLECTIVES = {
    "all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
    "broadcast": "broadcast", "reduce": "reduce", "alltoall": "all_to_all", "alltoallv": "all_to_allv",
    "sendrecv": "sendrecv", "gather": "gather", "scatter": "scatter", "hypercube": "hypercube",
}
"""nccl-tests' test name (the program without _perf) → the collective's name in commbench rows: commbench's where
commbench runs it, nccl-tests' own otherwise."""

REDUCING = {"all_reduce", "reduce_scatter", "reduce"}
"""The others print a redop column too (sum, or none in newer versions); their rows say op none, as commbench's."""

_FACTORS = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n, "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n, "gather": lambda n: (n - 1) / n, "scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0, "reduce": lambda n: 1.0, "sendrecv": lambda n: 1.0,
}
"""busbw = algbw × factor, algbw = S / t with S the size column. hypercube's algbw counts (n − 1) × S and
alltoallv's sizes vary by rank: neither is recomputed from the size column."""

DTYPES = {"float": "float32", "half": "float16", "double": "float64", "int": "int32", "char": "int8",
          "f8e4m3": "float8_e4m3", "f8e5m2": "float8_e5m2"}
"""nccl-tests' type names that commbench spells otherwise (int and char are nccl-tests' names before NCCL 2); int8,
bfloat16, ... are the same in both."""
TYPE_NAMES = ("int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16", "f8e4m3",
              "f8e5m2")
"""What -d takes, in nccl-tests' order (src/common.cu test_typenames); `all` runs every one this backend has."""
NO_TORCH_TYPE = UNREDUCED_DTYPES
"""nccl-tests types torch's backends do not run (NCCL's and gloo's dtype tables lack them), with what to use."""
OP_NAMES = ("sum", "prod", "max", "min", "avg")
"""What -o takes, in nccl-tests' order (test_opnames; mulsum, a PreMulSum, has no torch.distributed op)."""

_PROGRAM = re.compile(r"(?<![A-Za-z0-9])([a-z_]+?)_perf(?:_mpi)?(?![A-Za-z0-9])")


TIMING_METHOD = ("nccl-tests: the wall time of calls_per_sample back-to-back calls after the warm-up, divided by "
                 "the calls (a mean per call), averaged over ranks (its -a 1 default); its busbw follows from that "
                 "time. samples.csv, where present, holds its per-iteration CUDA-event times (max over processes)")


def factor(collective: str, world: int) -> float | None:
    rule = _FACTORS.get(collective)
    return rule(world) if rule and world > 0 else None


def why_no_factor(collective: str) -> str:
    if collective == "hypercube":
        return "hypercube's algbw counts (n - 1) x the size"
    if collective == "all_to_allv":
        return "alltoallv's sizes vary by rank"
    return f"no nccl-tests formula known for {collective}"


def program_in(line: str) -> str | None:
    """The nccl-tests test a line names (./build/all_reduce_perf -b 8 ..., # Collective test starting: ...)."""
    for match in _PROGRAM.finditer(line):
        if match.group(1) in COLLECTIVES:
            return match.group(1)
    return None


def collective_of(test: str) -> str:
    return COLLECTIVES[test]


def collective_option(text: str) -> str:
    """--collective as nccl-tests or commbench names it: all_reduce_perf, alltoall, all_to_all, ..."""
    name = text.strip().removesuffix("_perf")
    if name in COLLECTIVES:
        return COLLECTIVES[name]
    if name in COLLECTIVES.values():
        return name
    raise CommbenchError(f"--collective {text!r} is not an nccl-tests test; use one of "
                         f"{', '.join(sorted(COLLECTIVES))} (or its _perf program name)")


def dtype(name: str) -> str:
    return DTYPES.get(name, name)


def type_name(commbench_dtype: str) -> str:
    """The name nccl-tests prints for a commbench dtype (float32 → float)."""
    return next((name for name, ours in DTYPES.items() if ours == commbench_dtype and name in TYPE_NAMES),
                commbench_dtype)


def program(collective: str) -> str:
    """The nccl-tests program of a commbench collective (all_to_all → alltoall_perf)."""
    return next(name for name, ours in COLLECTIVES.items() if ours == collective) + "_perf"


def op(collective: str, redop: str) -> str:
    return redop if collective in REDUCING else NO_OP
