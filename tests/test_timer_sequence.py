"""The order of what the CUDA timer issues, read from a recorded sequence (commbench/measure/device_stream.py): after
the spin the ranks meet on the device and only then does the start mark go on the stream, so a rank's timed interval
never holds a wait for a slower peer's spin; the spin is sized from what it must cover (the meet, the start mark and
the call, from its launch to the call's return) and judged by that same quantity.

Two ranks on gloo-on-CUDA with spins of different lengths cannot run here (no GPU), and on a GPU the skew is a
property of two devices' clocks: what a CPU can check is the sequence and the arithmetic. The stream stand-in below
only records; its marks' times are their positions in the record (1 µs apart), so no test reads a duration from it."""

import time

import pytest

from commbench.measure.spin_plan import SPIN_MARGIN, batch_plan
from commbench.measure.timers import BatchOptions, CudaTimer
from commbench.measure.timing import agree_on_spin

pytestmark = pytest.mark.no_process

CYCLES_PER_S = 1e9


class _Mark:
    def __init__(self, log: list[str], position: int):
        self._log, self.position = log, position

    def seconds_to(self, later: "_Mark") -> float:
        return (later.position - self.position) * 1e-6

    def wait(self) -> None:
        self._log.append("wait for mark")


class _RecordingStream:
    """Records each operation the timer issues to the device, in order."""

    spin_available = True

    def __init__(self, log: list[str]):
        self.log = log
        self.spins_asked_s: list[float] = []

    def mark(self) -> _Mark:
        self.log.append("mark")
        return _Mark(self.log, len(self.log))

    def wait_stream(self) -> None:
        self.log.append("wait for stream")

    def wait_device(self) -> None:
        self.log.append("wait for device")

    def calibrate(self) -> None:
        self.log.append("calibrate")

    def cycles_for(self, seconds: float) -> int:
        self.spins_asked_s.append(seconds)
        return int(seconds * CYCLES_PER_S)

    def spin(self, cycles: int) -> None:
        self.log.append("spin")


def _timer(log: list[str], *, meet_s: float = 0.0, meet: bool = True) -> tuple[CudaTimer, _RecordingStream]:
    def meet_on_device() -> None:
        time.sleep(meet_s)
        log.append("meet")

    stream = _RecordingStream(log)
    timer = CudaTimer(lambda: log.append("barrier"), meet=meet_on_device if meet else None, device=stream)
    return timer, stream


def _call(log: list[str], host_s: float = 0.0):
    def run() -> None:
        time.sleep(host_s)
        log.append("call")
    return run


def _sized(log: list[str], **kwargs) -> tuple[CudaTimer, _RecordingStream]:
    timer, stream = _timer(log, **kwargs)
    agree_on_spin(timer, _call(log), lambda needs: needs)
    log.clear()
    return timer, stream


def test_per_iteration_the_ranks_meet_after_the_spin_and_before_the_start_mark():
    log: list[str] = []
    timer, _ = _sized(log)
    timer.time_iterations(_call(log), 2)
    one = ["barrier", "wait for stream", "mark", "spin", "meet", "mark", "call", "mark"]
    assert log == one * 2 + ["wait for device"]


def test_a_batch_segment_meets_after_its_spin_and_before_its_start_mark():
    log: list[str] = []
    timer, _ = _sized(log)
    timer.time_batches(_call(log), 1, 3)
    assert log == ["barrier", "wait for stream", "mark", "spin", "meet", "mark", "call", "call", "call", "mark",
                   "wait for mark"]


def test_every_segment_of_a_long_batch_has_its_own_spin_and_meet():
    log: list[str] = []
    timer, _ = _sized(log)
    plan_segments = batch_plan(2000, timer._issue_s, timer._overhead_s).segments
    timer.time_batches(_call(log), 1, 2000)
    assert log.count("spin") == log.count("meet") == len(plan_segments) > 1
    for index, entry in enumerate(log):
        if entry == "meet":  # each meet right after a spin, right before the segment's start mark
            assert log[index - 1] == "spin" and log[index + 1] == "mark"


def test_with_a_graph_or_waits_the_host_clock_times_the_batch_and_nobody_meets():
    log: list[str] = []
    timer, _ = _sized(log)
    timer.time_batches(_call(log), 1, 2, BatchOptions(blocking=2))
    assert "meet" not in log and "spin" not in log


def test_the_timer_issues_no_meet_where_it_has_none():
    """A timer given no meet (a single rank's own test, a caller with no device collective) spins and times alike."""
    log: list[str] = []
    timer, _ = _sized(log, meet=False)
    timer.time_iterations(_call(log), 1)
    assert log == ["barrier", "wait for stream", "mark", "spin", "mark", "call", "mark", "wait for device"]


def test_the_spin_is_sized_from_the_host_time_it_must_cover_the_meet_included():
    """A meet that takes 2 ms of host time to issue and a call that takes 1 ms: the spin must outlast both (3 ms from
    its launch to the call's return), so it is sized from their sum with the margin, not from the call alone."""
    log: list[str] = []
    meet_s, call_s = 2e-3, 1e-3
    timer, stream = _timer(log, meet_s=meet_s)
    agree_on_spin(timer, _call(log, call_s), lambda needs: needs)
    issue_s, overhead_s = timer._issue_s, timer._overhead_s
    assert issue_s >= call_s and overhead_s >= meet_s
    stream.spins_asked_s.clear()
    timer.time_iterations(_call(log, call_s), 1)
    assert stream.spins_asked_s == [pytest.approx(SPIN_MARGIN * (issue_s + overhead_s))]
    assert stream.spins_asked_s[0] >= SPIN_MARGIN * (meet_s + call_s)


def test_a_batch_segment_spin_covers_its_fixed_cost_and_its_calls():
    log: list[str] = []
    timer, stream = _timer(log, meet_s=2e-3)
    agree_on_spin(timer, _call(log, 1e-4), lambda needs: needs)
    stream.spins_asked_s.clear()
    timer.time_batches(_call(log, 1e-4), 1, 4)
    plan = batch_plan(4, timer._issue_s, timer._overhead_s)
    assert plan.segments == [4]
    assert stream.spins_asked_s == [pytest.approx(plan.spin_s(4))]
    assert plan.spin_s(4) >= SPIN_MARGIN * (2e-3 + 4 * 1e-4)


def test_the_ranks_agree_on_both_host_times_element_wise():
    """The agreement is one element-wise maximum over the ranks of [issue per call, fixed cost ahead of it]: the
    slowest rank's of each, so every rank plans the same spins."""
    log: list[str] = []
    timer, _ = _timer(log)
    agree_on_spin(timer, _call(log), lambda needs: [max(needs[0], 40e-6), max(needs[1], 25e-6)])
    assert timer._issue_s >= 40e-6 and timer._overhead_s >= 25e-6
