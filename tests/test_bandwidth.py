"""algbw/busbw, S and the element counts, against nccl-tests' definitions (doc/PERFORMANCE.md, src/*.cu)."""

import pytest

from commbench.collectives import COLLECTIVES
from commbench.measure.bandwidth import algbw_gbps, busbw_gbps

pytestmark = pytest.mark.no_process

MIB = 1024**2


def test_algbw_is_bytes_over_seconds_in_1e9():
    assert algbw_gbps(2_000_000_000, 2.0) == pytest.approx(1.0)
    assert busbw_gbps(2_000_000_000, 2.0, 1.5) == pytest.approx(1.5)


@pytest.mark.parametrize("world, factor", [(1, 0.0), (2, 1.0), (4, 1.5), (8, 1.75)])
def test_all_reduce(world, factor):
    collective = COLLECTIVES["all_reduce"]
    layout = collective.layout(64 * MIB, 4, world)
    assert (layout.count, layout.size_bytes) == (16 * MIB, 64 * MIB)
    assert collective.algbw_bytes(layout, world) == 64 * MIB
    assert collective.busbw_factor(world) == pytest.approx(factor)


@pytest.mark.parametrize("name", ["reduce_scatter", "all_gather"])
@pytest.mark.parametrize("world", [2, 3, 8])
def test_scatter_and_gather_factor_is_n_minus_1_over_n(name, world):
    assert COLLECTIVES[name].busbw_factor(world) == pytest.approx((world - 1) / world)


def test_reduce_scatter_counts_round_like_nccl_tests():
    # nccl-tests: base = (count/nranks) & ~(16/eltSize - 1); sendcount = base*nranks; printed count = base
    layout = COLLECTIVES["reduce_scatter"].layout(1000 * 4, 4, 3)  # 1000 floats, 3 ranks: 333 -> 332
    assert (layout.count, layout.send_count, layout.recv_count) == (332, 996, 332)
    assert layout.size_bytes == 996 * 4
    assert COLLECTIVES["reduce_scatter"].algbw_bytes(layout, 3) == 996 * 4


def test_all_gather_counts_round_like_nccl_tests():
    layout = COLLECTIVES["all_gather"].layout(1024, 2, 3)  # 512 halves, 3 ranks: 170 -> 168 (multiple of 8)
    assert (layout.count, layout.send_count, layout.recv_count) == (168, 168, 504)
    assert COLLECTIVES["all_gather"].algbw_bytes(layout, 3) == 504 * 2


def test_all_to_all_bytes_are_n_times_per_peer_count():
    layout = COLLECTIVES["all_to_all"].layout(4096, 4, 4)
    assert layout.count == 256
    assert COLLECTIVES["all_to_all"].algbw_bytes(layout, 4) == 4 * 256 * 4
    assert COLLECTIVES["all_to_all"].busbw_factor(4) == pytest.approx(0.75)


def test_broadcast_factor_is_one():
    collective = COLLECTIVES["broadcast"]
    assert collective.busbw_factor(8) == 1.0
    assert collective.algbw_bytes(collective.layout(MIB, 4, 8), 8) == MIB
