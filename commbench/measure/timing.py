"""How a collective is timed: two modes (per-iteration and nccl-tests' batch), a CPU and a CUDA timer for each, and
the sampling loop that turns them into samples with a stopping rule.

per-iteration: every sample is one call, all ranks released together by a barrier; the sample is the slowest rank's
time. Gives the per-call distribution (p95, the CI of the median) but each sample holds the spread in barrier exit.
batch (nccl-tests' BenchTime): one barrier, then K iterations back to back between two host timestamps, the second
after the device has finished them; the sample is the time per call (total / calls) combined over ranks as nccl-tests'
-a says (the mean by default). Barrier skew and launch latency are spread over K calls. BatchOptions carries the rest
of nccl-tests' knobs: calls grouped per iteration (-m), waits inside the batch (-z), CUDA graph replay (-G), and each
iteration's own time (-I).
"""

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from commbench.measure.stats import summarize
from commbench.names import AUTO, BATCH, MEAN, PER_ITERATION, STOP_CI, STOP_ITERS, STOP_MAX_TIME

BATCH_TARGET_S = 0.005
"""--batch-calls auto: enough calls for one batch to last this long, so that a barrier's skew (5–30 µs) and one
launch latency are under 1 % of it."""
MAX_AUTO_BATCH_CALLS = 1000


@dataclass(frozen=True)
class BatchOptions:
    """How one batch is issued, timed and combined over ranks; the defaults are nccl-tests' defaults."""

    agg: int = 1
    """Calls per iteration (-m); the iteration callable issues them (grouped where torch can); times are per call."""
    blocking: int = 0
    """Waits inside the batch (-z, names.BLOCKING_MODES)."""
    graph_launches: int = 0
    """CUDA only (-G): capture the batch's iterations in a CUDA graph once, then time this many replays of it."""
    iteration_times: bool = False
    """Also record each iteration's time inside the batch (-I 1): host clock on CPU, CUDA events on GPUs."""
    average: str = MEAN
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


class CpuTimer:
    """Wall-clock time after a barrier; the host waits for gloo's calls, so the clock brackets the whole call."""

    method = "host clock"

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
                     options: BatchOptions = BatchOptions()) -> Batches:
        """Each batch: a barrier, then `iterations` calls of run (one iteration each) back to back; seconds per call.
        gloo's calls return when done, so the host clock brackets the work and -z's wait is the call itself."""
        if options.graph_launches:
            raise ValueError("CUDA graphs replay GPU work: there is none on CPU")
        barrier, clock = self._barrier, time.perf_counter
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

    def size_spin(self) -> None:
        """Nothing to size: the host clock includes the issue time by design on CPU."""

    def launch_cover(self) -> str:
        return ""


class CudaTimer:
    """GPU time from CUDA events on the stream the collective is ordered on.

    Per iteration, a spin kernel queued before the start event keeps the GPU busy while the host issues the call, so
    the interval holds the collective's device time and not the host's launch latency. The spin is sized from the
    host issue times seen before the timed calls (`spin_seconds`), and CUDA events around each spin measure how long
    it really lasted, which is what launch_cover compares each call's issue time with.

    host_blocking (gloo on CUDA tensors): the call returns only when it is done, and gloo's device copies wait on the
    stream, so a spin would only add its own length to every iteration's wall time (the sizing, from issue times
    that held the previous spin, then about triples it); there is no launch latency to hide, and no spin is run.
    """

    method = "CUDA events"

    def __init__(self, barrier: Callable[[], None], *, host_blocking: bool = False):
        self._barrier = barrier
        self._host_blocking = host_blocking
        self._spins = not host_blocking and _spin_function() is not None
        self._spin_s = MIN_SPIN_S
        self._sized = False
        self._warm_issue_s: list[float] = []
        """Issue times of every call before size_spin, in order (warm-up, then --timing auto's calls)."""
        self._timed_issue_s: list[float] = []
        self._timed_spin_s: list[float] = []
        """Each timed call's host issue time and its spin's measured duration, for launch_cover."""

    def time_iterations(self, run: Callable[[], object], iterations: int) -> list[float]:
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(iterations)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(iterations)]
        spin_starts = [torch.cuda.Event(enable_timing=True) for _ in range(iterations)] if self._spins else []
        stream = torch.cuda.current_stream()
        barrier, clock = self._barrier, time.perf_counter
        spin_cycles = _cycles_for(self._spin_s) if self._spins else 0
        issue_s = [0.0] * iterations
        for index in range(iterations):
            barrier()
            stream.synchronize()
            launched = clock()  # from the spin's launch: the spin must outlast all the host does until run returns
            if self._spins:
                spin_starts[index].record(stream)
                _spin(spin_cycles)
            starts[index].record(stream)
            run()
            issue_s[index] = clock() - launched
            ends[index].record(stream)
        torch.cuda.synchronize()
        if self._sized:
            self._timed_issue_s += issue_s
            self._timed_spin_s += [spin.elapsed_time(start) / 1e3 for spin, start in zip(spin_starts, starts)]
        else:
            self._warm_issue_s += issue_s
        return [start.elapsed_time(end) / 1e3 for start, end in zip(starts, ends)]

    def size_spin(self) -> None:
        """After warm-up, before the timed calls: the spin from the issue times seen so far (`spin_seconds`)."""
        self._spin_s = spin_seconds(self._warm_issue_s)
        self._sized = True

    def time_batches(self, run: Callable[[], object], batches: int, iterations: int,
                     options: BatchOptions = BatchOptions()) -> Batches:
        """nccl-tests' BenchTime: after a barrier on an idle device, a host clock from before the first call is
        issued to after the stream has finished the last (so it holds the issue latency of the first call and the
        wake-up of the last wait, as nccl-tests' figure does). With -G the iterations are captured once in a CUDA
        graph and the replays are timed; with -I each iteration is bracketed by CUDA events on the stream."""
        stream = torch.cuda.current_stream()
        graph = _capture(run, iterations, stream) if options.graph_launches else None
        clock = time.perf_counter
        per_call: list[float] = []
        per_iteration: list[list[float]] = []
        for _ in range(batches):
            self._barrier()
            stream.synchronize()
            marks: list | None = [] if options.iteration_times and graph is None else None
            excluded = 0.0
            start = clock()
            if graph is not None:
                for _ in range(options.graph_launches):
                    graph.replay()
            else:
                for _ in range(iterations):
                    if marks is not None:
                        marks.append(_event(stream))
                    run()
                    if options.blocking:
                        if marks is not None and options.blocking == 3:
                            marks.append(_event(stream))  # paired events: the barrier stays outside
                        stream.synchronize()
                        if options.blocking in (1, 3):
                            waited = clock()
                            self._barrier()
                            if options.blocking == 3:
                                excluded += clock() - waited
                if marks is not None and options.blocking != 3:
                    marks.append(_event(stream))
            stream.synchronize()
            per_call.append((clock() - start - excluded) / options.calls(iterations))
            per_iteration.append(_spans_s(marks, paired=options.blocking == 3, agg=options.agg) if marks else [])
        return Batches(per_call, per_iteration)

    def launch_cover(self) -> str:
        """What covered the host's issue time in the timed iterations, for the row's timing_method."""
        if self._host_blocking:
            return HOST_BLOCKING_NOTE
        if _spin_function() is None:
            return "; no spin kernel (torch.cuda._sleep missing): host launch latency is in the time"
        return cover_text(self._timed_issue_s, self._timed_spin_s)


HOST_BLOCKING_NOTE = ("; no spin: gloo on CUDA tensors returns only when the call is done (it stages the data "
                      "through host memory), so the events hold the whole call, its host part included")

MIN_SPIN_S = 1e-4
"""The shortest spin: about the host time of issuing one builtin collective from Python."""
MAX_SPIN_S = 0.05
"""The longest spin. Every timed iteration waits for its spin, so the cap bounds what a mis-sized spin costs (at
most 50 ms × iterations of wall time) when the issue times it is sized from are not the timed calls' (only the
first call was seen, or a warm-up full of stalls). 50 ms covers a ring's issue (2(n−1)·K send/recv groups, ~1 ms
at 8 ranks) up to a few hundred ranks; a call whose issue takes longer is host-bound, and launch_cover says so."""
SPIN_OVER_ISSUE = 2.0
"""The spin lasts this many times the typical issue time: room for the ordinary spread of the host's issue times."""


def spin_seconds(issue_s: list[float]) -> float:
    """The spin for a point's timed calls, from the host issue times of the calls before them (in order):
    SPIN_OVER_ISSUE × the median of those after the first, within [MIN_SPIN_S, MAX_SPIN_S].

    The first call is left out: NCCL (2.22 and later) connects a communicator's peers on first use, inside the
    first call's issue (10 ms to 1 s at scale), and hunt's and p2p's first send to a peer connects that pair; no
    later call pays it. The median, not the longest: one stall in the warm-up (a page fault, the garbage collector)
    must not make every timed call spin for it. With no call after the first, the first is all there is: its time,
    capped; with none, the shortest spin."""
    later = issue_s[1:] or issue_s
    if not later:
        return MIN_SPIN_S
    typical = statistics.median(later)
    return min(MAX_SPIN_S, max(MIN_SPIN_S, SPIN_OVER_ISSUE * typical))


def cover_text(issue_s: list[float], spin_s: list[float]) -> str:
    """timing_method's words on the timed calls' spins: a call is covered when its host issue time (from the spin's
    launch to the call's return) is at most its spin's own duration on the device, measured by CUDA events around
    the spin. The measured duration, not the one asked for: the cycles come from one calibration, and the GPU's
    clock moves with its load and temperature."""
    if not issue_s or len(spin_s) != len(issue_s):
        return ""
    calls = len(issue_s)
    outlasted = sum(issue > spin for issue, spin in zip(issue_s, spin_s))
    spin_ms, issue_ms = statistics.median(spin_s) * 1e3, max(issue_s) * 1e3
    if not outlasted:
        return f"; a {spin_ms:.2g} ms spin (measured) covered host issue in all {calls} calls (max {issue_ms:.2g} ms)"
    return (f"; host issue outlasted the {spin_ms:.2g} ms spin (measured) in {outlasted} of {calls} calls (max "
            f"{issue_ms:.2g} ms): their launch latency is in the time")


def _event(stream):
    event = torch.cuda.Event(enable_timing=True)
    event.record(stream)
    return event


def _spans_s(marks: list, *, paired: bool, agg: int) -> list[float]:
    """Per-call seconds of each iteration from its CUDA events: consecutive marks share a boundary, paired ones
    (-z 3) bracket each iteration alone (nccl-tests' getElapsedTimes)."""
    pairs = zip(marks[::2], marks[1::2]) if paired else zip(marks, marks[1:])
    return [start.elapsed_time(end) / 1e3 / agg for start, end in pairs]


def _capture(run: Callable[[], object], iterations: int, stream):
    """The batch's iterations captured once as a CUDA graph (nccl-tests -G), on a side stream as torch requires.
    Thread-local capture, as nccl-tests' (cudaStreamCaptureModeThreadLocal): the process group's watchdog thread keeps
    querying its events meanwhile, which a global capture would forbid."""
    graph = torch.cuda.CUDAGraph()
    stream.synchronize()
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        for _ in range(iterations):
            run()
    torch.cuda.synchronize()
    return graph


_spin_cycles_per_s: float | None = None


def _spin_function():
    return getattr(torch.cuda, "_sleep", None)  # private but long-standing; without it the launch is timed too


def _spin(cycles: int) -> None:
    spin = _spin_function()
    if spin is not None and cycles > 0:
        spin(cycles)


def _cycles_for(seconds: float) -> int:
    """Spin-kernel cycles that last `seconds`, from one calibration of the spin per process."""
    global _spin_cycles_per_s
    if _spin_function() is None:
        return 0
    if _spin_cycles_per_s is None:
        calibration_cycles = 1_000_000
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        _spin(calibration_cycles)  # the first launch loads the kernel
        start.record()
        _spin(calibration_cycles)
        end.record()
        end.synchronize()
        _spin_cycles_per_s = calibration_cycles / max(start.elapsed_time(end) / 1e3, 1e-9)
    return int(math.ceil(seconds * _spin_cycles_per_s))


def can_spin() -> bool:
    """Whether this torch has the spin kernel (torch.cuda._sleep)."""
    return _spin_function() is not None


def calibrate_spin() -> None:
    """Calibrate the spin now: calibrating waits for the device, so it belongs before a timed stretch that spins,
    never inside one."""
    _cycles_for(0.0)


def spin_device(seconds: float) -> None:
    """Keep the current CUDA stream busy for about `seconds` more (a spin kernel; the host does not wait)."""
    _spin(_cycles_for(seconds))


@dataclass(frozen=True)
class Measurement:
    samples_s: list[float]
    """per-iteration: each call's time on the slowest rank; batch: each batch's time per call, mean over ranks."""
    stop_reason: str
    calls_per_sample: int
    method: str
    """How the samples were taken, for the row's timing_method column."""
    timing: str = PER_ITERATION
    """The mode the samples were taken in (what --timing auto chose)."""
    iteration_s: list[list[list[float]]] | None = None
    """Batch timing with BatchOptions.iteration_times: per batch, per rank, each iteration's time per call
    (every rank holds all of them); None otherwise."""


def measure(run: Callable[[], object], *, ctx, warmup: int, iters: int, timing: str = PER_ITERATION,
            batch_calls: int | None = None, target_ci_pct: float | None = None,
            max_time_s: float | None = None, on_timed_start: Callable[[], None] | None = None,
            barrier: Callable[[], None] | None = None, batch: BatchOptions = BatchOptions()) -> Measurement:
    """Warm up, then take `iters` samples in the timing mode: once, or (adaptive) until the 95 % CI of the median is
    within ±target_ci_pct or max_time_s has passed on any rank, testing after the first `iters` samples and then each
    time the samples grew by a quarter (see `next_look`). timing AUTO picks batch or per-iteration from the warm-up
    (`choose_timing`). Every rank takes the same decisions: the combined samples and the stop test are computed by
    collectives. on_timed_start is called between warm-up (finished on the device) and the first timed call.
    barrier (default ctx.barrier) is what releases the ranks before a timed call or batch. run is one iteration: in
    batch timing it issues batch.agg calls."""
    timer = ctx.platform.timer(barrier or ctx.barrier)
    started = time.monotonic()
    # a batch starts after a synchronising call (nccl-tests runs one even with -w 0); auto batch size needs one
    warm_calls = max(warmup, 1) if timing == BATCH else warmup
    warm = ctx.max_over_ranks(timer.time_iterations(run, warm_calls)) if warm_calls else []
    chosen, why = timing, ""
    if timing == AUTO:
        warm, chosen, why = _auto_timing(run, timer, ctx)
    timer.size_spin()
    if on_timed_start:
        on_timed_start()
    iteration_s: list[list[list[float]]] | None = [] if chosen == BATCH and batch.iteration_times else None
    if chosen == BATCH:
        iterations = batch_calls or auto_batch_calls(warm)
        calls = batch.calls(iterations)

        def take(count: int) -> list[float]:
            batches = timer.time_batches(run, count, iterations, batch)
            if iteration_s is not None:  # per rank: nccl-tests' per-process rows (analyze_perf_json --straggler)
                by_rank = ctx.gather_objects(batches.iteration_s)
                iteration_s.extend([rank[index] for rank in by_rank] for index in range(count))
            return ctx.combine_over_ranks(batches.per_call_s, batch.average)
        method = f"batch: {_batch_text(iterations, batch)} per sample, {_clock_text(timer, batch)}, " \
                 f"{_AVERAGE_TEXT[batch.average]}"
    else:
        calls = 1
        take = lambda count: ctx.max_over_ranks(timer.time_iterations(run, count))  # noqa: E731
        method = f"per-iteration: barrier before each call, {timer.method}, slowest rank"
    samples = take(iters)
    sampling_started = time.monotonic()  # after the first look's samples: what sampling costs is measured from here
    taken_then = len(samples)
    while True:
        stop, elapsed_s, sampling_s = _stop_reason(samples, started, sampling_started, ctx, target_ci_pct,
                                                   max_time_s)
        if stop:
            cover = timer.launch_cover() if chosen == PER_ITERATION else ""
            return Measurement(samples, stop, calls, method + cover + why, chosen, iteration_s)
        count = next_look(len(samples))
        if sampling_s > 0 and len(samples) > taken_then:  # keep the last batch within the budget
            assert max_time_s is not None  # sampling time is measured only under the adaptive rule, which has one
            per_sample_s = sampling_s / (len(samples) - taken_then)
            count = min(count, max(LOOK_STEP_MIN, math.ceil((max_time_s - elapsed_s) / per_sample_s)))
        samples.extend(take(count))


_AVERAGE_TEXT = {"rank0": "rank 0's time", "mean": "mean over ranks", "min": "fastest rank", "max": "slowest rank"}


def _batch_text(iterations: int, options: BatchOptions) -> str:
    calls = f"{iterations} back-to-back calls" if options.agg == 1 else \
        f"{iterations} back-to-back iterations of {options.agg} grouped calls"
    if options.graph_launches:
        calls = f"{options.graph_launches} CUDA graph replays of {calls}"
    waits = {1: "; a wait and a barrier after each iteration", 2: "; a wait after each iteration",
             3: "; a wait and a barrier after each iteration, the barriers not timed"}
    return calls + waits.get(options.blocking, "")


def _clock_text(timer, options: BatchOptions) -> str:
    text = "host clock after the device finished" if timer.method == CudaTimer.method else timer.method
    return text + ("; each iteration timed too" if options.iteration_times else "")


def next_look(taken: int) -> int:
    """How many more samples to take before the stopping rule is tested again: a quarter of what was taken so far
    (at least LOOK_STEP_MIN). The first test comes after --iters samples, the least an interval rests on; near the
    end of the time budget the count is cut to what the budget has left.

    Growing by a fraction rather than by a fixed batch keeps the number of tests logarithmic in the samples (18
    between 20 and 1000, where batches of 20 would test 50 times), so a run that stops when the interval first
    looks narrow has few chances to stop on a lucky stretch: with independent draws from four distributions, the
    interval at the stop covered the true median in 93–97 % of runs (tests/test_stopping_rule.py)."""
    return max(LOOK_STEP_MIN, math.ceil(taken * (LOOK_GROWTH - 1)))


LOOK_GROWTH = 1.25
LOOK_STEP_MIN = 5
AUTO_TIMING_CALLS = 5
"""--timing auto decides from this many more calls after the warm-up, timed per iteration."""
AUTO_BATCH_OVERHEAD = 0.2
"""--timing auto: batch where more than this share of per-iteration timing's wall time is not the timed calls (the
barrier before each, on GPUs the stream sync and spin too): there per-call overhead dominates, and back-to-back calls
give more samples per second of the same collective."""


def _auto_timing(run, timer, ctx) -> tuple[list[float], str, str]:
    """--timing auto after the warm-up: AUTO_TIMING_CALLS calls timed per iteration, and the host wall time of the
    whole block around them (the timer's loop is not touched). Returns those calls' times (the slowest rank's, which
    also size an auto batch), the mode and why; the same on every rank."""
    begun = time.perf_counter()
    calls = timer.time_iterations(run, AUTO_TIMING_CALLS)  # ends with the device synchronised
    combined = ctx.max_over_ranks([*calls, time.perf_counter() - begun])
    calls_s, wall_s = combined[:-1], combined[-1]
    mode, why = choose_timing(calls_s, wall_s)
    return calls_s, mode, why


def choose_timing(call_s: list[float], wall_s: float) -> tuple[str, str]:
    """(mode, why) for --timing auto, from calls timed per iteration and the wall time of the loop that timed them."""
    if not (sum(call_s) > 0 and wall_s > 0):
        return PER_ITERATION, "; auto: per-iteration (no time to decide from)"
    overhead = max(0.0, 1 - sum(call_s) / wall_s)
    mode = BATCH if overhead > AUTO_BATCH_OVERHEAD else PER_ITERATION
    return mode, (f"; auto: {mode}, since per-iteration timing spent {overhead:.0%} of its time outside the calls "
                  f"(batch above {AUTO_BATCH_OVERHEAD:.0%})")


def _stop_reason(samples, started, sampling_started, ctx, target_ci_pct,
                 max_time_s) -> tuple[str | None, float, float]:
    """(why to stop or None, seconds since the point started, seconds since the first look), the times the
    slowest rank's, so every rank decides alike and sizes the next batch alike."""
    if target_ci_pct is None:
        return STOP_ITERS, 0.0, 0.0
    if summarize(samples).ci_half_width_pct <= target_ci_pct:
        return STOP_CI, 0.0, 0.0
    now = time.monotonic()
    elapsed_s, sampling_s = ctx.max_over_ranks([now - started, now - sampling_started])
    return (STOP_MAX_TIME if elapsed_s >= max_time_s else None), elapsed_s, sampling_s


def auto_batch_calls(warmup_s: list[float]) -> int:
    """Calls per batch so that a batch lasts about BATCH_TARGET_S, from the warm-up calls' median time (identical
    on every rank: the warm-up times are combined over ranks first)."""
    positive = sorted(value for value in warmup_s if value > 0)
    if not positive:
        return MAX_AUTO_BATCH_CALLS
    per_call = positive[len(positive) // 2]
    return max(1, min(MAX_AUTO_BATCH_CALLS, math.ceil(BATCH_TARGET_S / per_call)))
