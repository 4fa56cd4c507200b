"""What nccl-tests' names and formulas mean in commbench's terms (nccl-tests src/*.cu getBw, doc/PERFORMANCE.md).

Shared by the text and JSON readers: the collective a program measures, dtype names, the busbw factor of each
collective, and how nccl-tests times."""

import re

from commbench.errors import CommbenchError
from commbench.names import NO_OP

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

DTYPES = {"float": "float32", "half": "float16", "double": "float64", "int": "int32"}
"""nccl-tests' type names that commbench spells otherwise; int8, bfloat16, ... are the same in both."""

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


def op(collective: str, redop: str) -> str:
    return redop if collective in REDUCING else NO_OP
