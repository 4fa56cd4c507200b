"""Per-iteration timers (CUDA events on GPU, perf_counter behind a barrier on CPU) and the sampling loop."""

import time
from dataclasses import dataclass
from typing import Callable

import torch

from commbench.stats import summarize

STOP_ITERS = "iters"  # the fixed number of iterations ran
STOP_CI = "ci"  # adaptive: the median's confidence interval reached the target
STOP_MAX_TIME = "max_time"  # adaptive: the time budget of the point was spent first


class CpuTimer:
    """Wall-clock time of each call, every rank starting together after a barrier."""

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


class CudaTimer:
    """GPU time of each call, from CUDA events recorded around it on the stream the collective is ordered on.

    A short spin kernel queued before the start event keeps the GPU busy while the host issues the collective, so
    the interval holds the collective's device time and not the host's launch latency.
    """

    def __init__(self, barrier: Callable[[], None]):
        self._barrier = barrier

    def time_iterations(self, run: Callable[[], object], iterations: int) -> list[float]:
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(iterations)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(iterations)]
        stream = torch.cuda.current_stream()
        barrier = self._barrier
        for index in range(iterations):
            barrier()
            stream.synchronize()
            _cover_launch_latency()
            starts[index].record(stream)
            run()
            ends[index].record(stream)
        torch.cuda.synchronize()
        return [start.elapsed_time(end) / 1e3 for start, end in zip(starts, ends)]


_SPIN_CYCLES = 200_000  # ≈ 0.1 ms at GPU clocks: longer than issuing one collective from Python


def _cover_launch_latency() -> None:
    spin = getattr(torch.cuda, "_sleep", None)  # private but long-standing; without it the launch is timed too
    if spin is not None:
        spin(_SPIN_CYCLES)


@dataclass(frozen=True)
class Measurement:
    samples_s: list[float]  # per iteration, the slowest rank's time
    stop_reason: str


def measure(run: Callable[[], object], *, ctx, warmup: int, iters: int,
            target_ci_pct: float | None = None, max_time_s: float | None = None,
            on_timed_start: Callable[[], None] | None = None) -> Measurement:
    """Warm up, then time batches of `iters` iterations: once, or (adaptive) until the 95 % CI of the median is
    within ±target_ci_pct or max_time_s has passed on any rank. Every rank takes the same decision.
    on_timed_start is called between warm-up (finished on the device) and the first timed iteration."""
    timer = ctx.platform.timer(ctx.barrier)
    started = time.monotonic()
    if warmup:
        timer.time_iterations(run, warmup)
    if on_timed_start:
        on_timed_start()
    samples: list[float] = []
    while True:
        samples.extend(ctx.max_over_ranks(timer.time_iterations(run, iters)))
        if target_ci_pct is None:
            return Measurement(samples, STOP_ITERS)
        if summarize(samples).ci_half_width_pct <= target_ci_pct:
            return Measurement(samples, STOP_CI)
        if ctx.any_rank(time.monotonic() - started >= max_time_s):
            return Measurement(samples, STOP_MAX_TIME)
