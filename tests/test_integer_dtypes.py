"""nccl-tests' integer types in a sweep: int8, uint8 and int64 run on gloo, every point checked exact (n_wrong 0);
their check data stays exact where a sum over many ranks would pass the type's range; uint32 and uint64, which
neither torch backend reduces, are refused in one line with the reason."""

import pytest
import torch

from commbench.backends import DTYPES
from commbench.collectives.check_data import POISON, Segment, count_wrong, rank_pattern, reduced_pattern

CPU = torch.device("cpu")
INTEGER_DTYPES = ("int8", "uint8", "int64")


@pytest.mark.no_process
@pytest.mark.parametrize("dtype, world", [("int8", 127), ("int8", 128), ("int8", 300), ("uint8", 255),
                                          ("uint8", 1000), ("float8_e5m2", 9), ("float8_e4m3", 40)])
@pytest.mark.parametrize("op", ["sum", "avg"])
def test_sums_over_more_ranks_than_the_type_counts_stay_exact(dtype, world, op):
    """A sum of ones over 128 int8 ranks is 128, which int8 cannot hold: past the type's exact range every rank marks
    positions of its own, so each sum is 1 or 0. The expected values equal the reduction done exactly (float64)."""
    torch_dtype = DTYPES[dtype]
    inputs = torch.stack([rank_pattern(rank, 3, 2 * world + 5, world=world, dtype=torch_dtype, device=CPU, op=op)
                          .double() for rank in range(world)])
    exact = inputs.sum(0) if op == "sum" else inputs.sum(0) / world
    expected = reduced_pattern(3, 2 * world + 5, world=world, op=op, dtype=torch_dtype, device=CPU)
    assert torch.equal(expected.double(), exact.to(torch.float32).to(torch_dtype).double())
    assert exact.max() <= (torch.iinfo(torch_dtype).max - 1 if not torch_dtype.is_floating_point
                           else 2 / torch.finfo(torch_dtype).eps)
    poison = torch.tensor(POISON).to(torch_dtype).item()
    assert poison not in expected.tolist()  # a reduction never reads as the poison an unwritten output holds
    # a rank's data missing from the sum shows: the exact (float64) sum without a rank differs from the whole sum
    # where that rank's row is not zero, so every rank must hold a nonzero element (one pass, not one sum per rank)
    assert bool((inputs != 0).any(dim=1).all())


@pytest.mark.no_process
def test_a_wrong_integer_element_is_counted():
    actual = reduced_pattern(0, 1000, world=300, op="sum", dtype=torch.int8, device=CPU)
    assert count_wrong(actual, [Segment(1000)], op="sum", world=300) == 0
    actual[17] += 1
    assert count_wrong(actual, [Segment(1000)], op="sum", world=300) == 1


@pytest.mark.distributed
def test_a_sweep_of_each_integer_type_runs_checked_on_gloo(run_sweep):
    """Every collective, builtin and ring, every op gloo has for integers, out of place and in place: n_wrong 0."""
    outcome = run_sweep("-c", "all_reduce,reduce_scatter,all_gather,broadcast,reduce,all_to_all,sendrecv",
                        "--impl", "builtin,ring", "--op", "sum,prod,max,min", "--placement", "both",
                        "--dtype", ",".join(INTEGER_DTYPES), "--sizes", "1K,33K", "--warmup", "1", "--iters", "2",
                        "--batch-calls", "2")
    assert outcome.returncode == 0, outcome.stderr
    results = outcome.results
    assert set(results["dtype"]) == set(INTEGER_DTYPES)
    assert (results["n_wrong"] == 0).all(), results[results["n_wrong"] != 0]
    for dtype in INTEGER_DTYPES:
        ran = results[results["dtype"] == dtype]
        assert set(ran["collective"]) == {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce",
                                          "all_to_all", "sendrecv"}
        assert set(ran[ran["collective"] == "all_reduce"]["op"]) == {"sum", "prod", "max", "min"}
        assert set(ran["impl"]) == {"builtin", "ring"}


@pytest.mark.no_process
@pytest.mark.parametrize("args, fragments", [
    (["sweep", "--dtype", "uint32"], ["--dtype uint32:", "no uint32 collectives", "int32 or int64"]),
    (["sweep", "--dtype", "uint64"], ["--dtype uint64:", "no uint64 collectives", "use int64"]),
    (["perf", "all_reduce", "-d", "uint64"], ["-d/--datatype uint64", "no uint64 collectives"]),
    (["sweep", "--dtype", "int8", "--op", "avg"], ["gloo cannot average int8", "--op sum"]),
])
def test_integer_types_torch_cannot_reduce_are_refused_with_the_reason(args, fragments):
    from tests.refusals import assert_refused, invoke

    line = assert_refused(invoke([*args, "--backend", "gloo"] if args[0] == "sweep" else args))
    for fragment in fragments:
        assert fragment in line
