"""Measure one collective point on every rank: time it (sampling the GPU meanwhile), check it in a separate untimed
run, and, when asked, record a trace of a few more runs."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from commbench import faults
from commbench.backends import DTYPES
from commbench.bench_kind import Measured, RankRun, Row
from commbench.collectives import check_data, get_collective
from commbench.collectives.base import Buffers, Collective, Layout, Runner, RunSetup
from commbench.expect.rows import RunExpectation
from commbench.measure.bandwidth import algbw_gbps, busbw_gbps
from commbench.measure.spin_plan import is_host_bound
from commbench.measure.stats import summarize
from commbench.measure.stream_hops import hop_text, hops_per_iteration
from commbench.measure.timers import IssueRecord
from commbench.measure.timing import Measurement, measure
from commbench.names import COLLECTIVE_BENCH, COMMBENCH_SOURCE, PER_ITERATION
from commbench.profiling.capture import capture, trace_file_name
from commbench.profiling.nvml_sampler import SUMMARY_COLUMNS, combine_ranks, rank_summary, sample_rows
from commbench.schema import common
from commbench.store import SCHEMA_VERSION
from commbench.sweep.host_issue import host_bound_word
from commbench.sweep.spec import Point, SweepSpec

if TYPE_CHECKING:
    from commbench.bench_kind import RankContext
    from commbench.faults import Fault
    from commbench.profiling.nvml_sampler import GpuSample


@dataclass(frozen=True)
class _Calls:
    """A point's collective with its buffers filled: the call the check and the trace run, and the iteration that is
    timed (the call, or --agg-iters calls in batch timing)."""

    collective: Collective
    buffers: Buffers
    call: Runner
    iteration: Runner


def _prepare(spec: SweepSpec, point: Point, ctx: RankContext) -> _Calls:
    collective = get_collective(point.collective)
    buffers = collective.make_buffers(point.layout, inplace=point.inplace, dtype=DTYPES[point.dtype],
                                      device=ctx.device, rank=ctx.rank, world=ctx.world)
    collective.fill_inputs(buffers, rank=ctx.rank, world=ctx.world, op=point.op)
    setup = RunSetup(rank=ctx.rank, world=ctx.world, p2p_batched=ctx.platform.p2p_batched, op=point.op,
                     ring_chunks=spec.ring_chunks, root=spec.root)
    call = collective.runner(point.impl, buffers, setup)
    # an iteration issues --agg-iters calls in batch timing; per-iteration timing times one call (validate())
    iteration = collective.iteration(point.impl, buffers, setup, spec.batch_options.agg) \
        if point.timing != PER_ITERATION else call
    return _Calls(collective, buffers, call, iteration)


def _timed(spec: SweepSpec, point: Point, run: RankRun, iteration: Runner) -> tuple[Measurement, list[GpuSample]]:
    """The point timed, with the GPU sampled meanwhile: the measurement and the sampler's samples."""
    ctx, sampler = run.ctx, run.sampler
    if sampler:
        sampler.start()
    try:
        measurement = measure(faults.slowed(iteration, ctx.device), ctx=ctx, warmup=spec.warmup, iters=spec.iters,
                              timing=point.timing, batch_calls=spec.batch_calls,
                              target_ci_pct=spec.target_ci_pct, max_time_s=spec.max_time_s,
                              on_timed_start=sampler.mark_timed_start if sampler else None,
                              barrier=faults.skewed(run.fault, ctx.barrier, rank=ctx.rank, point=point.index),
                              batch=spec.batch_options)
        if sampler:
            sampler.mark_timed_end()  # NVLink and energy counters over the timed loop only
    finally:
        gpu_samples = sampler.stop() if sampler else []
    return measurement, gpu_samples


def _trace(spec: SweepSpec, point: Point, run: RankRun, call: Runner) -> None:
    """--profile: a trace of a few more calls. The profiled loop runs the call back to back whatever the timing
    mode, so a point measured in both modes is traced once, in the first (the same file name would be written twice;
    spec.timings is the same on every rank, so all ranks agree and the capture's barrier pairs up)."""
    if run.trace_dir is None or point.timing != spec.timings[0]:
        return
    ctx = run.ctx
    name = trace_file_name(rank=ctx.rank, collective=point.collective, impl=point.impl, dtype=point.dtype,
                           op=point.op, inplace=point.inplace, size_bytes=point.layout.size_bytes)
    capture(call, barrier=ctx.barrier, iterations=spec.profile_iters, platform=ctx.platform,
            path=run.trace_dir / name)


def _hops(spec: SweepSpec, point: Point, ctx: RankContext, measurement: Measurement) -> str:
    """timing_method's words on the cross-stream waits each timed iteration holds (measure/stream_hops.py)."""
    agg = spec.batch_options.agg if measurement.timing != PER_ITERATION else 1
    return hop_text(hops_per_iteration(point.collective, backend=ctx.backend, device=ctx.device.type,
                                       impl=point.impl, agg=agg))


def measure_point(spec: SweepSpec, point: Point, run: RankRun) -> Measured:
    ctx = run.ctx
    if ctx.platform.has_gpu:  # this point's memory only: earlier points' cached blocks released, then the peak reset
        ctx.platform.start_peak_window()
    calls = _prepare(spec, point, ctx)
    collective, buffers, call, layout = calls.collective, calls.buffers, calls.call, point.layout
    measurement, gpu_samples = _timed(spec, point, run, calls.iteration)
    gpu_summary = _gpu_summary(gpu_samples, ctx)  # before the check, whose buffers are not the point's
    n_wrong = _check(collective, buffers, call, point, spec, ctx, run.fault) if spec.check else None
    bytes_sent, bytes_source = _bytes_sent_per_rank(collective, call, layout, ctx)
    _trace(spec, point, run, call)
    if ctx.rank != 0:
        return Measured(None)

    samples_s = faults.zero_times(run.fault, measurement.samples_s, rank=ctx.rank, point=point.index)
    times_us = [seconds * 1e6 for seconds in samples_s]
    summary = summarize(times_us)
    seconds = summary.p50 / 1e6
    moved = collective.algbw_bytes(layout, ctx.world)
    noop = collective.is_noop(world=ctx.world, inplace=point.inplace)
    algbw, busbw = algbw_gbps(moved, seconds), busbw_gbps(moved, seconds, collective.busbw_factor(ctx.world))
    if noop:  # a figure for no work would read as bandwidth; busbw is 0 by definition (no byte crosses)
        algbw, busbw = math.nan, 0.0
    row = {
        "schema_version": SCHEMA_VERSION, "run_id": run.run_id, "bench": COLLECTIVE_BENCH,
        "collective": point.collective, "impl": point.impl, "backend": ctx.backend, "device": ctx.device.type,
        common.WORLD_SIZE: ctx.world, "dtype": point.dtype, "op": point.op, "inplace": point.inplace,
        common.SIZE_BYTES: layout.size_bytes, "timing": measurement.timing, "count": layout.count, "iters": summary.n,
        "warmup": spec.warmup,
        "stop_reason": measurement.stop_reason,
        common.TIME_US_P50: summary.p50, common.TIME_US_P95: summary.p95, common.TIME_US_MIN: summary.min,
        "time_us_mean": summary.mean, "time_us_stdev": summary.stdev,
        common.TIME_US_CI_LO: summary.ci_lo, common.TIME_US_CI_HI: summary.ci_hi,
        common.ALGBW_GBPS: algbw, common.BUSBW_GBPS: busbw,
        "bytes_sent_per_rank": bytes_sent, "bytes_source": bytes_source,
        "ring_chunks": getattr(call, "pieces", None),
        common.N_WRONG: n_wrong,
        "calls_per_sample": measurement.calls_per_sample,
        "timing_method": measurement.method + _hops(spec, point, ctx, measurement),
        "note": _note(noop, seconds),
        **gpu_summary,
        "time_us_max": summary.max, "time_us_p75": None,
        "source": COMMBENCH_SOURCE, "source_file": "", "busbw_check": "",
        "root": spec.root if collective.has_root else -1, "env": point.env,
        **RunExpectation(spec.expectation).columns(point.collective, point.env),
        **issue_columns(measurement.issue, seconds_per_call=seconds),
    }
    samples: list[Row] = [{"iteration": index, "time_us": time_us} for index, time_us in enumerate(times_us)]
    return Measured(row, samples, sample_rows(gpu_samples), iterations=_iteration_rows(measurement))


def issue_columns(issue: IssueRecord, *, seconds_per_call: float) -> dict:
    """The row's word on the host: its issue time per call (the slowest rank's), whether the spins covered the timed
    calls' issue, and whether the row is host-bound (spin_plan.is_host_bound); "not applicable" where nothing is issued
    ahead of the device (gloo: its calls block the host, so its host clock holds the whole call)."""
    bound = is_host_bound(issue.issue_s_per_call, seconds_per_call, issue.covered)
    return {"issue_us_per_call": None if issue.issue_s_per_call is None else issue.issue_s_per_call * 1e6,
            "spin_covered": issue.covered, "host_bound": host_bound_word(bound)}


def _iteration_rows(measurement: Measurement) -> list[Row]:
    """--iteration-times: every rank's time per call of each iteration of each batch (nccl-tests -I's rows)."""
    return [{"batch": batch, "rank": rank, "iteration": index, "time_us": seconds * 1e6}
            for batch, ranks in enumerate(measurement.iteration_s or [])
            for rank, times in enumerate(ranks) for index, seconds in enumerate(times)]


def _note(noop: bool, seconds: float) -> str:
    if noop:
        return NOOP_NOTE
    if not seconds > 0:
        return "median time 0: below the timer's resolution, no bandwidth computed"
    return ""


NOOP_NOTE = "no-op: in place with 1 rank nothing moves (busbw 0, no algbw)"


def _check(collective: Collective, buffers: Buffers, call: Runner, point: Point, spec: SweepSpec, ctx: RankContext,
           fault: Fault | None) -> int:
    """Fresh inputs, one more run, and the elements that differ from the exact expected result (compared slice by
    slice against the periodic pattern: the check needs little memory besides the point's buffers); --check-iters
    times, stopping at the first run with wrong elements (as nccl-tests' -c)."""
    expected = collective.expected(point.layout, rank=ctx.rank, world=ctx.world, root=spec.root)
    for _ in range(spec.check_iters):
        collective.refill_for_check(buffers, rank=ctx.rank, world=ctx.world, op=point.op)
        call()
        ctx.platform.synchronize()
        faults.corrupt_output(fault, buffers.recv, rank=ctx.rank, point=point.index)
        wrong = 0 if expected is None else check_data.count_wrong(buffers.recv, expected, op=point.op,
                                                                    world=ctx.world)
        wrong = ctx.sum_over_ranks(wrong)
        if wrong:
            break
    return wrong


def _bytes_sent_per_rank(collective: Collective, call: Runner, layout: Layout, ctx: RankContext) -> tuple[float, str]:
    """What the last run sent, averaged over ranks, when the implementation counts it; else the ring model.

    The mean over ranks is exact even with uneven chunks: the chunks each rank skips add up to the whole message.
    """
    counted = getattr(call, "bytes_sent", None)
    if counted is None:
        return collective.bus_bytes(layout, ctx.world), "model"
    return ctx.sum_over_ranks(counted) / ctx.world, "counted"


def _gpu_summary(samples: list[GpuSample], ctx: RankContext) -> dict:
    """The GPU columns of a row (NVML's and the allocator's peak since the point started), combined per GPU and then
    over GPUs; empty on CPU runs (no collective is spent on them)."""
    platform = ctx.platform
    if not platform.has_gpu:
        return dict.fromkeys(SUMMARY_COLUMNS)
    mine = rank_summary(samples, uuid=platform.gpu_uuid(), alloc_peak_bytes=platform.peak()["peak_mem_bytes"])
    return combine_ranks(ctx.gather_objects(mine))
