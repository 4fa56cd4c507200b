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

import functools
import hashlib
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from commbench import faults, profiling, store
from commbench.bench_kind import Measured, RankRun
from commbench.measure.stats import summarize
from commbench.models import comm_volume, memory
from commbench.models.shard_layout import formula_at_rest, local_state
from commbench.models.strategies import display_name
from commbench.profiling.capture import capture
from commbench.profiling.comm_calls import comm_calls
from commbench.profiling.nvml_sampler import combine_ranks, rank_summary, ranks_sharing_gpu
from commbench.training.batches import BatchPool
from commbench.training.build import Built, build
from commbench.training.compute_baseline import METHOD as BASELINE_METHOD
from commbench.training.compute_baseline import build_baseline, predicted_extra, refusal
from commbench.training.exposed import paired_cost, trace_figures
from commbench.training.flops import rate_columns, synthetic_flops_per_token
from commbench.training.master_weights import state_bytes_of
from commbench.training.model_state import count
from commbench.training.powersgd_messages import predicted_traffic as powersgd_traffic
from commbench.training.precision import gathered_bytes
from commbench.training.spec import SETTING_COLUMNS, ConfigPoint, TrainSpec
from commbench.training.step import step_function
from commbench.training.synthetic import count_params

FP32_ADAM = memory.PRESETS["fp32-adam"]  # at rest without master weights (training/master_weights.py): fp32 AdamW


@dataclass(frozen=True)
class LaunchMemory:
    """Per launch: what a configuration's leftovers are measured against, and what counts as fitting."""

    baseline_bytes: int | None
    budget_bytes: float | None


def prepare(spec: TrainSpec, ctx) -> LaunchMemory:
    """Before the first configuration of a launch: release what is free, and note where memory starts."""
    ctx.platform.release()
    budget = spec.memory_budget_bytes or ctx.platform.capacity(_ranks_sharing_memory(ctx))
    return LaunchMemory(ctx.platform.current(), budget)


def _ranks_sharing_memory(ctx) -> int:
    """The ranks drawing on this rank's memory: the host's ranks on CPU; on CUDA the ranks on this rank's GPU
    (gloo may put several on one), counted from every rank's GPU UUID."""
    if not ctx.platform.has_gpu:
        return ctx.local_world
    return ranks_sharing_gpu(ctx.gather_objects(ctx.platform.gpu_uuid()), ctx.rank)


def measure_config(spec: TrainSpec, point: ConfigPoint, run: RankRun) -> Measured:
    """Every rank runs this; rank 0 gets the row and per-step samples."""
    ctx, fault, platform = run.ctx, run.fault, run.ctx.platform
    config, device = point.config, ctx.device
    platform.release()
    start_bytes = platform.current()
    built = build(config, spec, rank=ctx.rank, world=ctx.world, device=device)
    # every micro-batch is drawn here, on the device: the timed steps only pick from the pool
    pool = BatchPool(spec.shape, micro_batch=spec.micro_batch, seed=spec.seed, rank=ctx.rank, device=device)
    step = step_function(built.model, built.optimizer, pool, accum_steps=config.accum_steps,
                         precision=config.mixed_precision, impl=config.impl, device=device,
                         accum_sync=config.accum_sync)

    for _ in range(spec.warmup_steps):
        step()
    platform.reset_peak()
    sampler = run.sampler
    if sampler:
        sampler.start()
        sampler.mark_timed_start()
    try:
        times_ms, losses = _timed_steps(step, ctx, [True] * spec.steps)
        if sampler:
            sampler.mark_timed_end()
    finally:
        gpu_samples = sampler.stop() if sampler else []
    peak = platform.peak()
    with torch.no_grad():  # a test's injected fault: the replica check must catch it
        faults.corrupt_output(fault, _local(next(built.model.parameters())), rank=ctx.rank, point=point.index)
    state = count(built.model, built.optimizer)
    predicted = local_state(impl=config.impl, units=built.units, rank=ctx.rank, world=ctx.world,
                            shard_group=config.shard_group, **built.layout).bytes(state_bytes_of(config))
    measured_state = state.param_bytes + state.grad_bytes + state.optim_bytes
    # ranks that failed the check (each counted once, however many of its steps had a non-finite loss)
    failed_here = _differs_from_its_replicas(built, ctx) or not all(math.isfinite(x) for x in losses)
    n_wrong = ctx.sum_over_ranks(int(failed_here))
    ddp_figures = _ddp_logging(built.ddp)
    traced = _traced_comm(step, spec, point, ctx, run.trace_dir) if spec.records_traces else {}
    baseline_ms, baseline_note = _paired_with_baseline(step, built, pool, spec, config, ctx, peak=peak)
    paired_ms = None
    if config.impl == "ddp":
        step(sync=False)  # untimed: the first step without sync may take another path
        paired_ms, _ = _timed_steps(step, ctx, [True, False] * spec.steps)
    baseline_bytes = run.state.baseline_bytes
    per_rank = ctx.gather_objects({
        "peak": peak, "carryover": None if start_bytes is None or baseline_bytes is None
        else start_bytes - baseline_bytes, "state": state, "state_exact": measured_state == predicted,
        "measured_state": measured_state, "predicted_state": predicted,
        "gpu": rank_summary(gpu_samples, uuid=platform.gpu_uuid())})
    faults.keep_alive(fault, built, rank=ctx.rank, point=point.index)
    # the next configuration starts from released memory (step holds the model, the optimizer and the pool)
    units = built.units
    del built, pool, step
    if ctx.rank != 0:
        return Measured(None)
    row = _row(spec, point, ctx, run_id=run.run_id, times_ms=times_ms, paired_ms=paired_ms, losses=losses,
               baseline_ms=baseline_ms, baseline_note=baseline_note,
               per_rank=per_rank, traced=traced, ddp_figures=ddp_figures, n_wrong=n_wrong,
               budget_bytes=run.state.budget_bytes, units=units)
    samples = [{"phase": "sync", "step": index, "step_time_ms": value} for index, value in enumerate(times_ms)]
    samples += [{"phase": "paired_sync" if index % 2 == 0 else "paired_nosync", "step": index // 2,
                 "step_time_ms": value} for index, value in enumerate(paired_ms or [])]
    samples += [{"phase": "paired_step" if index % 2 == 0 else "paired_compute", "step": index // 2,
                 "step_time_ms": value} for index, value in enumerate(baseline_ms or [])]
    return Measured(row, samples)


def _timed_steps(step, ctx, syncs: list[bool]) -> tuple[list[float], list[float]]:
    """Per-step time (ms, the slowest rank's) and this rank's losses; syncs says which steps sync gradients."""
    return _timed_calls([functools.partial(step, sync) for sync in syncs], ctx)


def _timed_calls(calls, ctx) -> tuple[list[float], list[float]]:
    """Each call (a step taking no arguments) timed as a step: barrier first, the slowest rank's time (ms)."""
    times_s, losses = [], []
    for call in calls:
        ctx.barrier()
        start = time.perf_counter()
        losses.append(call())  # returns a Python float: the device has finished the step's computation
        ctx.platform.synchronize()
        times_s.append(time.perf_counter() - start)
    return [seconds * 1e3 for seconds in ctx.max_over_ranks(times_s)], losses


def _paired_with_baseline(step, built: Built, pool: BatchPool, spec: TrainSpec, config, ctx, *, peak: dict
                          ) -> tuple[list[float] | None, str]:
    """Real steps and compute-only baseline steps in alternation (real first; each the slowest rank's time), and
    what the compute_baseline column says: the method, or "absent: why" (every rank then skips it, so that none
    waits at a barrier for a rank that could not build its copy)."""
    capacity = ctx.platform.capacity(_ranks_sharing_memory(ctx))  # what the device holds, not --memory-budget
    peak_bytes = _max([peak["peak_mem_bytes"], peak["peak_mem_reserved_bytes"]])
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
    times_ms, _ = _timed_calls([step, baseline] * spec.steps, ctx)
    return times_ms, BASELINE_METHOD


def _digest(built: Built) -> str:
    """A hash of the parameters this rank holds (its shards, for sharded strategies)."""
    digest = hashlib.sha1()
    for parameter in built.model.parameters():
        digest.update(_local(parameter).detach().contiguous().view(torch.uint8).cpu().numpy().tobytes())
    return digest.hexdigest()


def _local(parameter: torch.Tensor) -> torch.Tensor:
    return parameter.to_local() if hasattr(parameter, "to_local") else parameter


def _differs_from_its_replicas(built: Built, ctx) -> bool:
    """Whether this rank's parameters differ from the first rank holding the same state (all ranks for DDP and
    ZeRO-1, each shard's replicas for HSDP; a fully sharded rank has no replica to compare with)."""
    held = ctx.gather_objects((built.replica_of, _digest(built)))
    first: dict[int, str] = {}
    for replica_of, digest in held:
        first.setdefault(replica_of, digest)
    return first[built.replica_of] != held[ctx.rank][1]


def _ddp_logging(ddp) -> dict:
    """DDP's own figures (its reducer's logging, sampled every step): buckets after the rebuild, comm time."""
    if ddp is None:
        return {}
    data = ddp._get_ddp_logging_data()
    sizes_text = data.get("rebuilt_bucket_sizes") or data.get("bucket_sizes") or ""
    sizes = [int(size) for size in str(sizes_text).split(",") if size.strip()]
    return {"bucket_count": len(sizes), "bucket_sizes_bytes": ";".join(map(str, sizes)),
            "ddp_backward_comm_ms": data.get("avg_backward_comm_time", 0) / 1e6 or None,
            "ddp_comm_overlap_ms": data.get("avg_backward_compute_comm_overlap_time", 0) / 1e6 or None}


def _traced_comm(step, spec: TrainSpec, point: ConfigPoint, ctx, trace_dir: Path | None) -> dict:
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
    mine = {"comm_ms": sum(s["comm_us"] for s in steps) / len(steps) / 1e3,
            "exposed_comm_ms": sum(s["exposed_comm_us"] for s in steps) / len(steps) / 1e3,
            "comm_calls": len(calls) / len(steps),
            "comm_msg_elems": None if any(call.elements is None for call in calls)
            else sum(call.elements for call in calls if call.elements is not None) / len(steps)}
    return trace_figures(ctx.gather_objects(mine))


def _row(spec: TrainSpec, point: ConfigPoint, ctx, *, run_id, times_ms, paired_ms, losses, per_rank, traced,
         ddp_figures, n_wrong, budget_bytes, units, baseline_ms=None, baseline_note=None) -> dict:
    config = point.config
    summary = summarize(times_ms)
    global_batch = spec.micro_batch * config.accum_steps * ctx.world
    samples_per_s = global_batch / (summary.p50 / 1e3)
    nosync = summarize(paired_ms[1::2]) if paired_ms else None
    sync_cost = summarize([with_sync - without for with_sync, without in zip(paired_ms[::2], paired_ms[1::2])]) \
        if paired_ms else None
    params = count_params(spec.shape)
    traffic = comm_volume.training_traffic(
        strategy=config.strategy, impl=config.impl, units=units, world=ctx.world,
        accum_steps=config.accum_steps, shard_group=config.shard_group, accum_sync=config.accum_sync,
        bucket_cap_mb=config.bucket_cap_mb,
        gather_bytes=2 if config.master_weights else gathered_bytes(config.mixed_precision, config.impl),
        reduce_bytes=2 if config.comm_hook in ("bf16", "fp16") or config.master_weights
        or config.reduce_dtype == "bf16" else 4)
    if config.comm_hook == "powersgd":  # not one all-reduce of the gradients: three smaller ones per bucket
        traffic = powersgd_traffic(spec.shape, cap_mb=config.bucket_cap_mb, first_mb=config.first_bucket_mb,
                                   world=ctx.world, element_bytes=2 if config.master_weights else 4)
    formula = formula_at_rest(config.strategy, config.impl)
    formula_bytes = memory.state_per_rank(formula, params=params, ranks=ctx.world, state=state_bytes_of(config),
                                          shard_group=config.shard_group).total_bytes
    peaks = [rank["peak"] for rank in per_rank]
    worst = max(range(len(per_rank)), key=lambda r: per_rank[r]["measured_state"])
    carryovers = [rank["carryover"] for rank in per_rank if rank["carryover"] is not None]
    peak_bytes = _max(p["peak_mem_bytes"] for p in peaks)
    gpu = combine_ranks([rank["gpu"] for rank in per_rank])
    state = per_rank[worst]["state"]
    return {
        "schema_version": store.SCHEMA_VERSION, "run_id": run_id, "bench": spec.bench, "config": config.label(),
        "config_index": point.index, "strategy": config.strategy, "impl": config.impl, "backend": ctx.backend,
        "device": ctx.device.type, "world_size": ctx.world, "model_kind": spec.shape.kind, "params": params,
        "layers": spec.shape.layers, "hidden": spec.shape.hidden, "heads": spec.shape.heads,
        "seq_len": spec.shape.seq_len, "micro_batch": spec.micro_batch, "accum_steps": config.accum_steps,
        "global_batch": global_batch,
        **{name: getattr(config, name) for name in SETTING_COLUMNS},
        "steps": summary.n, "warmup_steps": spec.warmup_steps,
        "step_time_ms_p50": summary.p50, "step_time_ms_p95": summary.p95, "step_time_ms_min": summary.min,
        "step_time_ms_mean": summary.mean, "step_time_ms_ci_lo": summary.ci_lo, "step_time_ms_ci_hi": summary.ci_hi,
        "samples_per_s": samples_per_s, "tokens_per_s": samples_per_s * spec.shape.seq_len,
        "step_time_ms_nosync_p50": nosync.p50 if nosync else None,
        "exposed_comm_ms_nosync": sync_cost.p50 if sync_cost else None,
        "comm_ms": traced.get("comm_ms"), "exposed_comm_ms": traced.get("exposed_comm_ms"),
        "comm_ms_max": traced.get("comm_ms_max"), "exposed_comm_ms_max": traced.get("exposed_comm_ms_max"),
        "step_time_ms_baseline_p50": summarize(baseline_ms[1::2]).p50 if baseline_ms else None,
        "exposed_comm_ms_baseline": paired_cost(baseline_ms[::2], baseline_ms[1::2]) if baseline_ms else None,
        "compute_baseline": baseline_note,
        "overlap_pct": traced.get("overlap_pct"), "comm_calls": traced.get("comm_calls"),
        "comm_msg_elems": traced.get("comm_msg_elems"), "comm_msg_elems_predicted": traffic.msg_elements,
        "comm_bytes_per_rank_predicted": traffic.bytes_sent_per_rank,
        "bucket_count": ddp_figures.get("bucket_count"), "bucket_sizes_bytes": ddp_figures.get("bucket_sizes_bytes"),
        "ddp_backward_comm_ms": ddp_figures.get("ddp_backward_comm_ms"),
        "ddp_comm_overlap_ms": ddp_figures.get("ddp_comm_overlap_ms"),
        "peak_mem_bytes": peak_bytes, "peak_mem_reserved_bytes": _max(p["peak_mem_reserved_bytes"] for p in peaks),
        "gpu_mem_used_peak_bytes": gpu.get("gpu_mem_used_peak_bytes"),
        "mem_carryover_bytes": max(carryovers) if carryovers else None,
        "memory_budget_bytes": budget_bytes,
        "fits": None if peak_bytes is None or budget_bytes is None else bool(peak_bytes <= budget_bytes),
        "model_state_bytes": per_rank[worst]["measured_state"], "model_param_bytes": state.param_bytes,
        "model_grad_bytes": state.grad_bytes, "model_optim_bytes": state.optim_bytes,
        "optim_scalar_bytes": state.optim_scalar_bytes,
        "model_state_bytes_predicted": per_rank[worst]["predicted_state"],
        "model_state_exact_ranks": sum(rank["state_exact"] for rank in per_rank),
        "model_state_formula": display_name(formula), "model_state_bytes_formula": formula_bytes,
        **_host_state(config, ctx.device.type, state, per_rank[worst]["predicted_state"]),
        "loss_last": losses[-1], "n_wrong": n_wrong,
        **rate_columns(tokens_per_s=samples_per_s * spec.shape.seq_len, world=ctx.world,
                       flops_per_token=synthetic_flops_per_token(spec.shape), device_type=ctx.device.type,
                       device_name=ctx.platform.device_name(), precision=config.mixed_precision),
    }


def _host_state(config, device_type: str, state, predicted_state: int) -> dict:
    """GPU runs: the model state in host memory, measured and predicted (CPU offload moves all of it there, else
    none); on a CPU run every tensor is in host memory, so the columns stay empty."""
    if device_type == "cpu":
        return {"model_state_host_bytes": None, "model_state_host_bytes_predicted": None}
    return {"model_state_host_bytes": state.host_bytes,
            "model_state_host_bytes_predicted": predicted_state if config.cpu_offload else 0}


def _max(values) -> float | None:
    present = [value for value in values if value is not None]
    return max(present) if present else None
