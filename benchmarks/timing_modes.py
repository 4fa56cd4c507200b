"""Benchmark (not a test): the two timing modes against a bare back-to-back loop, in one torchrun launch.

For all_reduce (gloo, 2 ranks, float32, in place) at each size, round by round (the order rotates every round):
  per-iteration  commbench's --timing per-iteration: barrier before each call, median of slowest-rank call times
  batch          commbench's --timing batch: one barrier, K back-to-back calls (K from --batch-calls, default auto),
                 median over batches of time per call, mean over ranks (nccl-tests' convention)
  bare           no commbench code: one barrier, --iters back-to-back dist.all_reduce calls, total / iters, mean over
                 ranks
and prints per size the median time per call (µs) of each way and the ratios batch / per-iteration and batch / bare.
Both commbench ways run the check too, so every figure printed is of a verified collective (n_wrong printed).

--skew-ms D repeats the table with rank 1 leaving every timing barrier D ms late (the test-only skew fault made by
hand here): the per-iteration median takes the skew whole, a batch of K calls D/K. That table uses --skew-batch-calls
(50): auto would size the batch from warm-up calls that hold the skew too, and give K = 1.

    python benchmarks/timing_modes.py [--sizes 4K,1M,16M] [--rounds 5] [--iters 20] [--batch-calls N] [--skew-ms 20]
"""

import argparse
import statistics
import time

from commbench.execution.launch import relaunch_script_under_torchrun

WAYS = ("per-iteration", "batch", "bare")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="4K,1M,16M")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--batch-calls", type=int, default=None, help="default: auto (a batch lasts ~5 ms)")
    parser.add_argument("--skew-ms", type=float, default=0.0)
    parser.add_argument("--skew-batch-calls", type=int, default=50)
    args = parser.parse_args()
    relaunch_script_under_torchrun(2)  # returns only in the ranks
    run_ranks(args)


def run_ranks(args) -> None:
    from commbench.execution.distributed import init_group, shutdown
    from commbench.faults import Fault
    from commbench.machine import Machine
    from commbench.units import parse_size_spec

    ctx = init_group(Machine.here(), backend="gloo", device_type="cpu", timeout_s=600)
    sizes = parse_size_spec(args.sizes)
    skews = [None] + ([Fault("skew", 1, -1)] if args.skew_ms > 0 else [])
    for fault in skews:
        times, wrong = _measure_all(ctx, args, sizes, fault)
        if ctx.rank == 0:
            _print_table(ctx, args, sizes, times, wrong, fault)
    shutdown()


def _measure_all(ctx, args, sizes, fault) -> tuple[dict, dict]:
    import torch
    import torch.distributed as dist

    from commbench import faults
    from commbench.bench_kind import RankRun
    from commbench.names import BATCH, PER_ITERATION
    from commbench.sweep.collective_point import measure_point
    from commbench.sweep.spec import SweepSpec, plan

    if fault is not None:
        faults.SKEW_S = args.skew_ms / 1e3
    spec = SweepSpec(collectives=("all_reduce",), sizes=tuple(sizes), dtypes=("float32",), ops=("sum",),
                     placement="in", backend="gloo", device="cpu", nproc=ctx.world, warmup=args.warmup,
                     iters=args.iters, timings=(PER_ITERATION, BATCH), batch_calls=_batch_calls(args, fault))
    points = {(point.layout.size_bytes, point.timing): point for point in plan(spec, ctx.world)}
    times = {(size, way): [] for size in sizes for way in WAYS}
    wrong = {(size, way): 0 for size in sizes for way in WAYS}

    def commbench_way(size: int, way: str) -> float:
        row = ctx.broadcast_object(
            measure_point(spec, points[(size, way)], RankRun(ctx, run_id="timing-modes", fault=fault, state=None)).row)
        wrong[(size, way)] += int(row["n_wrong"])
        return row["time_us_p50"]

    def bare_way(size: int, _way: str) -> float:
        tensor = torch.zeros(size // 4, dtype=torch.float32)  # zeros: the values never overflow back to back
        for _ in range(args.warmup):
            dist.all_reduce(tensor)
        late = faults.skewed(fault, dist.barrier, rank=ctx.rank, point=0)
        late()
        start = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(tensor)
        return ctx.mean_over_ranks([(time.perf_counter() - start) / args.iters])[0] * 1e6

    ways = [("per-iteration", commbench_way), ("batch", commbench_way), ("bare", bare_way)]
    for round_index in range(args.rounds):
        rotated = ways[round_index % 3:] + ways[:round_index % 3]
        for size in sizes:
            for way, function in rotated:
                times[(size, way)].append(function(size, way))
    return times, wrong


def _batch_calls(args, fault) -> int | None:
    return args.skew_batch_calls if fault is not None else args.batch_calls


def _print_table(ctx, args, sizes, times, wrong, fault) -> None:
    from commbench.units import format_bytes

    skew = f", rank 1 leaves each timing barrier {args.skew_ms:g} ms late" if fault else ""
    calls = _batch_calls(args, fault) or "auto"
    print(f"\nall_reduce in place, gloo, {ctx.world} ranks, float32, {args.rounds} rotated rounds, "
          f"{args.iters} samples per way, batch calls {calls}{skew}")
    print(f"{'size':>8} {'per-iteration p50 (us)':>23} {'batch p50 (us)':>15} {'bare mean (us)':>15} "
          f"{'batch/per-iter':>15} {'batch/bare':>11} {'n_wrong':>8}")
    for size in sizes:
        medians = {way: statistics.median(times[(size, way)]) for way in WAYS}
        print(f"{format_bytes(size):>8} {medians['per-iteration']:>23.1f} {medians['batch']:>15.1f} "
              f"{medians['bare']:>15.1f} {medians['batch'] / medians['per-iteration']:>15.3f} "
              f"{medians['batch'] / medians['bare']:>11.3f} "
              f"{wrong[(size, 'per-iteration')] + wrong[(size, 'batch')]:>8}")


if __name__ == "__main__":
    main()
