"""Benchmark (not a test): where the hand-written ring all_reduce spends its time.

In one torchrun launch (gloo, 2 ranks by default, float32, K = 1 piece per step) and per size, the median over
iterations (barrier before each, slowest rank) of:
  ring all_reduce         the whole ring (reduce-scatter phase + all-gather phase)
  transfers only          the ring all-gather over the same buffer, twice: the sends/receives of both phases
  reductions only         the n−1 torch.add calls of the reduce-scatter phase on local tensors, no communication
  memcpy of one chunk     for scale: what a copy of the data a step moves costs locally
  Python per step         an n-element ring all_reduce (no data to speak of) divided by its 2(n−1) steps
and prints them with the share of the ring's time each explains.

    python benchmarks/ring_profile.py [--nproc 2] [--iters 15]
"""

import argparse
import statistics

from commbench.execution.launch import relaunch_script_under_torchrun

SIZES_MIB = (1, 16, 64)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--iters", type=int, default=15)
    args = parser.parse_args()
    relaunch_script_under_torchrun(args.nproc)  # returns only in the ranks
    run_ranks(args)


def run_ranks(args) -> None:
    import torch

    from commbench.collectives import ring
    from commbench.execution.distributed import init_group, shutdown
    from commbench.machine import Machine

    ctx = init_group(Machine.here(), backend="gloo", device_type="cpu", timeout_s=600)
    timer, world, rank = ctx.platform.timer(ctx.barrier), ctx.world, ctx.rank

    def median_us(run) -> float:
        run()  # warm-up
        return statistics.median(ctx.max_over_ranks(timer.time_iterations(run, args.iters))) * 1e6

    rows = []
    for size_mib in SIZES_MIB:
        count = size_mib * 1024**2 // 4
        buffer = torch.ones(count)
        chunk = count // world
        whole = median_us(ring.all_reduce(buffer, rank=rank, world=world, batched=False, op="sum", ring_chunks=1))
        gather = ring.all_gather(buffer[rank * chunk:(rank + 1) * chunk], buffer[: chunk * world], rank=rank,
                                 world=world, batched=False, ring_chunks=1)
        transfers = 2 * median_us(gather)
        a, b, out = torch.ones(chunk), torch.ones(chunk), torch.empty(chunk)

        def reductions(a=a, b=b, out=out) -> None:  # this size's tensors, bound now
            for _ in range(world - 1):
                torch.add(a, b, out=out)

        reduce_us = median_us(reductions)
        copy_us = median_us(lambda out=out, a=a: out.copy_(a))
        rows.append((size_mib, whole, transfers, reduce_us, copy_us))

    tiny_ring = ring.all_reduce(torch.ones(world), rank=rank, world=world, batched=False, op="sum", ring_chunks=1)
    tiny_ring()
    tiny_us = [seconds * 1e6 / (2 * (world - 1)) for seconds in
               ctx.max_over_ranks(timer.time_iterations(tiny_ring, args.iters))]
    if rank == 0:
        print(f"ring all_reduce profile: gloo, {world} ranks, float32, K=1, median of {args.iters} iterations (µs)")
        print(f"{'size':>6} {'ring':>10} {'transfers':>10} {'share':>6} {'reductions':>11} {'share':>6} "
              f"{'1 memcpy':>9} {'rest':>8} {'ring GB/s busbw':>16}")
        for size_mib, whole, transfers, reduce_us, copy_us in rows:
            rest = whole - transfers - reduce_us
            busbw = size_mib * 1024**2 * 2 * (world - 1) / world / (whole * 1e-6) / 1e9
            print(f"{size_mib:>4}Mi {whole:>10.0f} {transfers:>10.0f} {transfers / whole:>6.0%} {reduce_us:>11.0f} "
                  f"{reduce_us / whole:>6.0%} {copy_us:>9.0f} {rest:>8.0f} {busbw:>16.3f}")
        # the minimum: wake-up stalls of this 2-core machine (ms) swamp the median of so short an operation
        print(f"Python and gloo cost per ring step with no data ({world}-element all_reduce): "
              f"min {min(tiny_us):.0f} µs, median {statistics.median(tiny_us):.0f} µs")
    shutdown()


if __name__ == "__main__":
    main()
