"""How a collective is timed: warm-up, the spin agreed over the ranks, the timing mode (per-iteration or nccl-tests'
batch), and the sampling loop with its stopping rule. The timers themselves are in commbench/measure/timers.py.

per-iteration: every sample is one call, all ranks released together by a barrier; the sample is the slowest rank's
time. Gives the per-call distribution (p95, the CI of the median) but each sample holds the spread in barrier exit.
batch (nccl-tests' BenchTime): one barrier, then K iterations back to back; the sample is the time per call combined
over ranks as nccl-tests' -a says (the mean by default). On CUDA the calls run behind a spin that covers the host's
issue, so the time is the device's (commbench/measure/spin_plan.py). BatchOptions carries the rest of nccl-tests'
knobs: calls grouped per iteration (-m), waits inside the batch (-z), CUDA graph replay (-G), and each iteration's own
time (-I).
"""

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from commbench.measure.stats import summarize
from commbench.measure.timers import NCCL_TESTS_DEFAULTS, NOT_ISSUED_AHEAD, BatchOptions, IssueRecord, Timer
from commbench.names import (
    AUTO,
    BATCH,
    MAX,
    PER_ITERATION,
    RANK_AVERAGE_TEXT,
    STOP_CI,
    STOP_ITERS,
    STOP_MAX_TIME,
    RankAverage,
    StopReason,
    Timing,
    TimingChoice,
)

_Gathered = TypeVar("_Gathered")


class TimerSource(Protocol):
    """A rank's platform, as far as timing goes (commbench/platform.py): it makes the timer for its device."""

    def timer(self, barrier: Callable[[], None], meet: Callable[[], None] | None = None) -> Timer: ...


class RankGroup(Protocol):
    """What measure() needs of the rank's process group (execution/distributed.RankContext): its platform, a
    barrier, and the reductions over ranks that make every rank take the same decisions."""

    @property
    def platform(self) -> TimerSource: ...

    def barrier(self) -> None: ...

    def meet_on_device(self) -> None: ...

    def max_over_ranks(self, values: list[float]) -> list[float]: ...

    def combine_over_ranks(self, values: list[float], how: RankAverage) -> list[float]: ...

    def gather_objects(self, obj: _Gathered) -> list[_Gathered]: ...

BATCH_TARGET_S = 0.005
"""--batch-calls auto: enough calls for one batch to last this long, so that a barrier's skew (5–30 µs) and one
launch latency are under 1 % of it."""
MAX_AUTO_BATCH_CALLS = 1000


def agree_on_spin(timer: Timer, run: Callable[[], object],
                  agree_max: Callable[[list[float]], list[float]]) -> None:
    """Size the timer's spin from the host times the ranks agree on: each rank's typical issue time of one call and
    fixed cost ahead of it (after the first call, which may connect the peers; calls the warm-up did not make are
    made here, untimed), the largest over the ranks that share the timed calls (agree_max, element-wise: all of them,
    or a pair). Every rank then plans the same spins; the meet after each spin lines their ends up on the device. A
    collective only where the timer spins: every rank of a run has the same kind of timer."""
    if not timer.spins:
        timer.size_spin(None)
        return
    more = timer.calls_to_size_spin()
    if more:
        timer.time_iterations(run, more)
    seen = timer.issue_seen()
    agreed = agree_max([-1.0, -1.0] if seen is None else seen)
    timer.size_spin(agreed if agreed[0] >= 0 else None)


def combined_issue(timer: Timer, max_over: Callable[[list[float]], list[float]]) -> IssueRecord:
    """The timed calls' issue record over the ranks: the slowest rank's issue time per call, covered only where
    every rank's spins covered their issue."""
    if not timer.spins:
        return NOT_ISSUED_AHEAD
    mine = timer.issue_record()
    issue_s, uncovered = max_over([-1.0 if mine.issue_s_per_call is None else mine.issue_s_per_call,
                                   0.0 if mine.covered in (True, None) else 1.0])
    return IssueRecord(None if issue_s < 0 else issue_s, None if issue_s < 0 else not uncovered)


@dataclass(frozen=True)
class Measurement:
    samples_s: list[float]
    """per-iteration: each call's time on the slowest rank; batch: each batch's time per call, mean over ranks."""
    stop_reason: StopReason
    calls_per_sample: int
    method: str
    """How the samples were taken, for the row's timing_method column."""
    timing: Timing = PER_ITERATION
    """The mode the samples were taken in (what --timing auto chose)."""
    iteration_s: list[list[list[float]]] | None = None
    """Batch timing with BatchOptions.iteration_times: per batch, per rank, each iteration's time per call
    (every rank holds all of them); None otherwise."""
    issue: IssueRecord = field(default=NOT_ISSUED_AHEAD)
    """The host's issue time per call in the timed calls (the slowest rank's) and whether the spins covered it."""


def measure(run: Callable[[], object], *, ctx: RankGroup, warmup: int, iters: int,
            timing: TimingChoice = PER_ITERATION,
            batch_calls: int | None = None, target_ci_pct: float | None = None,
            max_time_s: float | None = None, on_timed_start: Callable[[], None] | None = None,
            barrier: Callable[[], None] | None = None, batch: BatchOptions = NCCL_TESTS_DEFAULTS) -> Measurement:
    """Warm up, then take `iters` samples in the timing mode: once, or (adaptive) until the 95 % CI of the median is
    within ±target_ci_pct or max_time_s has passed on any rank, testing after the first `iters` samples and then each
    time the samples grew by an eighth (see `next_look`). timing AUTO picks batch or per-iteration from the warm-up
    (`choose_timing`). Every rank takes the same decisions: the combined samples and the stop test are computed by
    collectives. on_timed_start is called between warm-up (finished on the device) and the first timed call.
    barrier (default ctx.barrier) is what releases the ranks before a timed call or batch. run is one iteration: in
    batch timing it issues batch.agg calls."""
    timer = ctx.platform.timer(barrier or ctx.barrier, ctx.meet_on_device)
    started = time.monotonic()
    # a batch starts after a synchronising call (nccl-tests runs one even with -w 0); auto batch size needs one
    warm_calls = max(warmup, 1) if timing == BATCH else warmup
    warm = ctx.max_over_ranks(timer.time_iterations(run, warm_calls)) if warm_calls else []
    warm, chosen, why = _chosen_timing(run, timer, ctx, timing, warm)
    agree_on_spin(timer, run, ctx.max_over_ranks)
    if on_timed_start:
        on_timed_start()
    sampler = (_batch_sampler(run, timer, ctx, warm=warm, batch_calls=batch_calls, batch=batch) if chosen == BATCH
               else _per_iteration_sampler(run, timer, ctx))
    samples, stop = _sample_until_stop(sampler.take, iters, ctx=ctx, started=started, target_ci_pct=target_ci_pct,
                                       max_time_s=max_time_s)
    issue = combined_issue(timer, ctx.max_over_ranks)
    return Measurement(samples, stop, sampler.calls, sampler.method + timer.launch_cover() + why, chosen,
                       sampler.iteration_s, issue)


@dataclass(frozen=True)
class _Sampler:
    """How the timed samples are taken in the chosen mode."""

    take: Callable[[int], list[float]]
    """take(count): count more samples, combined over ranks (the same on every rank)."""
    calls: int
    """Collective calls per sample."""
    method: str
    """The row's timing_method, less the launch cover and the auto choice."""
    iteration_s: list[list[list[float]]] | None
    """Filled by take in batch timing with BatchOptions.iteration_times (Measurement.iteration_s); else None."""


def _chosen_timing(run: Callable[[], object], timer: Timer, ctx: RankGroup, timing: TimingChoice,
                   warm: list[float]) -> tuple[list[float], Timing, str]:
    """(the calls that size an auto batch, the mode, why auto chose it): --timing auto decides here."""
    if timing == AUTO:
        return _auto_timing(run, timer, ctx)
    return warm, timing, ""


def _batch_sampler(run: Callable[[], object], timer: Timer, ctx: RankGroup, *, warm: list[float],
                   batch_calls: int | None, batch: BatchOptions) -> _Sampler:
    # auto: no more than one spin covers (CUDA), so that a sample is one segment, not many behind a barrier each
    iterations = batch_calls or min(auto_batch_calls(warm), timer.calls_per_segment() or MAX_AUTO_BATCH_CALLS)
    iteration_s: list[list[list[float]]] | None = [] if batch.iteration_times else None

    def take(count: int) -> list[float]:
        batches = timer.time_batches(run, count, iterations, batch)
        if iteration_s is not None:  # per rank: nccl-tests' per-process rows (analyze_perf_json --straggler)
            by_rank = ctx.gather_objects(batches.iteration_s)
            iteration_s.extend([rank[index] for rank in by_rank] for index in range(count))
        return ctx.combine_over_ranks(batches.per_call_s, batch.average)
    method = f"batch: {_batch_text(iterations, batch)} per sample, {_clock_text(timer, batch)}, " \
             f"{RANK_AVERAGE_TEXT[batch.average]}"
    return _Sampler(take, batch.calls(iterations), method, iteration_s)


def _per_iteration_sampler(run: Callable[[], object], timer: Timer, ctx: RankGroup) -> _Sampler:
    def take(count: int) -> list[float]:
        return ctx.max_over_ranks(timer.time_iterations(run, count))
    method = f"per-iteration: barrier before each call, {timer.method}, {RANK_AVERAGE_TEXT[MAX]}"
    return _Sampler(take, 1, method, None)


def _sample_until_stop(take: Callable[[int], list[float]], iters: int, *, ctx: RankGroup, started: float,
                       target_ci_pct: float | None, max_time_s: float | None) -> tuple[list[float], StopReason]:
    """The samples and why they stopped: `iters` of them, then (adaptive) more at each look until the stopping rule
    says stop (_stop_reason), the last look cut to what the time budget has left."""
    samples = take(iters)
    sampling_started = time.monotonic()  # after the first look's samples: what sampling costs is measured from here
    taken_then = len(samples)
    while True:
        stop, elapsed_s, sampling_s = _stop_reason(samples, started, sampling_started, ctx, target_ci_pct,
                                                   max_time_s)
        if stop:
            return samples, stop
        count = next_look(len(samples))
        if sampling_s > 0 and len(samples) > taken_then:  # keep the last batch within the budget
            assert max_time_s is not None  # sampling time is measured only under the adaptive rule, which has one
            per_sample_s = sampling_s / (len(samples) - taken_then)
            count = min(count, max(1, math.ceil((max_time_s - elapsed_s) / per_sample_s)))
        samples.extend(take(count))


def _batch_text(iterations: int, options: BatchOptions) -> str:
    calls = f"{iterations} back-to-back calls" if options.agg == 1 else \
        f"{iterations} back-to-back iterations of {options.agg} grouped calls"
    if options.graph_launches:
        calls = f"{options.graph_launches} CUDA graph replays of {calls}"
        # nccl-tests captures -z's waits in no graph either: a replay runs its calls back to back
        return calls + ("; -z's waits dropped: a graph replays its calls back to back" if options.blocking else "")
    waits = {1: "; a wait and a barrier after each iteration", 2: "; a wait after each iteration",
             3: "; a wait and a barrier after each iteration, the barriers not timed"}
    return calls + waits.get(options.blocking, "")


def _clock_text(timer: Timer, options: BatchOptions) -> str:
    return timer.batch_clock_text(options) + ("; each iteration timed too" if options.iteration_times else "")


def next_look(taken: int) -> int:
    """How many more samples to take before the stopping rule is tested again: an eighth of what was taken so far
    (at least LOOK_STEP_MIN). The first test comes after --iters samples, the least an interval rests on; near the
    end of the time budget the count is cut to what the budget has left.

    Growing by a fraction rather than by a fixed batch keeps the number of tests logarithmic in the samples (31
    between 20 and 1000, where batches of 20 would test 50 times): few chances to stop on a lucky stretch (the interval
    at the stop covered the true median in 93–96 % of runs of four distributions, tests/test_stopping_rule.py), and a
    stop at most an eighth past the test before it (a quarter cost up to a quarter more of the largest calls)."""
    return max(LOOK_STEP_MIN, math.ceil(taken * (LOOK_GROWTH - 1)))


LOOK_GROWTH = 1.125
LOOK_STEP_MIN = 5
AUTO_TIMING_CALLS = 5
"""--timing auto decides from this many more calls after the warm-up, timed per iteration."""
AUTO_BATCH_OVERHEAD = 0.2
"""--timing auto: batch where more than this share of per-iteration timing's wall time is not the timed calls (the
barrier before each, on GPUs the stream sync and spin too): there per-call overhead dominates, and back-to-back calls
give more samples per second of the same collective."""


def _auto_timing(run: Callable[[], object], timer: Timer, ctx: RankGroup) -> tuple[list[float], Timing, str]:
    """--timing auto after the warm-up: AUTO_TIMING_CALLS calls timed per iteration, and the host wall time of the
    whole block around them (the timer's loop is not touched). Returns those calls' times (the slowest rank's, which
    also size an auto batch), the mode and why; the same on every rank."""
    begun = time.perf_counter()
    calls = timer.time_iterations(run, AUTO_TIMING_CALLS)  # ends with the device synchronised
    combined = ctx.max_over_ranks([*calls, time.perf_counter() - begun])
    calls_s, wall_s = combined[:-1], combined[-1]
    mode, why = choose_timing(calls_s, wall_s)
    return calls_s, mode, why


def choose_timing(call_s: list[float], wall_s: float) -> tuple[Timing, str]:
    """(mode, why) for --timing auto, from calls timed per iteration and the wall time of the loop that timed them."""
    if not (sum(call_s) > 0 and wall_s > 0):
        return PER_ITERATION, "; auto: per-iteration (no time to decide from)"
    overhead = max(0.0, 1 - sum(call_s) / wall_s)
    mode: Timing = BATCH if overhead > AUTO_BATCH_OVERHEAD else PER_ITERATION
    return mode, (f"; auto: {mode}, since per-iteration timing spent {overhead:.0%} of its time outside the calls "
                  f"(batch above {AUTO_BATCH_OVERHEAD:.0%})")


def _stop_reason(samples: list[float], started: float, sampling_started: float, ctx: RankGroup,
                 target_ci_pct: float | None, max_time_s: float | None) -> tuple[StopReason | None, float, float]:
    """(why to stop or None, seconds since the point started, seconds since the first look), the times the
    slowest rank's, so every rank decides alike and sizes the next batch alike."""
    if target_ci_pct is None:
        return STOP_ITERS, 0.0, 0.0
    if summarize(samples).ci_half_width_pct <= target_ci_pct:
        return STOP_CI, 0.0, 0.0
    assert max_time_s is not None, "the adaptive rule (target_ci_pct) comes with a time budget"
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
