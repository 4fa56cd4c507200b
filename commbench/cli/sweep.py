"""`commbench sweep`: measure collectives over message sizes, verify every point, store and print the results."""

import click

from commbench import launch
from commbench.backends import resolve_target
from commbench.cli.options import split_commas, target_options
from commbench.cli.run_job import BenchJob, bench_command
from commbench.session import Job
from commbench.units import parse_size_spec
from commbench.spec import SweepSpec, placement_notes, plan, size_notes, validate
from commbench.table import format_tables
from commbench.worker import run_sweep

DEFAULT_COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather")


def default_impls(target) -> tuple[str, ...]:
    """Both implementations side by side, except where the ring cannot run (gloo cannot send CUDA tensors)."""
    return ("builtin",) if (target.backend, target.device) == ("gloo", "cuda") else ("builtin", "ring")


@click.command()
@click.option("-c", "--collective", "collectives", multiple=True, callback=split_commas,
              help="all_reduce, reduce_scatter, all_gather, broadcast, all_to_all; repeat or comma-separate "
                   "[default: all_reduce, reduce_scatter, all_gather].")
@click.option("--sizes", default="1K:16M:x2", show_default=True,
              help="Message sizes: min:max:xF, min:max:+STEP or a comma list; K/M/G = 1024-based.")
@click.option("--dtype", "dtypes", multiple=True, callback=split_commas,
              help="float32, float64, bfloat16, float16, int32; repeatable [default: float32].")
@click.option("--op", "ops", multiple=True, callback=split_commas,
              help="Reduction for reducing collectives: sum, max, min, avg; repeatable [default: sum].")
@click.option("--impl", "impls", multiple=True, callback=split_commas,
              help="builtin (the backend's own) and/or ring (hand-written over send/recv; all_reduce, reduce_scatter, "
                   "all_gather) [default: both, where the backend can run them].")
@click.option("--ring-chunks", type=int, default=None,
              help="Pieces in flight per ring step [default: pieces of at least 4 MiB, at most 4].")
@target_options
@click.option("--warmup", type=int, default=5, show_default=True, help="Untimed iterations before timing.")
@click.option("--iters", type=int, default=20, show_default=True,
              help="Timed iterations per point (per batch in adaptive mode); at least 6.")
@click.option("--target-ci", type=float, default=None,
              help="Adaptive: sample until the 95% CI of the median is within ±P percent.")
@click.option("--max-time", type=float, default=None, help="Adaptive: time budget per point in seconds.")
@click.option("--placement", type=click.Choice(["out", "in", "both"]), default="out", show_default=True,
              help="Out-of-place and/or in-place buffers.")
@click.option("--check/--no-check", default=True, show_default=True, help="Verify every point (n_wrong).")
@click.option("--timeout", type=float, default=300.0, show_default=True,
              help="Seconds without a finished point before the sweep is ended as failed.")
@click.option("--profile", is_flag=True,
              help="Record torch.profiler traces (per rank and point) under results/<run>/traces/.")
@click.option("--profile-iters", type=int, default=3, show_default=True,
              help="Iterations per point in each trace (recorded after timing, untimed).")
@click.option("--gpu-sample-interval", type=float, default=0.05, show_default=True,
              help="Seconds between NVML samples of each GPU while a point is timed.")
@bench_command(bare_suite="default")
def sweep(collectives, sizes, dtypes, ops, impls, ring_chunks, backend, device, nproc, warmup, iters, target_ci,
          max_time, placement, check, timeout, profile, profile_iters, gpu_sample_interval) -> BenchJob:
    """Measure collectives at each message size with statistics and a correctness check on every point.

    With no option but --out, --run-id and --quiet, runs the suite suites/default.toml (`commbench run default`).

    Launches torchrun once for the whole sweep; inside torchrun or srun (RANK and WORLD_SIZE set) it runs in place.
    Exit codes: 0 all points correct, 1 some point had wrong results, 2 bad input, 3 the run failed.
    """
    world_in_job = launch.world_size_in_job()
    target = resolve_target(backend=backend, device=device, nproc=nproc, world_size_in_job=world_in_job)
    spec = SweepSpec(
        collectives=collectives or DEFAULT_COLLECTIVES, impls=impls or default_impls(target),
        ring_chunks=ring_chunks, sizes=parse_size_spec(sizes),
        dtypes=dtypes or ("float32",), ops=ops or ("sum",), placement=placement, backend=target.backend,
        device=target.device, nproc=target.nproc, warmup=warmup, iters=iters, target_ci_pct=target_ci,
        max_time_s=max_time, check=check, timeout_s=timeout, profile_iters=profile_iters if profile else 0,
        gpu_sample_interval_s=gpu_sample_interval)
    validate(spec)
    job = Job(spec=spec, points=plan(spec, spec.nproc), worker_module="commbench.worker", run_ranks=run_sweep)
    return BenchJob(job, render=format_tables, wrong_message="{n} wrong element(s) in the check (see #wrong)",
                    notes=placement_notes(spec) + size_notes(spec, spec.nproc))
