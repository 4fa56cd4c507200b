"""The check's expected results equal a brute-force reduction of every rank's pattern."""

import pytest
import torch

from commbench.backends import DTYPES
from commbench.collectives.check_data import Segment, count_wrong, rank_pattern, reduced_pattern, write_expected

pytestmark = pytest.mark.no_process

CPU = torch.device("cpu")


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("world", [1, 2, 3, 8])
@pytest.mark.parametrize("op", ["sum", "prod", "max", "min", "avg"])
def test_reduced_pattern_is_the_exact_reduction(dtype, world, op):
    torch_dtype = DTYPES[dtype]
    inputs = torch.stack([rank_pattern(rank, 5, 100, world=world, dtype=torch_dtype, device=CPU, op=op).double()
                          for rank in range(world)])
    brute = {"sum": inputs.sum(0), "prod": inputs.prod(0), "max": inputs.max(0).values, "min": inputs.min(0).values,
             "avg": inputs.sum(0) / world}[op]
    expected = reduced_pattern(5, 100, world=world, op=op, dtype=torch_dtype, device=CPU)
    assert torch.equal(expected.double(), brute.to(torch.float32).to(torch_dtype).double())
    assert torch.equal(brute, brute.round()) or op == "avg"  # every reduction but avg is an exact integer


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8", "uint8", "float8_e5m2"])
@pytest.mark.parametrize("world", [2, 4, 64])
def test_a_missing_factor_changes_the_product(dtype, world):
    """prod's inputs are ones with a 2 at each rank's own positions, so every product is 1 or 2 (exact in any type
    at any world size), it varies along the buffer, and any one rank's factor left out shows."""
    torch_dtype = DTYPES[dtype]
    inputs = torch.stack([rank_pattern(rank, 0, 3 * (world + 1), world=world, dtype=torch_dtype, device=CPU,
                                       op="prod").double() for rank in range(world)])
    product = inputs.prod(0)
    assert set(product.unique().tolist()) == {1.0, 2.0}
    for missing in range(world):
        assert not torch.equal(torch.cat([inputs[:missing], inputs[missing + 1:]]).prod(0), product)


def test_uint8_reductions_never_reach_its_poison():
    from commbench.collectives.check_data import POISON

    poison = torch.tensor(POISON).to(torch.uint8).item()  # 255
    for world in (2, 42, 51, 127):
        assert reduced_pattern(0, 50, world=world, op="sum", dtype=torch.uint8, device=CPU).max().item() < poison


def test_patterns_differ_between_ranks():
    a = rank_pattern(0, 0, 64, world=2, dtype=torch.float32, device=CPU)
    b = rank_pattern(1, 0, 64, world=2, dtype=torch.float32, device=CPU)
    assert not torch.equal(a, b)


def test_sums_stay_exact_in_bfloat16():
    values = rank_pattern(0, 0, 1000, world=4, dtype=torch.bfloat16, device=CPU)
    assert torch.equal(values.double(), values.double().round())
    assert values.double().max() * 4 <= 256


def test_count_wrong_finds_single_element():
    actual = reduced_pattern(0, 50, world=2, op="sum", dtype=torch.float32, device=CPU)
    assert count_wrong(actual, [Segment(50)], op="sum", world=2) == 0
    actual[7] += 1
    assert count_wrong(actual, [Segment(50)], op="sum", world=2) == 1


def test_avg_tolerates_premultiplication_rounding_only():
    premultiplied = sum(rank_pattern(rank, 0, 50, world=3, dtype=torch.float32, device=CPU) * (1 / 3)
                        for rank in range(3))
    assert count_wrong(premultiplied, [Segment(50)], op="avg", world=3) == 0
    premultiplied[0] += 0.5
    assert count_wrong(premultiplied, [Segment(50)], op="avg", world=3) == 1


@pytest.mark.parametrize("name, inplace", [("all_gather", False), ("all_gather", True), ("reduce_scatter", False),
                                           ("reduce_scatter", True), ("all_to_all", False), ("all_reduce", True)])
@pytest.mark.parametrize("fill", ["fill_inputs", "refill_for_check"])
def test_a_collective_that_writes_nothing_fails_the_check(name, inplace, fill):
    from commbench.collectives import COLLECTIVES

    collective, world, rank = COLLECTIVES[name], 2, 1
    layout = collective.layout(4096, 4, world)
    buffers = collective.make_buffers(layout, inplace=inplace, dtype=torch.float32, device=CPU, rank=rank,
                                      world=world)
    expected = collective.expected(layout, rank=rank, world=world)
    collective.fill_inputs(buffers, rank=rank, world=world)
    write_expected(buffers.recv, expected, world=world, op="sum")  # what an earlier, timed run left behind
    assert count_wrong(buffers.recv, expected, op="sum", world=world) == 0
    getattr(collective, fill)(buffers, rank=rank, world=world)  # the check then runs nothing at all
    assert count_wrong(buffers.recv, expected, op="sum", world=world) > 0


@pytest.mark.parametrize("name, inplace", [("all_reduce", True), ("reduce_scatter", True), ("all_gather", True),
                                           ("reduce_scatter", False), ("all_to_all", False)])
def test_the_check_starts_from_fresh_inputs_and_a_poisoned_output(name, inplace):
    from commbench.collectives import COLLECTIVES
    from commbench.collectives.check_data import POISON

    collective, world, rank = COLLECTIVES[name], 2, 1
    layout = collective.layout(4096, 4, world)
    buffers = collective.make_buffers(layout, inplace=inplace, dtype=torch.float32, device=CPU, rank=rank,
                                      world=world)
    assert buffers.shared == inplace
    collective.fill_inputs(buffers, rank=rank, world=world)
    fresh_input = buffers.send.clone()
    buffers.recv.fill_(5)  # the timed runs wrote the output (in place: over the input too)
    collective.refill_for_check(buffers, rank=rank, world=world)
    assert torch.equal(buffers.send, fresh_input)
    if not inplace:
        assert bool((buffers.recv == POISON).all())
    elif name == "all_gather":  # the output outside this rank's own input chunk
        others = [chunk for index, chunk in enumerate(buffers.recv.chunk(world)) if index != rank]
        assert bool((torch.cat(others) == POISON).all())


@pytest.mark.parametrize("name, op", [("all_gather", "none"), ("all_to_all", "none"), ("broadcast", "none"),
                                      ("sendrecv", "none"), ("reduce_scatter", "sum"), ("reduce_scatter", "prod"),
                                      ("all_reduce", "sum"), ("all_reduce", "prod"), ("reduce", "sum"),
                                      ("reduce", "prod")])
@pytest.mark.parametrize("world, root", [(2, 0), (3, 2)])
def test_expected_matches_a_brute_force_collective_at_sizes_beyond_one_row(name, op, world, root):
    """Whole rows, a tail, rank offsets that are not multiples of the period: each rank's expected output equals
    what the collective computes from every rank's input, element by element (a reduce's other ranks: nothing to
    check)."""
    from commbench.collectives import COLLECTIVES

    collective, dtype = COLLECTIVES[name], torch.bfloat16
    layout = collective.layout(3 * 65536 * 2 + 10 * world * 2, 2, world)  # not a multiple of a row nor of 7
    count = layout.count
    inputs = [rank_pattern(rank, 0, layout.send_count, world=world, dtype=dtype, device=CPU, op=op)
              for rank in range(world)]
    stacked = torch.stack([values.double() for values in inputs])
    reduced = stacked.prod(0) if op == "prod" else stacked.sum(0)
    for rank in range(world):
        truth = {"all_reduce": lambda rank: reduced,
                 "broadcast": lambda rank: stacked[root],
                 "reduce": lambda rank: reduced,
                 "sendrecv": lambda rank: stacked[(rank - 1) % world],
                 "reduce_scatter": lambda rank: reduced[rank * count:(rank + 1) * count],
                 "all_gather": lambda rank: stacked.reshape(-1),
                 "all_to_all": lambda rank: stacked[:, rank * count:(rank + 1) * count].reshape(-1)}[name](rank).to(
            dtype)
        expected = collective.expected(layout, rank=rank, world=world, root=root)
        if name == "reduce" and rank != root:
            assert expected is None
            continue
        assert count_wrong(truth, expected, op=op, world=world) == 0
        written = torch.full_like(truth, -1)
        write_expected(written, expected, world=world, op=op)
        assert torch.equal(written, truth)


@pytest.mark.parametrize("name, world", [("all_gather", 2), ("all_to_all", 3)])
def test_a_chunk_from_the_wrong_rank_or_offset_is_caught(name, world):
    from commbench.collectives import COLLECTIVES

    collective, rank = COLLECTIVES[name], 1
    layout = collective.layout(200_000 * 4 * world, 4, world)
    expected = collective.expected(layout, rank=rank, world=world)
    output = torch.empty(layout.recv_count)
    write_expected(output, expected, world=world)
    assert count_wrong(output, expected, op="none", world=world) == 0
    swapped = output.view(world, -1)[[1, 0, *range(2, world)]].reshape(-1)  # two ranks' chunks in each other's place
    assert count_wrong(swapped, expected, op="none", world=world) == 2 * layout.count  # rank stride 3: all differ
    shifted = torch.roll(output, 1)  # every element one place off
    assert count_wrong(shifted, expected, op="none", world=world) >= layout.recv_count - world


def test_write_expected_refuses_segments_that_do_not_cover_the_buffer():
    with pytest.raises(ValueError):
        write_expected(torch.empty(10), [Segment(9, source=0)], world=1)
