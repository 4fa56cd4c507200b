"""Rank entry point of a training sweep: join the job, measure each configuration, and (rank 0) store the rows."""

import argparse
import os
import sys
from pathlib import Path
from typing import Callable

from commbench import faults, runinfo, store
from commbench.distributed import init_rank, shutdown
from commbench.profiling.capture import TRACES_DIR
from commbench.rank_run import gpu_sampler, recorded_end, shared_run_dir
from commbench.training import peak_memory
from commbench.training.measure import measure_config
from commbench.training.spec import ConfigPoint, TrainSpec
from commbench.worker import WATCHED_TIMEOUT_GRACE_S

GPU_SAMPLE_INTERVAL_S = 0.05


def run_training(spec: TrainSpec, *, run_dir: Path | None, run_id: str, collective_timeout_s: float,
                 on_point: Callable[[ConfigPoint, dict], None] | None = None, only: int | None = None) -> None:
    """Run on every rank; `only` measures one configuration (one process per configuration, --isolation process)."""
    ctx = init_rank(backend=spec.backend, device_type=spec.device, timeout_s=collective_timeout_s)
    writes = ctx.rank == 0
    fault = faults.from_env()
    sampler, clean = None, False
    try:
        with recorded_end(run_dir, writes=writes, last=only in (None, len(spec.configs) - 1)):
            sampler, sampling = gpu_sampler(ctx, GPU_SAMPLE_INTERVAL_S)
            trace_dir = shared_run_dir(run_dir) / TRACES_DIR if spec.profile_steps else None
            local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", ctx.world))
            budget = spec.memory_budget_bytes or peak_memory.capacity(ctx.device, local_ranks)
            facts = ctx.gather_objects(runinfo.rank_facts(ctx.device)) if only in (None, 0) else None
            if writes:
                if facts:
                    store.update_meta(run_dir, gpu_sampling=sampling, isolation=spec.isolation,
                                      traces_dir=str(trace_dir) if trace_dir else None,
                                      **runinfo.job_meta(backend=spec.backend, world=ctx.world, device=ctx.device,
                                                         facts=facts))
                results = store.RowWriter(run_dir / store.RESULTS_FILE, store.TRAIN_RESULT_COLUMNS)
                samples = store.RowWriter(run_dir / store.SAMPLES_FILE, store.TRAIN_SAMPLE_COLUMNS)
            peak_memory.release(ctx.device)
            baseline = peak_memory.current(ctx.device)  # what a configuration's leftovers are measured against
            for point in spec.points:
                if only is not None and point.index != only:
                    continue
                faults.before_point(fault, rank=ctx.rank, point=point.index)
                row, step_rows = measure_config(spec, point, ctx, run_id=run_id, trace_dir=trace_dir,
                                                sampler=sampler, baseline_bytes=baseline, budget_bytes=budget,
                                                fault=fault)
                if writes:
                    stamp = {"schema_version": store.SCHEMA_VERSION, "run_id": run_id, "bench": spec.bench,
                             "config_index": point.index, "config": row["config"]}
                    samples.write([{**stamp, **step_row} for step_row in step_rows])  # before the row
                    results.write([row])
                    if on_point:
                        on_point(point, row)
        clean = True
    finally:
        if sampler:
            sampler.close()
        shutdown(clean=clean)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="commbench training rank (started by commbench ddp/fsdp/zero)")
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--only", type=int, default=None, help="measure only this configuration index")
    args = parser.parse_args(argv)
    run_in_dir(args.run_dir, only=args.only)
    faults.on_exit(faults.from_env(), rank=int(os.environ["RANK"]), point=args.only)


def run_in_dir(run_dir: Path, *, only: int | None = None) -> None:
    """As a launched rank: run the spec.json that the launcher wrote into run_dir (all or `only` one configuration)."""
    spec = TrainSpec.from_json((run_dir / store.SPEC_FILE).read_text(encoding="utf-8"))
    run_training(spec, run_dir=run_dir, run_id=store.run_id_of(run_dir), only=only,
                 collective_timeout_s=spec.timeout_s + WATCHED_TIMEOUT_GRACE_S)


if __name__ == "__main__":
    main(sys.argv[1:])
