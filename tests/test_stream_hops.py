"""Stream hops (commbench/measure/stream_hops.py): which calls leave the current stream for NCCL's and come back, how
a row's timing_method says so, and what a comparison with nccl-tests allows for them."""

import pytest

from commbench.measure.stream_hops import HOP_US, allowance_us, hop_text, hops_in, hops_per_iteration

pytestmark = pytest.mark.no_process


@pytest.mark.parametrize("collective, impl, agg, torch_version, hops", [
    ("all_reduce", "builtin", 1, "2.13.0", 0),  # torch ≥ 2.8: a synchronous op runs on the current stream
    ("all_reduce", "builtin", 1, "2.7.1+cu126", 2),  # ≤ 2.7: every synchronous collective hops there and back
    ("sendrecv", "builtin", 1, "2.13.0", 2),  # batch_isend_irecv on every torch
    ("all_gather", "builtin", 4, "2.13.0", 2),  # -m 4: the coalescing manager with async ops, once per iteration
    ("all_reduce", "ring", 1, "2.13.0", None),  # a hand-written ring: per exchange step, not per iteration
])
def test_which_calls_hop_on_nccl(collective, impl, agg, torch_version, hops):
    assert hops_per_iteration(collective, backend="nccl", device="cuda", impl=impl, agg=agg,
                              torch_version=torch_version) == hops


@pytest.mark.parametrize("backend, device", [("gloo", "cpu"), ("gloo", "cuda")])
def test_nothing_hops_off_nccl(backend, device):
    assert hops_per_iteration("sendrecv", backend=backend, device=device, agg=4, torch_version="2.5.0") == 0


def test_a_row_says_its_hops_and_a_reader_gets_them_back():
    method = "batch: 20 back-to-back calls per sample, CUDA events" + hop_text(2)
    assert "2 stream hops per iteration" in method and hops_in(method) == 2
    assert hop_text(0) == "" and hops_in("per-iteration: barrier before each call, host clock") == 0
    assert "per exchange step" in hop_text(None) and hops_in(hop_text(None)) == 0  # no per-iteration figure


def test_the_allowance_is_one_hop_cost_per_hop_shared_by_an_iterations_calls():
    assert allowance_us(2) == pytest.approx(2 * HOP_US)
    assert allowance_us(2, agg=4) == pytest.approx(2 * HOP_US / 4)
    assert allowance_us(0) == 0.0
