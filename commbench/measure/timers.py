"""The CPU and the CUDA timer: how one rank times a call per iteration and a batch of back-to-back calls, and what it
saw of the host's issue meanwhile.

per-iteration: every sample is one call, all ranks released together by a barrier.
batch (nccl-tests' BenchTime): one barrier, then K calls back to back; the sample is the time per call. On CPU (gloo,
whose calls return when done) a host clock brackets the calls. On CUDA the device spins ahead of the host
(commbench/measure/spin_plan.py): a spin kernel long enough to cover the issue of the whole segment, a CUDA event
after it, the calls, an event after them; the time is the calls' device time, not the host's issue time.
"""

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from commbench.measure.device_stream import CudaStream, DeviceStream, Mark
from commbench.measure.spin_plan import MIN_SPIN_S, batch_plan, cover_text, queue_bound, spin_for, typical_issue_s
from commbench.names import MEAN, BlockingMode, RankAverage


@dataclass(frozen=True)
class BatchOptions:
    """How one batch is issued, timed and combined over ranks; the defaults are nccl-tests' defaults."""

    agg: int = 1
    """Calls per iteration (-m); the iteration callable issues them (grouped where torch can); times are per call."""
    blocking: BlockingMode = 0
    """Waits inside the batch (-z, names.BLOCKING_MODES)."""
    graph_launches: int = 0
    """CUDA only (-G): capture the batch's iterations in a CUDA graph once, then time this many replays of it."""
    iteration_times: bool = False
    """Also record each iteration's time inside the batch (-I 1): host clock on CPU, CUDA events on GPUs."""
    average: RankAverage = MEAN
    """How the ranks' times per call combine into the sample (-a, names.RANK_AVERAGES)."""

    def calls(self, iterations: int) -> int:
        """Collective calls one batch of `iterations` iterations times."""
        return iterations * self.agg * max(1, self.graph_launches)


@dataclass(frozen=True)
class Batches:
    """What a timer's time_batches returns on one rank."""

    per_call_s: list[float]
    """Each batch's time per call."""
    iteration_s: list[list[float]]
    """Each batch's per-iteration times per call (empty lists without BatchOptions.iteration_times)."""


@dataclass(frozen=True)
class IssueRecord:
    """What a timer saw of the host's issue in the timed calls: one rank's, or (timing.measure) every rank's."""

    issue_s_per_call: float | None
    """Host time to issue one call: the median over timed calls (per-iteration), a segment's issue over its calls
    (batch). None where nothing is issued ahead of the device (gloo: its calls return when done)."""
    covered: bool | None
    """Every spin outlasted the host's issue of what it covered. None where no spin ran."""


NOT_ISSUED_AHEAD = IssueRecord(None, None)
NCCL_TESTS_DEFAULTS = BatchOptions()
"""A batch as nccl-tests issues it by default: one call per iteration, no waits, no graph, the mean over ranks."""
ISSUE_CALLS_AFTER_FIRST = 3
"""Issue times the spin is sized from, besides the first call's (which may connect NCCL's peers): calls the warm-up
did not make are made untimed before the timed ones."""


class Timer(Protocol):
    """What timing.measure asks of a rank's timer (CpuTimer, CudaTimer): time calls per iteration or in batches, size
    the spin the device runs ahead of the host behind, and say what it saw of the host's issue."""

    method: str
    """How a call is timed, for the row's timing_method."""
    spins: bool
    """Whether the device runs ahead of the host behind a spin (and the ranks agree on its length first)."""

    def time_iterations(self, run: Callable[[], object], iterations: int) -> list[float]: ...

    def time_batches(self, run: Callable[[], object], batches: int, iterations: int,
                     options: BatchOptions = NCCL_TESTS_DEFAULTS) -> Batches: ...

    def calls_to_size_spin(self) -> int: ...

    def issue_seen(self) -> list[float] | None: ...

    def size_spin(self, agreed: list[float] | None) -> None: ...

    def issue_record(self) -> IssueRecord: ...

    def calls_per_segment(self) -> int | None: ...

    def launch_cover(self) -> str: ...

    def batch_clock_text(self, options: BatchOptions) -> str: ...


class CpuTimer:
    """Wall-clock time after a barrier; the host waits for gloo's calls, so the clock brackets the whole call."""

    method = "host clock"
    spins = False
    """Whether the device runs ahead of the host behind a spin (and the ranks agree on its length first)."""

    def __init__(self, barrier: Callable[[], None]):
        self._barrier = barrier

    def time_iterations(self, run: Callable[[], object], iterations: int) -> list[float]:
        samples = [0.0] * iterations
        barrier, clock = self._barrier, time.perf_counter
        for index in range(iterations):
            barrier()
            start = clock()
            run()
            samples[index] = clock() - start
        return samples

    def time_batches(self, run: Callable[[], object], batches: int, iterations: int,
                     options: BatchOptions = NCCL_TESTS_DEFAULTS) -> Batches:
        """Each batch: a barrier, then `iterations` calls of run (one iteration each) back to back; seconds per call.
        gloo's calls return when done, so the host clock brackets the work and -z's wait is the call itself."""
        if options.graph_launches:
            raise ValueError("CUDA graphs replay GPU work: there is none on CPU")
        return _host_clock_batches(run, batches, iterations, options, barrier=self._barrier)

    def calls_to_size_spin(self) -> int:
        return 0

    def issue_seen(self) -> list[float] | None:
        return None

    def size_spin(self, agreed: list[float] | None) -> None:
        """Nothing to size: the host clock includes the issue time by design on CPU."""

    def issue_record(self) -> IssueRecord:
        return NOT_ISSUED_AHEAD

    def calls_per_segment(self) -> int | None:
        """The most iterations one spin covers (None: no spin, no bound)."""
        return None

    def launch_cover(self) -> str:
        return ""

    def batch_clock_text(self, options: BatchOptions) -> str:
        return f"{self.method} (gloo's calls block the host: its issue is part of the call, nothing runs ahead)"


def _host_clock_batches(run: Callable[[], object], batches: int, iterations: int, options: BatchOptions, *,
                        barrier: Callable[[], None]) -> Batches:
    """gloo's calls return when done, so a host clock around them brackets the work, and -z's wait is the call
    itself (a barrier after each iteration for -z 1 and 3, whose time -z 3 leaves out)."""
    clock = time.perf_counter
    plain = options.blocking == 0 and not options.iteration_times
    per_call: list[float] = []
    per_iteration: list[list[float]] = []
    for _ in range(batches):
        barrier()
        if plain:  # the common case: nothing in the loop but the calls
            start = clock()
            for _ in range(iterations):
                run()
            per_call.append((clock() - start) / options.calls(iterations))
            per_iteration.append([])
            continue
        start = previous = clock()
        excluded, spans = 0.0, []
        for _ in range(iterations):
            run()
            now = clock()
            spans.append(now - previous)
            if options.blocking in (1, 3):
                barrier()
                if options.blocking == 3:  # the barrier's time is not the collective's
                    after = clock()
                    excluded, now = excluded + after - now, after
            previous = now
        per_call.append((clock() - start - excluded) / options.calls(iterations))
        per_iteration.append([span / options.agg for span in spans] if options.iteration_times else [])
    return Batches(per_call, per_iteration)


@dataclass(frozen=True)
class _Segment:
    issue_s: float
    """Host time from the first call of the segment to the return of its last."""
    calls: int
    spin_s: float
    """How long the device was ahead: the spin and the ranks' meet after it, measured by CUDA events around them."""
    covered: bool
    """The host issued the last call before the spin ended: from the spin's launch to the last call's return took
    no longer than the spin itself."""


class CudaTimer:
    """GPU time from CUDA events on the stream the collective is ordered on, behind a spin kernel that keeps the
    device busy while the host issues: per iteration one call behind its spin, per batch a segment of calls behind
    one spin. After the spin the ranks meet on the device (`meet`: a one-element collective on the same stream), and
    only then is the start event recorded: each rank calibrated its own spin and each GPU runs it at its own clock,
    so the spins end apart, and without the meet the rank whose spin ended first would wait for its peers inside its
    first timed call. The spin is sized from the host time it must cover (from its launch to the last call's return:
    the meet, the start event and the calls), seen before the timed calls and agreed over the ranks (`size_spin`);
    CUDA events around each spin and meet measure how long the device really was ahead, which is what the cover is
    judged against.

    host_blocking (gloo on CUDA tensors): the call returns only when it is done, and gloo's device copies wait on the
    stream, so a spin would only add its own length to every iteration's wall time; there is no launch latency to
    hide, and no spin is run. -z's waits (blocking) and a torch without the spin kernel time batches by the host
    clock, as nccl-tests does."""

    method = "CUDA events"

    def __init__(self, barrier: Callable[[], None], *, meet: Callable[[], None] | None = None,
                 host_blocking: bool = False, device: DeviceStream | None = None):
        self._barrier = barrier
        self._meet = meet
        self._host_blocking = host_blocking
        self._device: DeviceStream = device or CudaStream()
        self.spins = not host_blocking and self._device.spin_available
        self._issue_s: float | None = None
        """The agreed issue time of one iteration (the slowest rank's), which every batch plan rests on."""
        self._overhead_s = 0.0
        """The agreed host time from a spin's launch to the first call's issue (the meet, the start event)."""
        self._spin_s = MIN_SPIN_S
        self._sized = False
        self._warm_issue_s: list[float] = []
        """Issue times of every call before size_spin, in order (warm-up, then --timing auto's calls)."""
        self._warm_launch_s: list[float] = []
        """The same calls' host time from their spin's launch to their return: what a spin must cover."""
        self._timed_issue_s: list[float] = []
        self._timed_cover: list[tuple[float, float]] = []
        """Per-iteration timing: each timed call's host issue time, and (from the spin's launch to the call's return,
        the device time of its spin and meet) for the cover."""
        self._segments: list[_Segment] = []

    def _ahead(self, cycles: int) -> Mark:
        """Spin the device for `cycles`, then meet the peers on it: returns the mark before the spin. Everything
        after this is issued while the device is busy, and the next mark starts when every rank's spin has ended."""
        before = self._device.mark()
        self._device.spin(cycles)
        if self._meet is not None:
            self._meet()
        return before

    def time_iterations(self, run: Callable[[], object], iterations: int) -> list[float]:
        device, barrier, clock = self._device, self._barrier, time.perf_counter
        cycles = device.cycles_for(self._spin_s) if self.spins else 0
        times_s, issue_s, launch_s, ahead_s = [0.0] * iterations, [0.0] * iterations, [0.0] * iterations, []
        marks: list[tuple[Mark | None, Mark, Mark]] = []
        for index in range(iterations):
            barrier()
            device.wait_stream()
            launched = clock()  # from the spin's launch: the spin must outlast all the host does until run returns
            before = self._ahead(cycles) if self.spins else None
            start = device.mark()
            issuing = clock()
            run()
            returned = clock()
            issue_s[index], launch_s[index] = returned - issuing, returned - launched
            marks.append((before, start, device.mark()))
        device.wait_device()
        for index, (before, start, end) in enumerate(marks):
            times_s[index] = start.seconds_to(end)
            if before is not None:
                ahead_s.append(before.seconds_to(start))
        if not self._sized:
            self._warm_issue_s += issue_s
            self._warm_launch_s += launch_s
        elif self.spins:
            self._timed_issue_s += issue_s
            self._timed_cover += list(zip(launch_s, ahead_s))
        return times_s

    def calls_to_size_spin(self) -> int:
        """Untimed calls still wanted before the spin is sized (its issue times are what sizes it)."""
        return max(0, 1 + ISSUE_CALLS_AFTER_FIRST - len(self._warm_issue_s)) if self.spins else 0

    def issue_seen(self) -> list[float] | None:
        """This rank's typical host times so far (spin_plan.typical_issue_s): [issue of one iteration, the fixed cost
        from a spin's launch to the iteration's issue (the meet, the start event)]; None with nothing seen."""
        issue = typical_issue_s(self._warm_issue_s)
        if issue is None:
            return None
        fixed = typical_issue_s([launch - issued for launch, issued in zip(self._warm_launch_s, self._warm_issue_s)])
        return [issue, max(0.0, fixed or 0.0)]

    def size_spin(self, agreed: list[float] | None) -> None:
        """After warm-up, before the timed calls: the spin from the host times the ranks agreed on (the slowest
        rank's), sized from what it must cover, the fixed cost and the call's issue; calibrated here, outside any
        timed stretch."""
        self._issue_s, self._overhead_s = (agreed[0], agreed[1]) if agreed else (None, 0.0)
        self._spin_s = spin_for(None if self._issue_s is None else self._overhead_s + self._issue_s)
        self._sized = True
        if self.spins:
            self._device.calibrate()

    def calls_per_segment(self) -> int | None:
        """The most iterations one segment holds at the agreed issue time (spin_plan.queue_bound); --batch-calls auto
        takes no more, so that a sample is one segment behind one spin."""
        return queue_bound(self._issue_s) if self.spins else None

    def time_batches(self, run: Callable[[], object], batches: int, iterations: int,
                     options: BatchOptions = NCCL_TESTS_DEFAULTS) -> Batches:
        """nccl-tests' BenchTime, with the device ahead of the host: see _spun_batches. With -z's waits inside the
        batch each call's issue is in its time by design (nccl-tests -z), and gloo on CUDA tensors blocks the host:
        those keep nccl-tests' host clock."""
        graph = _capture(run, iterations) if options.graph_launches else None
        if options.blocking or not self.spins:
            return self._host_clocked_batches(run, graph, batches, iterations, options)
        return self._spun_batches(run if graph is None else graph.replay, batches, iterations, options,
                                  graph=graph is not None)

    def _host_clocked_batches(self, run: Callable[[], object], graph: torch.cuda.CUDAGraph | None, batches: int,
                              iterations: int, options: BatchOptions) -> Batches:
        """nccl-tests' own clock: after a barrier on an idle device, a host clock from before the first call is
        issued to after the stream has finished the last (so it holds the issue latency of the first call and the
        wake-up of the last wait). -I brackets each iteration with CUDA events, paired with -z 3 so that the barrier
        stays outside. A graph's replays drop -z's waits: they are not captured (the label says so)."""
        device, clock = self._device, time.perf_counter
        per_call: list[float] = []
        per_iteration: list[list[float]] = []
        for _ in range(batches):
            self._barrier()
            device.wait_stream()
            marks: list[Mark] | None = [] if options.iteration_times and graph is None else None
            excluded = 0.0
            start = clock()
            if graph is not None:
                for _ in range(options.graph_launches):
                    graph.replay()
            else:
                for _ in range(iterations):
                    if marks is not None:
                        marks.append(device.mark())
                    run()
                    if options.blocking:
                        if marks is not None and options.blocking == 3:
                            marks.append(device.mark())  # paired marks: the barrier stays outside
                        device.wait_stream()
                        if options.blocking in (1, 3):
                            waited = clock()
                            self._barrier()
                            if options.blocking == 3:
                                excluded += clock() - waited
                if marks is not None and options.blocking != 3:
                    marks.append(device.mark())
            device.wait_stream()
            per_call.append((clock() - start - excluded) / options.calls(iterations))
            per_iteration.append(_spans_s(marks, paired=options.blocking == 3, agg=options.agg) if marks else [])
        return Batches(per_call, per_iteration)

    def _spun_batches(self, unit: Callable[[], object], batches: int, iterations: int, options: BatchOptions, *,
                      graph: bool) -> Batches:
        """Each batch as the plan's segments (usually one): a barrier, a sync, a spin long enough to cover the
        segment's issue, the ranks' meet on the device, a mark, the segment's calls (or graph replays), a mark. A
        batch's time per call is the segments' device time over its calls: the host's issue is under the spin, not
        in the time. With -I a mark after each iteration gives its time."""
        device = self._device
        units = options.graph_launches if graph else iterations
        calls_per_unit = options.calls(iterations) // units
        # a graph replay issues faster than the plain iteration whose issue time the plan has: the safe side
        plan = batch_plan(units, self._issue_s, self._overhead_s)
        segment_cycles = [device.cycles_for(plan.spin_s(count)) for count in plan.segments]
        marked = options.iteration_times and not graph
        clock = time.perf_counter
        per_call: list[float] = []
        per_iteration: list[list[float]] = []
        for _ in range(batches):
            device_s, spans = 0.0, []
            for count, cycles in zip(plan.segments, segment_cycles):
                self._barrier()
                device.wait_stream()
                launched = clock()
                before = self._ahead(cycles)
                marks = [device.mark()]
                issuing = clock()
                if marked:  # -I: a mark after each iteration
                    for _ in range(count):
                        unit()
                        marks.append(device.mark())
                else:  # nothing in the loop but the calls
                    for _ in range(count):
                        unit()
                issued = clock()
                if not marked:
                    marks.append(device.mark())
                marks[-1].wait()
                ahead_s = before.seconds_to(marks[0])
                device_s += marks[0].seconds_to(marks[-1])
                self._segments.append(_Segment(issued - issuing, count * calls_per_unit, ahead_s,
                                               issued - launched <= ahead_s))
                if marked:
                    spans += _spans_s(marks, paired=False, agg=options.agg)
            per_call.append(device_s / options.calls(iterations))
            per_iteration.append(spans)
        return Batches(per_call, per_iteration)

    def issue_record(self) -> IssueRecord:
        """This rank's issue time per call in the timed calls and whether every spin covered it."""
        if self._segments:
            calls = sum(segment.calls for segment in self._segments)
            return IssueRecord(sum(segment.issue_s for segment in self._segments) / calls,
                               all(segment.covered for segment in self._segments))
        if self._timed_issue_s:
            return IssueRecord(statistics.median(self._timed_issue_s),
                               all(launch <= spin for launch, spin in self._timed_cover))
        return NOT_ISSUED_AHEAD

    def launch_cover(self) -> str:
        """What covered the host's issue time in the timed calls, for the row's timing_method."""
        if self._host_blocking:
            return HOST_BLOCKING_NOTE
        if not self._device.spin_available:
            return "; no spin kernel (torch.cuda._sleep missing): host launch latency is in the time"
        meet = " and the ranks' meet on the device" if self._meet is not None else ""
        if self._segments:
            return segment_cover_text(self._segments, meet)
        return cover_text([launch for launch, _ in self._timed_cover], [spin for _, spin in self._timed_cover], meet)

    def batch_clock_text(self, options: BatchOptions) -> str:
        if self._host_blocking:
            return "host clock after the device finished (gloo on CUDA tensors blocks the host)"
        if options.blocking:
            return "host clock after the device finished (with -z's waits each call's issue is in its time)"
        if not self.spins:
            return "host clock after the device finished (no spin kernel: the host's issue is in the time)"
        return "CUDA events around the calls, issued behind a spin that covers the host's issue"


def segment_cover_text(segments: list[_Segment], meet: str = "") -> str:
    """timing_method's words on a batch's spins: how many segments, how long their spins (and the meet after them,
    `meet` names it) ran, and whether each outlasted the host's issue of its calls."""
    count = len(segments)
    longest = max(segment.calls for segment in segments)
    spin_ms = statistics.median(segment.spin_s for segment in segments) * 1e3
    uncovered = sum(not segment.covered for segment in segments)
    what = (f"{count} segment{'s' if count > 1 else ''} of up to {longest} calls, each behind a {spin_ms:.2g} ms "
            f"spin{meet}")
    if not uncovered:
        return f"; {what} (measured) that covered the host's issue"
    return (f"; {what} (measured); in {uncovered} of {count} the host was still issuing when the spin ended: "
            "host-bound, its issue time is in the time")


HOST_BLOCKING_NOTE = ("; no spin: gloo on CUDA tensors returns only when the call is done (it stages the data "
                      "through host memory), so the events hold the whole call, its host part included")


def _spans_s(marks: list[Mark], *, paired: bool, agg: int) -> list[float]:
    """Per-call seconds of each iteration from its marks: consecutive marks share a boundary, paired ones (-z 3)
    bracket each iteration alone (nccl-tests' getElapsedTimes)."""
    pairs = zip(marks[::2], marks[1::2]) if paired else zip(marks, marks[1:])
    return [start.seconds_to(end) / agg for start, end in pairs]


def _capture(run: Callable[[], object], iterations: int) -> torch.cuda.CUDAGraph:
    """The batch's iterations captured once as a CUDA graph (nccl-tests -G), on a side stream as torch requires.
    Thread-local capture, as nccl-tests' (cudaStreamCaptureModeThreadLocal): the process group's watchdog thread keeps
    querying its events meanwhile, which a global capture would forbid."""
    graph = torch.cuda.CUDAGraph()
    torch.cuda.current_stream().synchronize()
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        for _ in range(iterations):
            run()
    torch.cuda.synchronize()
    return graph
