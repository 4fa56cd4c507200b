"""Measure one training configuration on every rank and (rank 0) turn it into a row.

Order: build, draw the micro-batches on the device (training/batches.py: the timed steps only pick from them),
warm-up steps (DDP rebuilds its buckets at step 2), reset the peak-memory counter, timed steps (barrier before each; a
step lasts as long as its slowest rank), model state and the replica check, a profiled trace of a few more steps,
real steps and compute-only baseline steps in alternation (training/compute_baseline.py: the median of the paired
differences is the communication's exposed cost, for every implementation), and last, for DDP, steps with and without
gradient sync in alternation: the median of the paired differences is the time the sync adds (pairs cancel the
machine's drift). Steps under no_sync let
replicas drift apart, so nothing that needs them in sync comes after.
"""

from __future__ import annotations

import functools
import hashlib
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

import torch

from commbench import faults, profiling, store
from commbench.bench_kind import Measured, RankRun, Row
from commbench.measure.stats import Summary, summarize
from commbench.models import comm_volume, memory
from commbench.models.shard_layout import formula_at_rest, local_state
from commbench.models.strategies import display_name
from commbench.profiling.capture import capture
from commbench.profiling.comm_calls import comm_calls
from commbench.profiling.nvml_sampler import GpuSample, GpuSampler, combine_ranks, rank_summary, ranks_sharing_gpu
from commbench.schema import common
from commbench.schema import gpu as gpu_columns
from commbench.schema import training as col
from commbench.training.batches import BatchPool
from commbench.training.build import Built, build
from commbench.training.compute_baseline import METHOD as BASELINE_METHOD
from commbench.training.compute_baseline import build_baseline, predicted_extra, refusal
from commbench.training.exposed import paired_cost, trace_figures
from commbench.training.flops import rate_columns, synthetic_flops_per_token
from commbench.training.master_weights import state_bytes_of
from commbench.training.meshes import DeviceMeshes
from commbench.training.model_state import ModelStateBytes, count, local_part
from commbench.training.powersgd_messages import predicted_traffic as powersgd_traffic
from commbench.training.precision import element_bytes, gathered_bytes
from commbench.training.spec import ConfigPoint, TrainConfig, TrainSpec
from commbench.training.step import step_function
from commbench.training.synthetic import count_params

if TYPE_CHECKING:
    from torch.nn.parallel import DistributedDataParallel

    from commbench.bench_kind import RankContext
    from commbench.models.comm_volume import TrainingTraffic

StepFunction = Callable[..., float]
"""training/step.py step_function: one optimizer step (step(sync=False) without gradient sync); its loss."""


@dataclass(frozen=True)
class LaunchMemory:
    """Per launch: what a configuration's leftovers are measured against, and what counts as fitting."""

    baseline_bytes: int | None
    budget_bytes: float | None
    meshes: DeviceMeshes
    """FSDP's device meshes, shared by the launch's configurations of one shape (training/meshes.py)."""


def prepare(spec: TrainSpec, ctx: RankContext) -> LaunchMemory:
    """Before the first configuration of a launch: release what is free, and note where memory starts."""
    ctx.platform.release()
    budget = spec.memory_budget_bytes or ctx.platform.capacity(_ranks_sharing_memory(ctx))
    return LaunchMemory(ctx.platform.current(), budget, DeviceMeshes())


def _ranks_sharing_memory(ctx: RankContext) -> int:
    """The ranks drawing on this rank's memory: the host's ranks on CPU; on CUDA the ranks on this rank's GPU
    (gloo may put several on one), counted from every rank's GPU UUID."""
    if not ctx.platform.has_gpu:
        return ctx.local_world
    return ranks_sharing_gpu(ctx.gather_objects(ctx.platform.gpu_uuid()), ctx.rank)


def measure_config(spec: TrainSpec, point: ConfigPoint, run: RankRun[LaunchMemory]) -> Measured:
    """Every rank runs this; rank 0 gets the row and per-step samples."""
    run.ctx.platform.release()
    start_bytes = run.ctx.platform.current()
    # the model, its optimizer and the pool live in _measure only: the next configuration starts from released memory
    measurement = _measure(spec, point, run, start_bytes)
    if run.ctx.rank != 0:
        return Measured(None)
    row = _row(spec, point, run.ctx, measurement, run_id=run.run_id, budget_bytes=run.state.budget_bytes)
    return Measured(row, _samples(measurement.steps))


@dataclass(frozen=True)
class _RankFigures:
    """What one rank measured of a configuration, gathered to rank 0 for the row."""

    peak: dict[str, int | None]
    """platform.peak(): peak_mem_bytes and peak_mem_reserved_bytes."""
    carryover: int | None
    """Bytes in use when the configuration started, beyond the launch's start (None where unknown)."""
    state: ModelStateBytes
    predicted_state: int
    """The model state the shard layout predicts for this rank."""
    gpu: dict
    """nvml_sampler.rank_summary of this rank's GPU samples."""

    @property
    def measured_state(self) -> int:
        return self.state.param_bytes + self.state.grad_bytes + self.state.optim_bytes

    @property
    def state_exact(self) -> bool:
        return self.measured_state == self.predicted_state


@dataclass(frozen=True)
class _StepTimes:
    """The timed phases (ms, each step the slowest rank's): the timed steps and this rank's losses, the compute
    baseline's pairs (real, baseline, ...) or why there are none, and DDP's pairs (sync, no_sync, ...)."""

    times_ms: list[float]
    losses: list[float]
    baseline_ms: list[float] | None
    baseline_note: str
    paired_ms: list[float] | None


@dataclass(frozen=True)
class _Measurement:
    """Everything a configuration's row is made from, as rank 0 holds it once the ranks have measured."""

    steps: _StepTimes
    per_rank: list[_RankFigures]
    traced: dict
    """_traced_comm's figures by column (empty without traces)."""
    ddp_figures: Row
    units: list[list[tuple[int, ...]]]
    n_wrong: int


def _measure(spec: TrainSpec, point: ConfigPoint, run: RankRun[LaunchMemory], start_bytes: int | None
             ) -> _Measurement:
    """Build, warm up and time the configuration, check its replicas, trace it and time its pairs: every rank runs
    the same collectives in the same order."""
    ctx, config = run.ctx, point.config
    built = build(config, spec, rank=ctx.rank, world=ctx.world, device=ctx.device, meshes=run.state.meshes)
    # every micro-batch is drawn here, on the device: the timed steps only pick from the pool
    pool = BatchPool(spec.shape, micro_batch=spec.micro_batch, seed=spec.seed, rank=ctx.rank, device=ctx.device)
    step = step_function(built.model, built.optimizer, pool, accum_steps=config.accum_steps,
                         precision=config.mixed_precision, impl=config.impl, device=ctx.device,
                         accum_sync=config.accum_sync)
    for _ in range(spec.warmup_steps):
        step()
    ctx.platform.reset_peak()
    times_ms, losses, gpu_samples = _sampled_steps(step, ctx, spec.steps, run.sampler)
    peak = ctx.platform.peak()
    with torch.no_grad():  # a test's injected fault: the replica check must catch it
        faults.corrupt_output(run.fault, local_part(next(built.model.parameters())), rank=ctx.rank, point=point.index)
    figures = _rank_figures(built, config, ctx, peak=peak, gpu_samples=gpu_samples,
                            carryover=_carryover(start_bytes, run.state.baseline_bytes))
    # ranks that failed the check (each counted once, however many of its steps had a non-finite loss)
    failed_here = _differs_from_its_replicas(built, ctx) or not all(math.isfinite(x) for x in losses)
    n_wrong = ctx.sum_over_ranks(int(failed_here))
    ddp_figures = _ddp_logging(built.ddp)
    traced = _traced_comm(step, spec, point, ctx, run.trace_dir) if spec.records_traces else {}
    baseline_ms, baseline_note = _paired_with_baseline(step, built, pool, spec, config, ctx, peak=peak)
    paired_ms = _paired_without_sync(step, ctx, spec.steps) if config.impl == "ddp" else None
    per_rank = ctx.gather_objects(figures)
    faults.keep_alive(run.fault, built, rank=ctx.rank, point=point.index)
    return _Measurement(_StepTimes(times_ms, losses, baseline_ms, baseline_note, paired_ms), per_rank, traced,
                        ddp_figures, built.units, n_wrong)


def _sampled_steps(step: StepFunction, ctx: RankContext, steps: int, sampler: GpuSampler | None
                   ) -> tuple[list[float], list[float], list[GpuSample]]:
    """The timed steps (ms, the slowest rank's), this rank's losses, and its GPU's samples over them (marked at the
    timed loop's edges)."""
    if sampler:
        sampler.start()
        sampler.mark_timed_start()
    try:
        times_ms, losses = _timed_steps(step, ctx, [True] * steps)
        if sampler:
            sampler.mark_timed_end()
    finally:
        gpu_samples = sampler.stop() if sampler else []
    return times_ms, losses, gpu_samples


def _paired_without_sync(step: StepFunction, ctx: RankContext, steps: int) -> list[float]:
    """DDP: steps with and without gradient sync in alternation (with sync first)."""
    step(sync=False)  # untimed: the first step without sync may take another path
    paired_ms, _ = _timed_steps(step, ctx, [True, False] * steps)
    return paired_ms


def _carryover(start_bytes: int | None, baseline_bytes: int | None) -> int | None:
    return None if start_bytes is None or baseline_bytes is None else start_bytes - baseline_bytes


def _rank_figures(built: Built, config: TrainConfig, ctx: RankContext, *, peak: dict, gpu_samples: list[GpuSample],
                  carryover: int | None) -> _RankFigures:
    state = count(built.model, built.optimizer)
    predicted = local_state(impl=config.impl, units=built.units, rank=ctx.rank, world=ctx.world,
                            shard_group=config.shard_group, **built.layout).bytes(state_bytes_of(config))
    return _RankFigures(peak=peak, carryover=carryover, state=state, predicted_state=predicted,
                        gpu=rank_summary(gpu_samples, uuid=ctx.platform.gpu_uuid()))


def _samples(steps: _StepTimes) -> list[Row]:
    """samples.csv's rows of a configuration: each timed step, then each pair's two steps under their phases."""
    samples = [_sample("sync", index, value) for index, value in enumerate(steps.times_ms)]
    samples += [_sample("paired_sync" if index % 2 == 0 else "paired_nosync", index // 2, value)
                for index, value in enumerate(steps.paired_ms or [])]
    samples += [_sample("paired_step" if index % 2 == 0 else "paired_compute", index // 2, value)
                for index, value in enumerate(steps.baseline_ms or [])]
    return samples


def _sample(phase: str, step: int, step_time_ms: float) -> Row:
    return {col.PHASE: phase, col.STEP: step, col.STEP_TIME_MS: step_time_ms}


def _timed_steps(step: StepFunction, ctx: RankContext, syncs: list[bool]) -> tuple[list[float], list[float]]:
    """Per-step time (ms, the slowest rank's) and this rank's losses; syncs says which steps sync gradients."""
    return _timed_calls([functools.partial(step, sync) for sync in syncs], ctx)


def _timed_calls(calls: list[Callable[[], float]], ctx: RankContext) -> tuple[list[float], list[float]]:
    """Each call (a step taking no arguments) timed as a step: barrier first, the slowest rank's time (ms)."""
    times_s, losses = [], []
    for call in calls:
        ctx.barrier()
        start = time.perf_counter()
        losses.append(call())  # returns a Python float: the device has finished the step's computation
        ctx.platform.synchronize()
        times_s.append(time.perf_counter() - start)
    return [seconds * 1e3 for seconds in ctx.max_over_ranks(times_s)], losses


def _paired_with_baseline(step: StepFunction, built: Built, pool: BatchPool, spec: TrainSpec, config: TrainConfig,
                          ctx: RankContext, *, peak: dict) -> tuple[list[float] | None, str]:
    """Real steps and compute-only baseline steps in alternation (real first; each the slowest rank's time), and
    what the compute_baseline column says: the method, or "absent: why" (every rank then skips it, so that none
    waits at a barrier for a rank that could not build its copy)."""
    capacity = ctx.platform.capacity(_ranks_sharing_memory(ctx))  # what the device holds, not --memory-budget
    peak_bytes = _max([peak[col.PEAK_MEM_BYTES], peak[col.PEAK_MEM_RESERVED_BYTES]])
    reason = refusal(peak_bytes=peak_bytes, extra=predicted_extra(built, config, spec), capacity_bytes=capacity)
    baseline = None
    if not any(ctx.gather_objects(reason)):
        try:
            baseline = build_baseline(built, config, spec, pool, device=ctx.device)
            for _ in range(spec.warmup_steps):  # untimed, as the real steps' warm-up (AdamW allocates its state)
                baseline()
        except (torch.OutOfMemoryError, MemoryError):
            baseline, reason = None, f"absent: out of memory building or warming the local copy on rank {ctx.rank}"
            ctx.platform.release()
    reasons = [text for text in ctx.gather_objects(reason) if text]
    if reasons:
        return None, reasons[0]
    assert baseline is not None  # no rank gave a reason: every rank built its copy
    times_ms, _ = _timed_calls([step, baseline] * spec.steps, ctx)
    return times_ms, BASELINE_METHOD


def _digest(built: Built) -> str:
    """A hash of the parameters this rank holds (its shards, for sharded strategies)."""
    digest = hashlib.sha1()
    for parameter in built.model.parameters():
        digest.update(local_part(parameter).detach().contiguous().view(torch.uint8).cpu().numpy().tobytes())
    return digest.hexdigest()


def _differs_from_its_replicas(built: Built, ctx: RankContext) -> bool:
    """Whether this rank's parameters differ from the first rank holding the same state (all ranks for DDP and
    ZeRO-1, each shard's replicas for HSDP; a fully sharded rank has no replica to compare with)."""
    held = ctx.gather_objects((built.replica_of, _digest(built)))
    first: dict[int, str] = {}
    for replica_of, digest in held:
        first.setdefault(replica_of, digest)
    return first[built.replica_of] != held[ctx.rank][1]


def _ddp_logging(ddp: torch.nn.Module | None) -> Row:
    """DDP's own figures (its reducer's logging, sampled every step): buckets after the rebuild, comm time."""
    if ddp is None:
        return {}
    # built.ddp is the DistributedDataParallel module itself (training/build.py), never a wrapper of it
    data = cast("DistributedDataParallel", ddp)._get_ddp_logging_data()
    sizes_text = data.get("rebuilt_bucket_sizes") or data.get("bucket_sizes") or ""
    sizes = [int(size) for size in str(sizes_text).split(",") if size.strip()]
    return {col.BUCKET_COUNT: len(sizes), col.BUCKET_SIZES_BYTES: ";".join(map(str, sizes)),
            col.DDP_BACKWARD_COMM_MS: data.get("avg_backward_comm_time", 0) / 1e6 or None,
            col.DDP_COMM_OVERLAP_MS: data.get("avg_backward_compute_comm_overlap_time", 0) / 1e6 or None}


def _traced_comm(step: StepFunction, spec: TrainSpec, point: ConfigPoint, ctx: RankContext, trace_dir: Path | None
                 ) -> dict:
    """Communication per optimizer step from each rank's trace of spec.profile_steps steps (mean over the steps):
    comm and exposed comm as the median and max over ranks (training/exposed.py); calls and message sizes (equal on
    every rank)."""
    assert trace_dir is not None  # the driver gives a trace folder whenever spec.records_traces
    path = trace_dir / f"rank{ctx.rank}-{spec.bench}-config{point.index:03d}.json.gz"
    capture(step, barrier=ctx.barrier, iterations=spec.profile_steps, platform=ctx.platform, path=path,
            record_shapes=True)
    traced = profiling.analyze([path])
    analysis = traced.overlap[0]
    steps = analysis["steps"] or [analysis]
    calls = comm_calls(traced.traces[0], gather_group_size=point.config.shard_group or ctx.world)
    mine = {col.COMM_MS: sum(s["comm_us"] for s in steps) / len(steps) / 1e3,
            col.EXPOSED_COMM_MS: sum(s["exposed_comm_us"] for s in steps) / len(steps) / 1e3,
            col.COMM_CALLS: len(calls) / len(steps),
            col.COMM_MSG_ELEMS: None if any(call.elements is None for call in calls)
            else sum(call.elements for call in calls if call.elements is not None) / len(steps)}
    return trace_figures(ctx.gather_objects(mine))


def _row(spec: TrainSpec, point: ConfigPoint, ctx: RankContext, measured: _Measurement, *, run_id: str,
         budget_bytes: float | None) -> Row:
    """The configuration's results.csv row, from its column groups."""
    config, params = point.config, count_params(spec.shape)
    summary = summarize(measured.steps.times_ms)
    samples_per_s = _global_batch(spec, config, ctx.world) / (summary.p50 / 1e3)
    return _in_file_order({
        **_identity_columns(spec, point, ctx, run_id=run_id, params=params),
        **_step_columns(spec, measured.steps, summary, samples_per_s=samples_per_s),
        **_comm_columns(spec, config, ctx.world, measured),
        **_memory_columns(measured.per_rank, budget_bytes),
        **_state_columns(config, ctx, measured.per_rank, params=params),
        common.N_WRONG: measured.n_wrong,
        **rate_columns(tokens_per_s=samples_per_s * spec.shape.seq_len, world=ctx.world,
                       flops_per_token=synthetic_flops_per_token(spec.shape), device_type=ctx.device.type,
                       device_name=ctx.platform.device_name(), precision=config.mixed_precision),
    })


def _in_file_order(columns: Row) -> Row:
    """The row in commbench/schema/training.py's order; a column declared there that no group fills, or one filled
    that is not declared, is named here (on the first configuration of a run) rather than lost or a KeyError."""
    missing = [column for column in col.RESULT_COLUMNS if column not in columns]
    undeclared = [column for column in columns if column not in col.RESULT_COLUMNS]
    if missing or undeclared:
        raise RuntimeError(f"training row: {missing} declared in commbench/schema/training.py but not measured; "
                           f"{undeclared} measured but not declared there")
    return {column: columns[column] for column in col.RESULT_COLUMNS}


def _global_batch(spec: TrainSpec, config: TrainConfig, world: int) -> int:
    return spec.micro_batch * config.accum_steps * world


def _identity_columns(spec: TrainSpec, point: ConfigPoint, ctx: RankContext, *, run_id: str, params: int) -> Row:
    """What the row is of: the run, the configuration and its settings, where it ran, the model and the batch."""
    config, shape = point.config, spec.shape
    return {
        common.SCHEMA_VERSION: store.SCHEMA_VERSION, common.RUN_ID: run_id, common.BENCH: spec.bench,
        col.CONFIG: config.label(), col.CONFIG_INDEX: point.index, col.STRATEGY: config.strategy, col.IMPL: config.impl,
        common.BACKEND: ctx.backend, common.DEVICE: ctx.device.type, common.WORLD_SIZE: ctx.world,
        col.MODEL_KIND: shape.kind, col.PARAMS: params, col.LAYERS: shape.layers, col.HIDDEN: shape.hidden,
        col.HEADS: shape.heads, col.SEQ_LEN: shape.seq_len, col.MICRO_BATCH: spec.micro_batch,
        col.ACCUM_STEPS: config.accum_steps, col.GLOBAL_BATCH: _global_batch(spec, config, ctx.world),
        **{column: getattr(config, column) for column in col.SETTING_COLUMNS},  # TrainConfig's fields of those names
    }


def _step_columns(spec: TrainSpec, steps: _StepTimes, summary: Summary, *, samples_per_s: float) -> Row:
    """Step times and rates, the paired differences (DDP's sync cost, communication against the compute baseline)
    and the last loss."""
    paired, baseline = steps.paired_ms, steps.baseline_ms
    return {
        col.STEPS: summary.n, col.WARMUP_STEPS: spec.warmup_steps, col.STEP_TIME_MS_P50: summary.p50,
        col.STEP_TIME_MS_P95: summary.p95, col.STEP_TIME_MS_MIN: summary.min, col.STEP_TIME_MS_MEAN: summary.mean,
        col.STEP_TIME_MS_CI_LO: summary.ci_lo, col.STEP_TIME_MS_CI_HI: summary.ci_hi,
        col.SAMPLES_PER_S: samples_per_s, col.TOKENS_PER_S: samples_per_s * spec.shape.seq_len,
        col.STEP_TIME_MS_NOSYNC_P50: summarize(paired[1::2]).p50 if paired else None,
        col.EXPOSED_COMM_MS_NOSYNC: summarize([with_sync - without for with_sync, without
                                             in zip(paired[::2], paired[1::2])]).p50 if paired else None,
        col.STEP_TIME_MS_BASELINE_P50: summarize(baseline[1::2]).p50 if baseline else None,
        col.EXPOSED_COMM_MS_BASELINE: paired_cost(baseline[::2], baseline[1::2]) if baseline else None,
        col.COMPUTE_BASELINE: steps.baseline_note, col.LOSS_LAST: steps.losses[-1],
    }


_TRACED = (col.COMM_MS, col.EXPOSED_COMM_MS, col.COMM_MS_MAX, col.EXPOSED_COMM_MS_MAX, col.OVERLAP_PCT, col.COMM_CALLS,
           col.COMM_MSG_ELEMS)
"""The columns from the profiled trace (_traced_comm); empty without traces."""
_DDP_LOGGING = (col.BUCKET_COUNT, col.BUCKET_SIZES_BYTES, col.DDP_BACKWARD_COMM_MS, col.DDP_COMM_OVERLAP_MS)
"""The columns from DDP's own logging (_ddp_logging); empty for the other implementations."""


def _comm_columns(spec: TrainSpec, config: TrainConfig, world: int, measured: _Measurement) -> Row:
    """Communication as traced, as predicted, and as DDP logs it."""
    traffic = _predicted_traffic(spec, config, world, measured.units)
    return {**{column: measured.traced.get(column) for column in _TRACED},
            col.COMM_MSG_ELEMS_PREDICTED: traffic.msg_elements,
            col.COMM_BYTES_PER_RANK_PREDICTED: traffic.bytes_sent_per_rank,
            **{column: measured.ddp_figures.get(column) for column in _DDP_LOGGING}}


def _predicted_traffic(spec: TrainSpec, config: TrainConfig, world: int, units: list[list[tuple[int, ...]]]
                       ) -> TrainingTraffic:
    """What the strategy's collectives move per step (models/comm_volume.py), in the dtypes the configuration sends."""
    traffic = comm_volume.training_traffic(
        strategy=config.strategy, impl=config.impl, units=units, world=world,
        accum_steps=config.accum_steps, shard_group=config.shard_group, accum_sync=config.accum_sync,
        bucket_cap_mb=config.bucket_cap_mb,
        gather_bytes=element_bytes(True) if config.master_weights
        else gathered_bytes(config.mixed_precision, config.impl),
        reduce_bytes=element_bytes(config.comm_hook in ("bf16", "fp16") or config.master_weights
                                   or config.reduce_dtype == "bf16"))
    if config.comm_hook == "powersgd":  # not one all-reduce of the gradients: three smaller ones per bucket
        traffic = powersgd_traffic(spec.shape, cap_mb=config.bucket_cap_mb, first_mb=config.first_bucket_mb,
                                   world=world, element_bytes=element_bytes(bool(config.master_weights)))
    return traffic


def _memory_columns(per_rank: list[_RankFigures], budget_bytes: float | None) -> Row:
    """Peak memory (the largest rank), what earlier configurations left, and whether the peak fits the budget."""
    peak_bytes = _max(rank.peak[col.PEAK_MEM_BYTES] for rank in per_rank)
    carryovers = [rank.carryover for rank in per_rank if rank.carryover is not None]
    gpu = combine_ranks([rank.gpu for rank in per_rank])
    return {col.PEAK_MEM_BYTES: peak_bytes,
            col.PEAK_MEM_RESERVED_BYTES: _max(rank.peak[col.PEAK_MEM_RESERVED_BYTES] for rank in per_rank),
            gpu_columns.GPU_MEM_USED_PEAK_BYTES: gpu.get(gpu_columns.GPU_MEM_USED_PEAK_BYTES),
            col.MEM_CARRYOVER_BYTES: max(carryovers) if carryovers else None, col.MEMORY_BUDGET_BYTES: budget_bytes,
            col.FITS: None if peak_bytes is None or budget_bytes is None else bool(peak_bytes <= budget_bytes)}


def _state_columns(config: TrainConfig, ctx: RankContext, per_rank: list[_RankFigures], *, params: int) -> Row:
    """The model state of the rank holding the most, measured, predicted from its shard layout and by the
    textbook formula, and how many ranks hold exactly the prediction."""
    worst = max(per_rank, key=lambda rank: rank.measured_state)
    state = worst.state
    formula = formula_at_rest(config.strategy, config.impl)
    formula_bytes = memory.state_per_rank(formula, params=params, ranks=ctx.world, state=state_bytes_of(config),
                                          shard_group=config.shard_group).total_bytes
    return {col.MODEL_STATE_BYTES: worst.measured_state, col.MODEL_PARAM_BYTES: state.param_bytes,
            col.MODEL_GRAD_BYTES: state.grad_bytes, col.MODEL_OPTIM_BYTES: state.optim_bytes,
            col.OPTIM_SCALAR_BYTES: state.optim_scalar_bytes, col.MODEL_STATE_BYTES_PREDICTED: worst.predicted_state,
            col.MODEL_STATE_EXACT_RANKS: sum(rank.state_exact for rank in per_rank),
            col.MODEL_STATE_FORMULA: display_name(formula), col.MODEL_STATE_BYTES_FORMULA: formula_bytes,
            **_host_state(config, ctx.device.type, state, worst.predicted_state)}


def _host_state(config: TrainConfig, device_type: str, state: ModelStateBytes, predicted_state: int) -> Row:
    """GPU runs: the model state in host memory, measured and predicted (CPU offload moves all of it there, else
    none); on a CPU run every tensor is in host memory, so the columns stay empty."""
    if device_type == "cpu":
        return {col.MODEL_STATE_HOST_BYTES: None, col.MODEL_STATE_HOST_BYTES_PREDICTED: None}
    return {col.MODEL_STATE_HOST_BYTES: state.host_bytes,
            col.MODEL_STATE_HOST_BYTES_PREDICTED: predicted_state if config.cpu_offload else 0}


def _max(values: Iterable[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return max(present) if present else None
