"""The spin that keeps the device ahead of the host in CUDA timing (commbench/measure/spin_plan.py, timers.py): its
length from issue times (the first call, which may connect NCCL's peers, left out; a margin; a floor and a cap), the
agreement over ranks, the batch's segments (bounded by the launch queue), the
host-bound rule, and the cover judged against the spin's measured length; no spin with gloo on CUDA tensors, whose
calls block the host. The plan is pure arithmetic, tested here on tables of issue times; the timers themselves need a
GPU (those tests skip without one)."""

import math
import time

import pytest
import torch

from commbench.measure.spin_kernel import spin_device
from commbench.measure.spin_plan import (
    ENTRY_ISSUE_FLOOR_S,
    HOST_BOUND_SHARE,
    LAUNCH_QUEUE_ENTRIES,
    MAX_SPIN_S,
    MIN_SPIN_S,
    SPIN_MARGIN,
    batch_plan,
    cover_text,
    is_host_bound,
    queue_bound,
    spin_for,
    typical_issue_s,
)
from commbench.measure.timers import HOST_BLOCKING_NOTE, BatchOptions, CpuTimer, CudaTimer
from commbench.measure.timing import agree_on_spin, combined_issue

pytestmark = pytest.mark.no_process

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: the spin is a CUDA kernel and "
                                                                     "CUDA events time it")
MS, US = 1e-3, 1e-6


@pytest.mark.parametrize("issue_s, typical", [
    ([0.4, 1.0 * MS, 1.2 * MS, 0.9 * MS, 1.1 * MS], 1.05 * MS),  # a first call that connected NCCL's peers (400 ms)
    ([0.2, 1.0 * MS, 1.0 * MS, 40 * MS, 1.0 * MS, 1.0 * MS], 1.0 * MS),  # one stall after it: the median ignores it
    ([3 * MS], 3 * MS),  # only the first call seen: it is all there is
    ([], None),  # nothing seen
])
def test_the_typical_issue_time_leaves_out_the_first_call_and_stalls(issue_s, typical):
    assert typical_issue_s(issue_s) == (pytest.approx(typical) if typical is not None else None)


@pytest.mark.parametrize("issue_s, spin", [
    (1.0 * MS, SPIN_MARGIN * 1.0 * MS),
    (1.0 * US, MIN_SPIN_S),  # the floor
    (0.4, MAX_SPIN_S),  # a host-bound call: the cap; the row says the rest
    (None, MIN_SPIN_S),  # --warmup 0 and nothing seen
])
def test_the_spin_is_the_margin_times_the_issue_within_floor_and_cap(issue_s, spin):
    assert spin_for(issue_s) == pytest.approx(spin)


def test_per_iteration_spin_from_one_ranks_issue_times():
    def spin(issue_s):
        return spin_for(typical_issue_s(issue_s))

    assert spin([0.8]) == MAX_SPIN_S  # --warmup 1 after a slow connection: capped, not 1.6 s
    assert spin([0.1, 1e-6, 2e-6]) == MIN_SPIN_S
    assert spin([0.2, 3 * MS, 3 * MS]) == pytest.approx(SPIN_MARGIN * 3 * MS)


@pytest.mark.parametrize("issue_s, bound", [
    (25 * US, LAUNCH_QUEUE_ENTRIES // 13),  # a builtin collective from Python: at most 13 queue entries
    (40 * US, LAUNCH_QUEUE_ENTRIES // 20),  # the slowest builtin issue of the review's world-8 estimate
    (2 * US, LAUNCH_QUEUE_ENTRIES),  # one entry per unit (a graph replay)
    (5 * MS, 1),  # a hand-written ring's many groups: one call per segment
    (None, LAUNCH_QUEUE_ENTRIES),
])
def test_the_launch_queue_bounds_a_segment_by_the_entries_an_issue_time_can_hold(issue_s, bound):
    assert queue_bound(issue_s) == bound


def test_nccl_tests_default_batch_of_20_fits_one_segment_at_the_issue_times_of_a_world_8_node():
    """The review's estimate for 8 GPUs: 25–40 µs per call; nccl-tests' -n 20 must be one segment, one spin."""
    for issue_s in (15 * US, 25 * US, 40 * US):
        plan = batch_plan(20, issue_s)
        assert plan.segments == [20], (issue_s, plan)
        assert plan.spin_s(20) == pytest.approx(SPIN_MARGIN * 20 * issue_s)


@pytest.mark.parametrize("units, issue_s, segments", [
    (1000, 25 * US, [39] * 12 + [38] * 14),  # --batch-calls auto's 1000 calls at 25 µs: 512 entries // 13 per call
    (20, 52 * US, [10, 10]),  # nccl-tests' -n 20 past 51.2 µs of issue: two even halves, not 19 and a lone 1
    (100, 100 * US, [10] * 10),  # 50 entries per call at most
    (7, 30 * MS, [1] * 7),  # a unit longer than half the cap: one per segment, its spin capped (host-bound)
    (3, None, [3]),
])
def test_a_long_batch_is_cut_into_segments_that_one_spin_each_covers(units, issue_s, segments):
    plan = batch_plan(units, issue_s)
    assert plan.segments == segments
    assert sum(plan.segments) == units and max(plan.segments) - min(plan.segments) <= 1  # even: no lone call
    assert max(plan.segments) <= plan.per_segment
    assert all(plan.spin_s(count) <= MAX_SPIN_S for count in plan.segments)
    if issue_s is not None and issue_s * SPIN_MARGIN <= MAX_SPIN_S:  # every segment covered with the margin
        assert all(plan.spin_s(count) >= SPIN_MARGIN * issue_s * count for count in plan.segments)
        # and no segment holds more queue entries than the budget, at the floor's cost per entry
        assert all(count * math.ceil(issue_s / ENTRY_ISSUE_FLOOR_S) <= LAUNCH_QUEUE_ENTRIES
                   for count in plan.segments)


def test_every_rank_plans_alike_from_the_agreed_issue_time():
    """The ranks agree on the slowest rank's issue time; the plan is then a function of that figure alone, so every
    rank issues the same segments (their barriers pair up) behind spins of one length."""
    seen = {0: 18 * US, 1: 31 * US, 2: 24 * US}
    agreed = max(seen.values())
    plans = {rank: batch_plan(200, agreed) for rank in seen}
    assert len({(plan.per_segment, tuple(plan.segments), plan.spin_s(plan.per_segment)) for plan in
                plans.values()}) == 1
    assert plans[0].spin_s(plans[0].per_segment) >= SPIN_MARGIN * seen[1] * plans[0].per_segment


class _FakeSpinningTimer:
    """The timer's side of the agreement: issue times seen, calls it still wants, the spin it was given."""

    spins = True

    def __init__(self, warm_issue_s):
        self.issue_s, self.extra_calls, self.agreed = list(warm_issue_s), 0, "unset"

    def calls_to_size_spin(self):
        return max(0, 4 - len(self.issue_s))

    def time_iterations(self, run, iterations):
        self.extra_calls += iterations
        self.issue_s += [20 * US] * iterations
        return [0.0] * iterations

    def issue_seen(self):
        return [typical_issue_s(self.issue_s), 0.0]

    def size_spin(self, agreed):
        self.agreed = agreed


def test_the_agreement_takes_more_issue_times_when_the_warm_up_saw_too_few_and_uses_the_ranks_maximum():
    timer = _FakeSpinningTimer([0.3])  # --warmup 1: only the connecting call
    agree_on_spin(timer, lambda: None, lambda needs: [max(needs[0], 35 * US), needs[1]])  # another rank: 35 µs
    assert timer.extra_calls == 3
    assert timer.agreed == pytest.approx([35 * US, 0.0])
    quiet = _FakeSpinningTimer([0.3, 10 * US, 10 * US, 10 * US])
    agree_on_spin(quiet, lambda: None, lambda needs: needs)
    assert quiet.extra_calls == 0 and quiet.agreed == pytest.approx([10 * US, 0.0])


def test_a_timer_that_does_not_spin_agrees_on_nothing_and_records_no_issue():
    timer = CpuTimer(lambda: None)
    calls = []
    agree_on_spin(timer, lambda: None, lambda need: calls.append(need) or need)
    assert calls == []  # no collective: gloo's ranks skip the agreement alike
    assert combined_issue(timer, lambda values: values).issue_s_per_call is None


@pytest.mark.parametrize("issue_us, time_us, covered, bound", [
    (25.0, 10.0, True, True),  # the review's world-8 estimate at 8 B: the host is the bottleneck without the spin
    (25.0, 31.0, True, True),  # just within HOST_BOUND_SHARE
    (25.0, 40.0, True, False),
    (5.0, 900.0, False, True),  # a spin ended before the last call was issued
    (25.0, 0.0, True, False),  # a no-op read as 0: nothing to fall behind
    (None, 10.0, None, None),  # gloo: nothing issued ahead
])
def test_the_host_bound_rule(issue_us, time_us, covered, bound):
    issue_s = None if issue_us is None else issue_us * US
    assert is_host_bound(issue_s, time_us * US, covered) is bound
    if bound is not None and covered:
        assert bound == (issue_us >= HOST_BOUND_SHARE * time_us > 0)


def test_cover_compares_each_call_with_its_measured_spin():
    # asked for 2 ms, the spins ran 1 ms (the GPU clock rose after calibration): two of three calls outlasted them
    assert cover_text([1.5 * MS, 0.5 * MS, 1.2 * MS], [1.0 * MS] * 3) == (
        "; host issue outlasted the 1 ms spin (measured) in 2 of 3 calls (max 1.5 ms): their launch latency is in "
        "the time")
    assert cover_text([0.5 * MS, 0.7 * MS], [2.0 * MS, 2.0 * MS]) == (
        "; a 2 ms spin (measured) covered host issue in all 2 calls (max 0.7 ms)")
    assert cover_text([], []) == ""


def test_gloo_on_cuda_tensors_has_no_spin_and_its_note_says_the_call_blocks_the_host():
    timer = CudaTimer(lambda: None, host_blocking=True)
    note = timer.launch_cover()
    assert note == HOST_BLOCKING_NOTE and not timer.spins
    assert "no spin" in note and "returns only when the call is done" in note and "launch latency" not in note
    assert "blocks the host" in timer.batch_clock_text(BatchOptions())


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
    agree_on_spin(timer, run, lambda need: need)
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
    agree_on_spin(timer, lambda: data.add_(1), lambda need: need)
    started = time.perf_counter()
    timer.time_iterations(lambda: data.add_(1), 5)
    assert time.perf_counter() - started < 5 * 2 * 0.01  # no 20 ms spin before each call
    assert timer.launch_cover() == HOST_BLOCKING_NOTE


@needs_gpu
def test_on_a_gpu_a_batch_behind_the_spin_times_the_device_not_the_host():
    """Each call sleeps 1 ms on the host and queues 0.1 ms of device work: host-clocked, a call would cost 1 ms; behind
    the spin the batch reads the device's 0.1 ms, every segment covered, and the record says the issue (≥ 1 ms)
    reached the time per call: host-bound."""
    def run():
        time.sleep(1 * MS)
        spin_device(0.1 * MS)

    timer = CudaTimer(lambda: None)
    timer.time_iterations(run, 4)
    agree_on_spin(timer, run, lambda need: need)
    batches = timer.time_batches(run, 2, 10)
    assert all(0.05 * MS < value < 0.5 * MS for value in batches.per_call_s), batches.per_call_s
    record = timer.issue_record()
    assert record.covered is True and record.issue_s_per_call >= 1 * MS
    assert is_host_bound(record.issue_s_per_call, min(batches.per_call_s), record.covered)
    assert "covered the host's issue" in timer.launch_cover(), timer.launch_cover()
