"""Rank entry point: join the job, measure every point of the spec, check it, and (rank 0) store the rows."""

import argparse
import os
import sys
from pathlib import Path
from typing import Callable

import torch

from commbench import faults, runinfo, store
from commbench.backends import DTYPES
from commbench.bandwidth import algbw_gbps, busbw_gbps
from commbench.collectives import check_data, get_collective
from commbench.collectives.base import RunSetup
from commbench.distributed import RankContext, init_rank, shutdown
from commbench.profiling.capture import TRACES_DIR, capture, trace_file_name
from commbench.profiling.nvml_sampler import SUMMARY_COLUMNS, GpuSampler, combine_ranks, sample_rows
from commbench.profiling.nvml_sampler import summarize as summarize_gpu
from commbench.rank_run import gpu_sampler, recorded_end, shared_run_dir
from commbench.spec import Point, SweepSpec, plan
from commbench.stats import summarize
from commbench.timing import measure

BENCH = "collective"


# Launched ranks leave hang detection to the launcher's watchdog (which names the hang); their own collective timeout
# comes later so that it does not race the watchdog. Ranks running in place have no watchdog: theirs is --timeout.
WATCHED_TIMEOUT_GRACE_S = 30.0


def run_sweep(spec: SweepSpec, *, run_dir: Path | None, run_id: str, collective_timeout_s: float,
              on_point: Callable[[Point, dict], None] | None = None) -> None:
    """Run on every rank; rank 0 writes results/<run-id>/ and calls on_point after each stored row."""
    ctx = init_rank(backend=spec.backend, device_type=spec.device, timeout_s=collective_timeout_s)
    writes = ctx.rank == 0
    fault = faults.from_env()
    sampler, clean = None, False
    try:
        with recorded_end(run_dir, writes=writes):
            facts = ctx.gather_objects(runinfo.rank_facts(ctx.device))
            sampler, sampling = gpu_sampler(ctx, spec.gpu_sample_interval_s)
            trace_dir = shared_run_dir(run_dir) / TRACES_DIR if spec.profile_iters else None
            if writes:
                store.update_meta(run_dir, gpu_sampling=sampling, traces_dir=str(trace_dir) if trace_dir else None,
                                  **runinfo.job_meta(backend=spec.backend, world=ctx.world, device=ctx.device,
                                                     facts=facts))
                results = store.RowWriter(run_dir / store.RESULTS_FILE, store.RESULT_COLUMNS)
                samples = store.RowWriter(run_dir / store.SAMPLES_FILE, store.SAMPLE_COLUMNS)
                gpu_samples = store.RowWriter(run_dir / store.GPU_SAMPLES_FILE, store.GPU_SAMPLE_COLUMNS) if sampler \
                    else None
            for point in plan(spec, ctx.world):
                faults.before_point(fault, rank=ctx.rank, point=point.index)
                row, times_us, gpu_rows = measure_point(spec, point, ctx, run_id=run_id, fault=fault, sampler=sampler,
                                                        trace_dir=trace_dir)
                if writes:
                    stamp = {**_keys(row), "schema_version": store.SCHEMA_VERSION, "run_id": run_id}
                    # samples first: a row in results.csv promises its samples are on disk
                    samples.write([{**stamp, "iteration": iteration, "time_us": time_us}
                                   for iteration, time_us in enumerate(times_us)])
                    if gpu_samples:
                        gpu_samples.write([{**stamp, **sample} for sample in gpu_rows])
                    results.write([row])
                    if on_point:
                        on_point(point, row)
        clean = True
    finally:
        if sampler:
            sampler.close()
        shutdown(clean=clean)


def measure_point(spec: SweepSpec, point: Point, ctx: RankContext, *, run_id: str,
                  fault: faults.Fault | None = None, sampler: GpuSampler | None = None,
                  trace_dir: Path | None = None) -> tuple[dict, list[float], list[dict]]:
    """Time one point (sampling the GPU meanwhile), check it in a separate untimed run and, when asked, record a
    trace of a few more runs; returns its row, per-iteration times (µs) and this rank's GPU samples."""
    collective = get_collective(point.collective)
    layout, dtype = point.layout, DTYPES[point.dtype]
    buffers = collective.make_buffers(layout, inplace=point.inplace, dtype=dtype, device=ctx.device, rank=ctx.rank,
                                      world=ctx.world)
    collective.fill_inputs(buffers, rank=ctx.rank, world=ctx.world)
    setup = RunSetup(rank=ctx.rank, world=ctx.world, backend=ctx.backend, op=point.op, ring_chunks=spec.ring_chunks)
    run = collective.runner(point.impl, buffers, setup)

    if sampler:
        sampler.start()
    try:
        measurement = measure(faults.slowed(run), ctx=ctx, warmup=spec.warmup, iters=spec.iters,
                              target_ci_pct=spec.target_ci_pct, max_time_s=spec.max_time_s)
    finally:
        gpu_samples = sampler.stop() if sampler else []
    gpu_summary = _gpu_summary(gpu_samples, ctx)
    n_wrong = _check(collective, buffers, run, point, ctx, fault) if spec.check else None
    bytes_sent, bytes_source = _bytes_sent_per_rank(collective, run, layout, ctx)
    if trace_dir is not None:
        name = trace_file_name(rank=ctx.rank, collective=point.collective, impl=point.impl, dtype=point.dtype,
                               op=point.op, inplace=point.inplace, size_bytes=layout.size_bytes)
        capture(run, barrier=ctx.barrier, iterations=spec.profile_iters, device=ctx.device, path=trace_dir / name)

    times_us = [seconds * 1e6 for seconds in measurement.samples_s]
    summary = summarize(times_us)
    seconds = summary.p50 / 1e6
    moved = collective.algbw_bytes(layout, ctx.world)
    row = {
        "schema_version": store.SCHEMA_VERSION, "run_id": run_id, "bench": BENCH,
        "collective": point.collective, "impl": point.impl, "backend": ctx.backend, "device": ctx.device.type,
        "world_size": ctx.world, "dtype": point.dtype, "op": point.op, "inplace": point.inplace,
        "size_bytes": layout.size_bytes, "count": layout.count, "iters": summary.n, "warmup": spec.warmup,
        "stop_reason": measurement.stop_reason,
        "time_us_p50": summary.p50, "time_us_p95": summary.p95, "time_us_min": summary.min,
        "time_us_mean": summary.mean, "time_us_stdev": summary.stdev,
        "time_us_ci_lo": summary.ci_lo, "time_us_ci_hi": summary.ci_hi,
        "algbw_gbps": algbw_gbps(moved, seconds),
        "busbw_gbps": busbw_gbps(moved, seconds, collective.busbw_factor(ctx.world)),
        "bytes_sent_per_rank": bytes_sent, "bytes_source": bytes_source,
        "ring_chunks": getattr(run, "pieces", None),
        "n_wrong": n_wrong,
        **gpu_summary,
    }
    return row, times_us, sample_rows(gpu_samples)


def _check(collective, buffers, run, point: Point, ctx: RankContext, fault) -> int:
    """Refill the inputs, run once more, and count elements that differ from the exact expected result."""
    collective.fill_inputs(buffers, rank=ctx.rank, world=ctx.world)
    run()
    if ctx.device.type == "cuda":
        torch.cuda.synchronize(ctx.device)
    faults.corrupt_output(fault, buffers.recv, rank=ctx.rank, point=point.index)
    expected = collective.expected(point.layout, rank=ctx.rank, world=ctx.world, op=point.op,
                                   dtype=buffers.recv.dtype, device=ctx.device)
    wrong = check_data.count_wrong(buffers.recv, expected, op=point.op, world=ctx.world)
    return ctx.sum_over_ranks(wrong)


def _bytes_sent_per_rank(collective, run, layout, ctx: RankContext) -> tuple[float, str]:
    """What the last run sent, averaged over ranks, when the implementation counts it; else the ring model.

    The mean over ranks is exact even with uneven chunks: the chunks each rank skips add up to the whole message.
    """
    counted = getattr(run, "bytes_sent", None)
    if counted is None:
        return collective.bus_bytes(layout, ctx.world), "model"
    return ctx.sum_over_ranks(counted) / ctx.world, "counted"


def _gpu_summary(samples: list, ctx: RankContext) -> dict:
    """The GPU columns of a row, combined over ranks; empty on CPU runs (no collective is spent on them)."""
    if ctx.device.type != "cuda":
        return dict.fromkeys(SUMMARY_COLUMNS)
    return combine_ranks(ctx.gather_objects(summarize_gpu(samples) if samples else {}))


def _keys(row: dict) -> dict:
    return {column: row[column] for column in store.KEY_COLUMNS}


def run_in_dir(run_dir: Path) -> None:
    """As a launched rank: run the spec.json that the launcher wrote into run_dir."""
    spec = SweepSpec.from_json((run_dir / store.SPEC_FILE).read_text(encoding="utf-8"))
    run_sweep(spec, run_dir=run_dir, run_id=store.run_id_of(run_dir),
              collective_timeout_s=spec.timeout_s + WATCHED_TIMEOUT_GRACE_S)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="commbench rank process (started by `commbench sweep`)")
    parser.add_argument("--run-dir", type=Path, required=True)
    run_in_dir(parser.parse_args(argv).run_dir)
    faults.on_exit(faults.from_env(), rank=int(os.environ["RANK"]))


if __name__ == "__main__":
    main(sys.argv[1:])
