"""Benchmark (not a test): does commbench's timing harness cost bandwidth?

Measures all_reduce busbw at 1, 16 and 64 MiB (gloo, 2 ranks, float32) two ways in the same torchrun launch,
interleaved round by round (the order flips every round):
  commbench  the sweep's own measure_point in per-iteration timing (barrier before each iteration, median of
             per-iteration slowest-rank times: the mode with the most harness around each call)
  bare       a minimal loop: one barrier, N back-to-back dist.all_reduce calls, total time / N (slowest rank)
and prints per size the median busbw over rounds and the ratio commbench / bare (goal: ≥ 0.98). commbench reports
busbw from the median iteration; the bare loop can only give a mean, so the mean-based ratio is printed too.

With --min-ratio R it is a check (CI runs it at 16 and 64 MiB with R = 0.9): it exits 1 when, at any size, the median
over rounds of each round's commbench-mean / bare ratio is below R. That ratio compares like with like (both means)
within one round, so a machine's speed, and its drift from round to round, cancels: what is left is what commbench's
own code costs, on any machine.

    python benchmarks/harness_overhead.py [--rounds 7] [--iters 20] [--sizes 1,16,64] [--min-ratio R]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from commbench.execution.launch import relaunch_script_under_torchrun

if TYPE_CHECKING:  # torch comes with the ranks: imported there, after the relaunch
    from commbench.execution.distributed import RankContext
    from commbench.sweep.spec import Point, SweepSpec

SIZES_MIB = (1, 16, 64)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--sizes", type=lambda text: tuple(int(size) for size in text.split(",")),
                        default=SIZES_MIB, help="sizes in MiB, comma-separated (default 1,16,64)")
    parser.add_argument("--min-ratio", type=float, default=None,
                        help="exit 1 when a size's median per-round mean ratio is below this")
    args = parser.parse_args()
    relaunch_script_under_torchrun(2)  # returns only in the ranks
    run_ranks(args)


Busbw = dict[tuple[int, str], list[float]]
"""(size in MiB, way) → the busbw of each round: commbench's (from the median), commbench_mean, bare."""


def run_ranks(args: argparse.Namespace) -> None:
    from commbench.execution.distributed import init_group, shutdown
    from commbench.machine import Machine
    from commbench.sweep.spec import SweepSpec

    ctx = init_group(Machine.here(), backend="gloo", device_type="cpu", timeout_s=600)
    spec = SweepSpec(collectives=("all_reduce",), sizes=tuple(m * 1024**2 for m in args.sizes), dtypes=("float32",),
                     ops=("sum",), placement="in", backend="gloo", device="cpu", nproc=ctx.world,
                     warmup=args.warmup, iters=args.iters)
    busbw = _interleaved_rounds(args, ctx, spec)
    below = _print_ratios(args, ctx.world, busbw) if ctx.rank == 0 else []
    failed = ctx.broadcast_object(bool(below))
    shutdown()
    if failed:
        sys.exit(1)


def _commbench_way(ctx: RankContext, spec: SweepSpec, busbw: Busbw) -> Callable[[Point], float]:
    """The sweep's own measure_point: rank 0's busbw from the median time (and, kept aside, from the mean)."""
    from commbench.bench_kind import RankRun
    from commbench.measure.stats import as_number
    from commbench.sweep.collective_point import measure_point

    def way(point: Point) -> float:
        row = ctx.broadcast_object(measure_point(spec, point, RankRun(ctx, run_id="overhead", state=None)).row)
        assert row is not None  # rank 0's, on every rank
        figure, p50, mean = (as_number(row[column]) for column in ("busbw_gbps", "time_us_p50", "time_us_mean"))
        busbw[(point.layout.size_bytes // 1024**2, "commbench_mean")].append(figure * p50 / mean)
        return figure

    return way


def _bare_way(ctx: RankContext, args: argparse.Namespace) -> Callable[[Point], float]:
    """One barrier, N back-to-back dist.all_reduce calls, total time / N (slowest rank)."""
    import torch
    import torch.distributed as dist

    factor = 2 * (ctx.world - 1) / ctx.world

    def way(point: Point) -> float:
        tensor = torch.ones(point.layout.count, dtype=torch.float32)
        for _ in range(args.warmup):
            dist.all_reduce(tensor)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(tensor)
        seconds = ctx.max_over_ranks([(time.perf_counter() - start) / args.iters])[0]
        return point.layout.size_bytes / seconds / 1e9 * factor

    return way


def _interleaved_rounds(args: argparse.Namespace, ctx: RankContext, spec: SweepSpec) -> Busbw:
    """Both ways at every size, round by round, the order flipped every round."""
    from commbench.sweep.spec import plan

    busbw: Busbw = {(size, way): [] for size in args.sizes for way in ("commbench", "commbench_mean", "bare")}
    ways = [("commbench", _commbench_way(ctx, spec, busbw)), ("bare", _bare_way(ctx, args))]
    for round_index in range(args.rounds):
        ordered = ways[::-1] if round_index % 2 else ways
        for point in plan(spec, ctx.world):
            for name, way in ordered:
                busbw[(point.layout.size_bytes // 1024**2, name)].append(way(point))
    return busbw


def _print_ratios(args: argparse.Namespace, world: int, busbw: Busbw) -> list[str]:
    """The table of medians and ratios per size; the sizes below --min-ratio."""
    below = []
    print(f"all_reduce, gloo, {world} ranks, float32, {args.rounds} interleaved rounds x {args.iters} iters")
    print(f"{'size (MiB)':>10} {'commbench p50 busbw':>20} {'commbench mean busbw':>21} {'bare busbw':>11} "
          f"{'ratio p50/bare':>15} {'ratio mean/bare':>16} {'per-round mean/bare':>20} "
          f"{'median per-round':>17}   (GB/s = 1e9 B/s)")
    for size in args.sizes:
        ours, mean, bare = (busbw[(size, way)] for way in ("commbench", "commbench_mean", "bare"))
        ratios = [a / b for a, b in zip(mean, bare)]
        print(f"{size:>10} {statistics.median(ours):>20.3f} {statistics.median(mean):>21.3f} "
              f"{statistics.median(bare):>11.3f} {statistics.median(ours) / statistics.median(bare):>15.3f} "
              f"{statistics.median(mean) / statistics.median(bare):>16.3f} "
              f"{min(ratios):>9.3f} – {max(ratios):<8.3f} {statistics.median(ratios):>17.3f}")
        if args.min_ratio is not None and statistics.median(ratios) < args.min_ratio:
            below.append(f"{size} MiB: {statistics.median(ratios):.3f}")
    if args.min_ratio is not None:
        print(f"harness check: {'FAILED: ' + ', '.join(below) if below else 'passed'} (median per-round "
              f"commbench-mean / bare busbw >= {args.min_ratio:g} at every size)")
    return below


if __name__ == "__main__":
    main()
