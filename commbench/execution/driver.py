"""The rank driver, the same for every bench kind: on every rank, run a bench's points in the process group and,
on rank 0, record the run in meta.json and append each point's samples and then its row.

Order per bench: meta.json learns the job (hosts, devices, versions) and the kind's own facts; the GPU sampler opens;
each point is measured by the kind (every rank), then rank 0 writes its samples (a row in results.csv promises its
samples are on disk) and its row, flushed; meta.json says complete when the last point is stored, or failed with the
first line of the error.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from commbench import faults, runinfo, store
from commbench.bench_kind import BenchKind, Measured, Point, PointT, RankRun, Spec, SpecT, StateT
from commbench.profiling.capture import TRACES_DIR

if TYPE_CHECKING:
    from commbench.bench_kind import RankContext
    from commbench.machine import Machine


def run_bench(kind: BenchKind[SpecT, PointT, Any, StateT], spec: SpecT, ctx: RankContext, *, run_dir: Path | None,
              only: frozenset[int] | None = None, on_point: Callable[[Point], None] | None = None) -> None:
    """Rank 0 is handed the run folder (others get None and learn it from rank 0, for their traces). only: measure
    just those points (a launch per point, or per environment combination); meta.json says complete after the
    launch that measures the last one."""
    writes = ctx.rank == 0
    points = kind.points(spec, ctx.world)  # resolved and checked before launch: the same on every rank
    with _recorded_end(run_dir, writes=writes, last=only is None or len(points) - 1 in only):
        run_dir = Path(ctx.broadcast_object(str(run_dir) if writes else None))  # rank 0's: never None
        fault = faults.from_env()
        sampler, sampling = ctx.platform.gpu_sampler(spec.gpu_sample_interval_s)
        try:
            trace_dir = run_dir / TRACES_DIR if spec.records_traces else None
            # the job's facts once per run: by the launch that finds none recorded (an earlier launch of the run
            # may have been refused before it recorded them); rank 0 decides for all, since gathering is collective
            first = only is None or bool(ctx.broadcast_object(
                "world_size" not in store.read_meta(run_dir) if writes else None))
            facts = ctx.gather_objects(runinfo.rank_facts(ctx.platform)) if first else []
            run: RankRun[StateT] = RankRun(ctx, run_id=store.run_id_of(run_dir) if writes else "", sampler=sampler,
                          trace_dir=trace_dir, fault=fault, state=kind.prepare(spec, ctx), run_dir=run_dir)
            if writes:
                if first:
                    store.update_meta(run_dir, gpu_sampling=sampling, traces_dir=str(trace_dir) if trace_dir else None,
                                      **kind.run_meta(spec),
                                      **runinfo.job_meta(backend=ctx.backend, world=ctx.world, device=ctx.device,
                                                         facts=facts))
                writers = _Writers(run_dir, kind, gpu_samples=sampler is not None)
            for point in points:
                if only is not None and point.index not in only:
                    continue
                faults.before_point(fault, rank=ctx.rank, point=point.index)
                measured = kind.measure(spec, point, run)
                if writes:
                    writers.write(measured)
                    if on_point:
                        on_point(point)
                # no rank starts the next point before this one is on disk: a rank that then dies loses nothing
                # already measured (without the wait, torchrun could stop rank 0 between measuring and writing)
                ctx.barrier()
        finally:
            if sampler:
                sampler.close()


class _Writers:
    def __init__(self, run_dir: Path, kind: BenchKind, *, gpu_samples: bool) -> None:
        self._kind = kind
        self._results = store.RowWriter(run_dir / store.RESULTS_FILE, kind.result_columns)
        self._samples = store.RowWriter(run_dir / store.SAMPLES_FILE, kind.sample_columns)
        self._gpu_samples = store.RowWriter(run_dir / store.GPU_SAMPLES_FILE, kind.gpu_sample_columns) \
            if gpu_samples and kind.gpu_sample_columns else None
        self._run_dir = run_dir
        self._iterations: store.RowWriter | None = None  # opened by the first point that has iteration times

    def write(self, measured: Measured) -> None:
        rows = [row for row in (measured.row, *measured.rows) if row is not None]
        if not rows:  # a point that had nothing to measure here (a hunt without suspects to measure again)
            return
        row = rows[0]
        stamp = {"schema_version": store.SCHEMA_VERSION, "run_id": row["run_id"],
                 **{column: row[column] for column in self._kind.sample_keys}}
        # samples first: a row in results.csv promises its samples are on disk (a sample's own keys win the stamp's)
        self._samples.write([{**stamp, **sample} for sample in measured.samples])
        if self._gpu_samples:
            self._gpu_samples.write([{**stamp, **sample} for sample in measured.gpu_samples])
        if measured.iterations and self._kind.iteration_columns:
            if self._iterations is None:
                self._iterations = store.RowWriter(self._run_dir / store.ITERATIONS_FILE, self._kind.iteration_columns)
            self._iterations.write([{**stamp, **iteration} for iteration in measured.iterations])
        self._results.write(rows)


@contextlib.contextmanager
def _recorded_end(run_dir: Path | None, *, writes: bool, last: bool) -> Iterator[None]:
    """meta.json says failed with the first line of the error when the body raises, and complete when it returns
    and was the last part of the run (one launch per point runs the body once per point)."""
    meta_dir = run_dir if writes else None  # rank 0 writes, and only rank 0 is handed the folder
    try:
        yield
    except BaseException as error:
        if meta_dir is not None:
            message = str(error).strip().splitlines()
            reason = f"rank 0: {type(error).__name__}: {message[0] if message else ''}"
            store.update_meta(meta_dir, status=store.STATUS_FAILED, reason=reason, end_time=runinfo.utc_now())
        raise
    if meta_dir is not None and last:
        store.update_meta(meta_dir, status=store.STATUS_COMPLETE, end_time=runinfo.utc_now())


@contextlib.contextmanager
def joined(machine: Machine, specs: Sequence[Spec], *, timeout_s: float) -> Iterator[tuple[RankContext, _Group]]:
    """This process's one process group for the benches of a launch (they share backend and device, which a suite
    sets once): destroying and re-creating a group in one job is avoidable churn. Yields the RankContext and a flag
    holder; a bench that failed sets `.clean = False` (a peer may be gone, so the end must not wait for it)."""
    from commbench.execution.distributed import init_group, shutdown

    ctx = init_group(machine, backend=specs[0].backend, device_type=specs[0].device, timeout_s=timeout_s)
    group = _Group()
    try:
        yield ctx, group
    except BaseException:
        group.clean = False
        raise
    finally:
        shutdown(clean=group.clean)


class _Group:
    clean = True
