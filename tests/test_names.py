"""commbench's vocabulary (commbench/names.py) against what it names: torch's dtypes, the collectives registry,
nccl-tests' programs and the dtype spellings of profiler traces."""

import pytest
import torch

from commbench import names
from commbench.collectives import COLLECTIVES

pytestmark = pytest.mark.no_process


def test_every_collective_commbench_runs_has_a_busbw_factor_and_an_nccl_tests_program():
    """A collective added to the registry without its vocabulary would print no busbw and no nccl-tests name."""
    for name in COLLECTIVES:
        assert names.busbw_factor(name, 4) is not None, name
        assert names.nccl_tests_program(name).endswith("_perf"), name
        assert names.nccl_tests_collective_option(names.nccl_tests_program(name)) == name


@pytest.mark.parametrize(("collective", "world", "factor"), [
    ("all_reduce", 8, 1.75), ("all_reduce", 2, 1.0), ("all_gather", 4, 0.75), ("reduce_scatter", 8, 0.875),
    ("all_to_all", 2, 0.5), ("gather", 4, 0.75), ("scatter", 4, 0.75), ("broadcast", 8, 1.0), ("reduce", 8, 1.0),
    ("sendrecv", 2, 1.0)])
def test_busbw_factors_are_nccl_tests_formulas(collective, world, factor):
    """nccl-tests doc/PERFORMANCE.md: 2(n-1)/n for all_reduce, (n-1)/n for the gathers, scatters and all-to-all, 1
    for broadcast, reduce and sendrecv."""
    assert names.busbw_factor(collective, world) == pytest.approx(factor)


@pytest.mark.parametrize("collective", ["hypercube", "all_to_allv", "no_such"])
def test_a_collective_without_a_size_formula_has_no_factor_and_says_why(collective):
    assert names.busbw_factor(collective, 8) is None
    assert names.why_no_busbw_factor(collective)


def test_trace_dtype_names_map_to_dtypes_of_known_size():
    """Every spelling a trace uses (c10 ScalarType names, older traces' C++ types) lands on a dtype whose element
    size commbench knows, and that size is torch's."""
    for spelled in (*names.TRACE_DTYPES.values(), *names.TRACE_CPP_TYPES.values()):
        size = names.element_bytes(spelled)
        assert size is not None, spelled
        torch_dtype = getattr(torch, names.TORCH_SPELLING.get(spelled, spelled))
        assert torch_dtype.itemsize == size, spelled
    assert names.trace_dtype("Float8_e4m3fn") == "float8_e4m3"
    assert names.trace_dtype("ComplexFloat") == "complexfloat" and names.element_bytes("complexfloat") is None


def test_nccl_tests_type_names_round_trip():
    for type_name in names.NCCL_TESTS_TYPE_NAMES:
        ours = names.nccl_tests_dtype(type_name)
        assert names.nccl_tests_type_name(ours) == type_name
        assert ours in names.DTYPE_CHOICES, type_name
    assert set(names.NCCL_TESTS_OP_NAMES) == set(names.REDUCE_OPS)


def test_a_collective_that_does_not_reduce_reads_op_none():
    assert names.nccl_tests_op("all_gather", "sum") == names.NO_OP
    assert names.nccl_tests_op("all_reduce", "max") == "max"
