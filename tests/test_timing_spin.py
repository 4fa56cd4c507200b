"""The spin that covers the host's issue time in per-iteration CUDA timing (commbench/measure/timing.py): sized
from the issue
times after the first call (NCCL connects on first use), capped; judged against its measured length; not run with
gloo on CUDA tensors, whose calls block the host. The sizing and the judgement are pure functions, tested here on
lists of issue times; the timer itself needs a GPU (those tests skip without one)."""

import time

import pytest
import torch

from commbench.measure.timing import (
    HOST_BLOCKING_NOTE,
    MAX_SPIN_S,
    MIN_SPIN_S,
    SPIN_OVER_ISSUE,
    CudaTimer,
    cover_text,
    spin_seconds,
)

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: the spin is a CUDA kernel and "
                                                                     "CUDA events time it")
MS = 1e-3


def test_the_first_call_which_connects_does_not_size_the_spin():
    # a first call that connected NCCL's peers (400 ms), then ordinary issue times around 1 ms
    issue_s = [0.4, 1.0 * MS, 1.2 * MS, 0.9 * MS, 1.1 * MS]
    assert spin_seconds(issue_s) == pytest.approx(SPIN_OVER_ISSUE * 1.05 * MS)


def test_one_stall_after_the_first_call_does_not_size_the_spin():
    issue_s = [0.2, 1.0 * MS, 1.0 * MS, 40 * MS, 1.0 * MS, 1.0 * MS]
    assert spin_seconds(issue_s) == pytest.approx(SPIN_OVER_ISSUE * 1.0 * MS)


def test_the_spin_is_capped_and_has_a_floor():
    assert spin_seconds([1.0, 0.3, 0.4, 0.5]) == MAX_SPIN_S  # a host-bound call: the cap, launch_cover says the rest
    assert spin_seconds([0.1, 1e-6, 2e-6]) == MIN_SPIN_S
    assert spin_seconds([]) == MIN_SPIN_S  # --warmup 0: nothing seen


def test_with_only_the_first_call_seen_it_sizes_the_spin_within_the_cap():
    assert spin_seconds([0.8]) == MAX_SPIN_S  # --warmup 1 after a slow connection: capped, not 1.6 s
    assert spin_seconds([3 * MS]) == pytest.approx(SPIN_OVER_ISSUE * 3 * MS)


def test_cover_compares_each_call_with_its_measured_spin():
    # asked for 2 ms, the spins ran 1 ms (the GPU clock rose after calibration): two of three calls outlasted them
    assert cover_text([1.5 * MS, 0.5 * MS, 1.2 * MS], [1.0 * MS] * 3) == (
        "; host issue outlasted the 1 ms spin (measured) in 2 of 3 calls (max 1.5 ms): their launch latency is in "
        "the time")
    assert cover_text([0.5 * MS, 0.7 * MS], [2.0 * MS, 2.0 * MS]) == (
        "; a 2 ms spin (measured) covered host issue in all 2 calls (max 0.7 ms)")
    assert cover_text([], []) == ""


def test_gloo_on_cuda_tensors_has_no_spin_and_its_note_says_the_call_blocks_the_host():
    note = CudaTimer(lambda: None, host_blocking=True).launch_cover()
    assert note == HOST_BLOCKING_NOTE
    assert "no spin" in note and "returns only when the call is done" in note and "launch latency" not in note


@needs_gpu
def test_on_a_gpu_a_slow_first_call_leaves_the_timed_calls_unspun_and_covered():
    """The first call sleeps 300 ms on the host (as a connecting NCCL call does); the timed calls then spin for
    about twice an ordinary issue time, not 600 ms, and every one of them is covered by its measured spin."""
    data = torch.zeros(1 << 20, device="cuda")
    calls = []

    def run():
        if not calls:
            time.sleep(0.3)
        calls.append(1)
        data.add_(1)

    timer = CudaTimer(lambda: None)
    timer.time_iterations(run, 4)
    timer.size_spin()
    started = time.perf_counter()
    samples = timer.time_iterations(run, 5)
    wall_s = time.perf_counter() - started
    assert len(samples) == 5 and all(sample > 0 for sample in samples)
    assert wall_s < 5 * MAX_SPIN_S  # sized from the first call, the spin alone would take 5 × 600 ms
    assert "covered host issue in all 5 calls" in timer.launch_cover(), timer.launch_cover()


@needs_gpu
def test_on_a_gpu_the_host_blocking_timer_runs_no_spin():
    data = torch.zeros(1 << 20, device="cuda")
    timer = CudaTimer(lambda: None, host_blocking=True)
    timer.time_iterations(lambda: (time.sleep(0.01), data.add_(1)), 3)  # warm-up issue times of 10 ms
    timer.size_spin()
    started = time.perf_counter()
    timer.time_iterations(lambda: data.add_(1), 5)
    assert time.perf_counter() - started < 5 * 2 * 0.01  # no 20 ms spin before each call
    assert timer.launch_cover() == HOST_BLOCKING_NOTE
