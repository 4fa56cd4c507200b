"""Benchmark (not a test): how many pieces per ring step (--ring-chunks K) make the hand-written ring fastest?

In one torchrun launch (gloo, 2 ranks by default, float32), measures ring all_reduce and ring reduce_scatter busbw
for K = 1, 2, 4, 8 and the automatic default at 1, 4, 16 and 64 MiB, interleaved round by round, and prints the
median busbw over rounds per (size, K) relative to K = 1. This is the measurement behind ring.default_pieces.

    python benchmarks/ring_chunks.py [--rounds 3] [--nproc 2]
"""

import argparse
import dataclasses
import statistics

from commbench.execution.launch import relaunch_script_under_torchrun

SIZES_MIB = (1, 4, 16, 64)
CHUNKS = (1, 2, 4, 8, None)  # None = the automatic default


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--nproc", type=int, default=2)
    args = parser.parse_args()
    relaunch_script_under_torchrun(args.nproc)  # returns only in the ranks
    run_ranks(args)


def run_ranks(args) -> None:
    from commbench.bench_kind import RankRun
    from commbench.execution.distributed import init_group, shutdown
    from commbench.machine import Machine
    from commbench.sweep.collective_point import measure_point
    from commbench.sweep.spec import SweepSpec, plan

    ctx = init_group(Machine.here(), backend="gloo", device_type="cpu", timeout_s=600)
    base = SweepSpec(collectives=("all_reduce", "reduce_scatter"), impls=("ring",),
                     sizes=tuple(m * 1024**2 for m in SIZES_MIB), dtypes=("float32",), ops=("sum",),
                     placement="out", backend="gloo", device="cpu", nproc=ctx.world, warmup=2, iters=args.iters)
    busbw: dict = {}
    chosen: dict = {}
    for round_index in range(args.rounds):
        order = CHUNKS if round_index % 2 == 0 else tuple(reversed(CHUNKS))
        for point in plan(base, ctx.world):
            for chunks in order:
                spec = dataclasses.replace(base, ring_chunks=chunks)
                run = RankRun(ctx, run_id="ring-chunks", state=None)
                row = ctx.broadcast_object(measure_point(spec, point, run).row)
                key = (point.collective, point.layout.size_bytes, chunks)
                busbw.setdefault(key, []).append(row["busbw_gbps"])
                if chunks is None:
                    chosen[(point.collective, point.layout.size_bytes)] = row["ring_chunks"]
    if ctx.rank == 0:
        print(f"ring busbw relative to K=1 (median of {args.rounds} interleaved rounds x {args.iters} iters), "
              f"gloo, {ctx.world} ranks, float32; absolute busbw for K=1 in GB/s (1e9 B/s)")
        print(f"{'collective':>15} {'size':>7} {'K=1 GB/s':>9}" + "".join(f"{f'K={k}':>7}" for k in CHUNKS[1:-1])
              + f"{'auto':>7} {'auto K':>7}")
        for (collective, size), auto_k in chosen.items():
            reference = statistics.median(busbw[(collective, size, 1)])
            cells = "".join(f"{statistics.median(busbw[(collective, size, k)]) / reference:>7.3f}" for k in CHUNKS[1:])
            print(f"{collective:>15} {size // 1024**2:>5}Mi {reference:>9.3f}{cells} {int(auto_k):>7}")
    shutdown()


if __name__ == "__main__":
    main()
