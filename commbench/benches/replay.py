"""Bench kind `replay` (`commbench replay TRACE...`): a traced training step's collectives run again on this job."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from commbench.bench_kind import Bench, Metric, Plot, Spec
from commbench.benches.cluster_kind import ClusterKind
from commbench.benches.options import TargetOptions, option
from commbench.errors import CommbenchError
from commbench.machine import resolve_target
from commbench.names import CUDA, GLOO, GLOO_CUDA_COLLECTIVES
from commbench.schema import common
from commbench.schema.replay import KEY_COLUMNS, REQUIRED_COLUMNS, RESULT_COLUMNS, SAMPLE_COLUMNS

if TYPE_CHECKING:
    import pandas as pd

    from commbench.benches.cluster_kind import RankSide, TableSide
    from commbench.machine import Machine


@dataclass(frozen=True, kw_only=True)
class ReplayOptions(TargetOptions):
    traces: tuple[str, ...] = option("--trace", many=True, positional=True,
                                     help="Kineto traces of one job, one per rank (files or folders of them).")
    step: int | None = option("--step", type=int, lowest=0,
                              help="The ProfilerStep to replay [default: the first step every trace has, else the "
                                   "whole trace].")
    iters: int = option("--iters", type=int, lowest=6, default=10, show_default=True,
                        help="Timed replays of the step (each call timed in every one).")
    warmup: int = option("--warmup", type=int, lowest=0, default=2, show_default=True,
                         help="Untimed replays first.")
    with_compute_gaps: bool = option("--with-compute-gaps", switch=True, default=False,
                                     help="In the sequence timing, wait the traced gap before each call (a sleep, "
                                          "or a busy wait under 2 ms): the step's pace, not back to back.")
    scale_world: int | None = option("--scale-world", type=int, lowest=1,
                                     help="Replay traces of another world size on this job's N ranks: every group "
                                          "becomes all N ranks, each rank keeping its traced part of the message.")
    timeout: float = option("--timeout", type=float, above_zero=True, unit="seconds", default=300.0,
                            show_default=True, help="Seconds without progress before the run is ended as failed.")


@dataclass(frozen=True, kw_only=True)
class ReplaySpec(Spec):
    traces: tuple[str, ...]
    calls: tuple[dict[str, Any], ...]
    """Each call as replay/plan.py describes it (JSON in spec.json)."""
    skipped: tuple[str, ...]
    trace_world: int
    step: int | None
    traced_span_us: float
    iters: int
    warmup: int
    with_gaps: bool
    scaled_from: int | None
    records_traces: bool = False


@dataclass(frozen=True)
class ReplayPoint:
    index: int
    calls: int

    def label(self) -> str:
        return f"replay of {self.calls} calls"


class ReplayKind(ClusterKind[ReplaySpec, ReplayPoint, ReplayOptions, None]):
    """Replay the collectives of a traced training step on this job: the same kinds, sizes, dtypes and order,
    from the Kineto traces torch.profiler writes (commbench ddp/fsdp/zero write them under traces/), one per rank.

    Each call runs with commbench's own collective, timed alone (a barrier before it; the slowest rank's time) and
    in the whole sequence, and is checked once (n_wrong). Rows per call group (kind, size, dtype, count) put the
    traced time and busbw next to the replayed ones. Launches torchrun like a sweep, or runs in place inside
    torchrun/srun. Exit codes: 0 all calls correct, 1 wrong results, 2 bad input, 3 the run failed.
    """

    name = command = "replay"
    title = "step replay (commbench replay)"
    spec_class = ReplaySpec
    options = ReplayOptions
    result_columns, required_columns = RESULT_COLUMNS, REQUIRED_COLUMNS
    sample_columns = SAMPLE_COLUMNS
    sample_keys = KEY_COLUMNS
    identity = KEY_COLUMNS
    comparability = (common.SCHEMA_VERSION, common.BACKEND, common.DEVICE, common.WORLD_SIZE)
    metrics = (Metric("time", common.TIME_US_P50, False, common.TIME_US),)
    plots = (Plot("replay_traced_vs_replayed", "replay: traced vs replayed time per call group"),)

    def sides(self) -> tuple[RankSide[ReplaySpec, ReplayPoint, None], TableSide]:
        from commbench.replay import rank, table

        return rank, table

    def resolve(self, options: ReplayOptions, machine: Machine) -> Bench[ReplaySpec, ReplayPoint, ReplayOptions, None]:
        from commbench.expect.rows import for_sweep
        from commbench.profiling.trace_file import trace_paths
        from commbench.replay.plan import load_calls, plan

        target = resolve_target(machine, backend=options.backend, device=options.device, nproc=options.nproc,
                                oversubscribe=options.oversubscribe, bind_cores=options.bind_cores)
        if not options.traces:  # after the target: a bad --nproc is named first, as for every kind
            raise CommbenchError("replay needs the traces of one job: commbench replay TRACE... (one per rank, or "
                                 "a folder of them)")
        paths = trace_paths(tuple(Path(path) for path in options.traces))
        calls, trace_world = load_calls(paths)
        planned = plan(calls, step=options.step, world=target.nproc, scale_world=options.scale_world,
                       trace_world=trace_world)
        if not planned.calls:
            raise CommbenchError(f"no call of the traced step can be replayed ({'; '.join(planned.skipped)})")
        beyond_gloo = sorted({call["kind"] for call in planned.calls} - set(GLOO_CUDA_COLLECTIVES))
        if (target.backend, target.device) == (GLOO, CUDA) and beyond_gloo:
            raise CommbenchError(f"the traced step calls {', '.join(beyond_gloo)}, which gloo cannot run on CUDA "
                                 f"tensors (only {' and '.join(GLOO_CUDA_COLLECTIVES)}); use --backend nccl, or "
                                 "--device cpu")
        spec = ReplaySpec(backend=target.backend, device=target.device, nproc=target.nproc,
                          traces=tuple(map(str, paths)), calls=planned.calls, skipped=planned.skipped,
                          trace_world=planned.trace_world, step=planned.step, traced_span_us=planned.traced_span_us,
                          iters=options.iters, warmup=options.warmup, with_gaps=options.with_compute_gaps,
                          scaled_from=planned.trace_world if options.scale_world is not None else None,
                          timeout_s=options.timeout)
        kinds = dict.fromkeys(call["kind"] for call in planned.calls)
        spec = for_sweep(machine, device=target.device, collectives=kinds, nproc=target.nproc).onto(spec)
        notes = (f"not replayed: {'; '.join(planned.skipped)}",) if planned.skipped else ()
        return Bench(self, spec, self.points(spec, target.nproc), notes=notes, cores=target.cores)

    def points(self, spec: ReplaySpec, world: int) -> list[ReplayPoint]:
        return [ReplayPoint(0, len(spec.calls))]

    def row_label(self, row: pd.Series) -> str:
        from commbench.units import format_bytes

        return f"replay {row['kind']} {format_bytes(int(row['size_bytes']))} {row['dtype']}"


KIND = ReplayKind()
