"""The check's expected results equal a brute-force reduction of every rank's pattern."""

import pytest
import torch

from commbench.backends import DTYPES
from commbench.collectives.check_data import count_wrong, rank_pattern, reduced_pattern

CPU = torch.device("cpu")


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("world", [1, 2, 3, 8])
@pytest.mark.parametrize("op", ["sum", "max", "min", "avg"])
def test_reduced_pattern_is_the_exact_reduction(dtype, world, op):
    torch_dtype = DTYPES[dtype]
    inputs = torch.stack([rank_pattern(rank, 5, 100, world=world, dtype=torch_dtype, device=CPU).double()
                          for rank in range(world)])
    brute = {"sum": inputs.sum(0), "max": inputs.max(0).values, "min": inputs.min(0).values,
             "avg": inputs.sum(0) / world}[op]
    expected = reduced_pattern(5, 100, world=world, op=op, dtype=torch_dtype, device=CPU)
    assert torch.equal(expected, brute.to(torch_dtype))


def test_patterns_differ_between_ranks():
    a = rank_pattern(0, 0, 64, world=2, dtype=torch.float32, device=CPU)
    b = rank_pattern(1, 0, 64, world=2, dtype=torch.float32, device=CPU)
    assert not torch.equal(a, b)


def test_sums_stay_exact_in_bfloat16():
    values = rank_pattern(0, 0, 1000, world=4, dtype=torch.bfloat16, device=CPU)
    assert torch.equal(values.double(), values.double().round())
    assert values.double().max() * 4 <= 256


def test_count_wrong_finds_single_element():
    expected = reduced_pattern(0, 50, world=2, op="sum", dtype=torch.float32, device=CPU)
    actual = expected.clone()
    assert count_wrong(actual, expected, op="sum", world=2) == 0
    actual[7] += 1
    assert count_wrong(actual, expected, op="sum", world=2) == 1


def test_avg_tolerates_premultiplication_rounding_only():
    expected = reduced_pattern(0, 50, world=3, op="avg", dtype=torch.float32, device=CPU)
    premultiplied = sum(rank_pattern(rank, 0, 50, world=3, dtype=torch.float32, device=CPU) * (1 / 3)
                        for rank in range(3))
    assert count_wrong(premultiplied, expected, op="avg", world=3) == 0
    premultiplied[0] += 0.5
    assert count_wrong(premultiplied, expected, op="avg", world=3) == 1


@pytest.mark.parametrize("name, inplace", [("all_gather", False), ("all_gather", True), ("reduce_scatter", False),
                                           ("all_to_all", False), ("all_reduce", True)])
def test_a_collective_that_writes_nothing_fails_the_check(name, inplace):
    from commbench.collectives import COLLECTIVES

    collective, world, rank = COLLECTIVES[name], 2, 1
    layout = collective.layout(4096, 4, world)
    buffers = collective.make_buffers(layout, inplace=inplace, dtype=torch.float32, device=CPU, rank=rank,
                                      world=world)
    expected = collective.expected(layout, rank=rank, world=world, op="sum", dtype=torch.float32, device=CPU)
    buffers.recv.copy_(expected)  # what an earlier, timed run left behind
    collective.fill_inputs(buffers, rank=rank, world=world)  # the check then runs nothing at all
    assert count_wrong(buffers.recv, expected, op="sum", world=world) > 0
