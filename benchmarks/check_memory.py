"""Benchmark (not a test): how much memory does one checked collective point take, as a multiple of its buffer?

For each collective × implementation × placement × dtype it starts a fresh gloo group of --world ranks on CPU tensors
(plain subprocesses, one per rank, OMP_NUM_THREADS=1 as torchrun sets it), and every rank
  1. runs a 64 KiB point of the same case, so the one-time costs of the code path (gloo's pairs, lazy imports,
     thread pools) count as idle, then frees what it left (gc, malloc_trim);
  2. resets its peak resident set size (writing 5 to /proc/self/clear_refs sets VmHWM to the current VmRSS) and
     takes that as the idle baseline;
  3. runs the point exactly as a sweep does, through commbench.sweep.collective_point.measure_point with the check on:
     make buffers, fill the inputs, warm-up and timed runs, fresh inputs, the check run, the comparison;
  4. reads VmHWM.
The multiple printed is (VmHWM − baseline) / size_bytes, the largest over ranks; size_bytes is nccl-tests' size
column (the larger of the input and output buffer). It counts everything the point touched: buffers, gloo's own
scratch, the ring's spare buffers, the check's data. nccl-tests holds send + recv + expected (3× for an out-of-place
all_to_all), so the goal is ≤ 3.5×. On CPU, memory counts once written (RSS); on a GPU an allocation counts whole.
Linux only (VmHWM, clear_refs).

    python benchmarks/check_memory.py [--size-mib 256] [--world 2] [--dtype float32 --dtype bfloat16]
                                      [--collective all_reduce ...] [--impl builtin|ring] [--op sum] [--json]
"""

import argparse
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

DTYPES = ("float32", "bfloat16")
WARM_UP_BYTES = 64 * 1024
_RESULT = "RESULT "  # prefix of the line a rank prints its measurement on


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--dtype", action="append", help=f"repeatable; default {', '.join(DTYPES)}")
    parser.add_argument("--collective", action="append", help="repeatable; default every collective")
    parser.add_argument("--impl", action="append", help="repeatable; default every implementation")
    parser.add_argument("--placement", choices=("in", "out"), action="append", help="default every placement")
    parser.add_argument("--op", default="sum")
    parser.add_argument("--json", action="store_true", help="one JSON object per case instead of the table")
    parser.add_argument("--rank-case", help=argparse.SUPPRESS)  # set by this script in the rank processes
    args = parser.parse_args()
    if args.rank_case:
        print(_RESULT + json.dumps(measure_on_this_rank(**json.loads(args.rank_case))), flush=True)
        return

    if not args.json:
        print(f"peak RSS above an idle rank / size_bytes, checked point, gloo on CPU, {args.world} ranks, "
              f"{args.size_mib} MiB, op {args.op} (largest over ranks)")
        print(f"{'collective':>15} {'impl':>8} {'placement':>9} {'dtype':>9} {'multiple':>9} {'n_wrong':>8}")
    for case in cases(args):
        result = run_case(case, world=args.world)
        if args.json:
            print(json.dumps(result), flush=True)
        else:
            placement = "in" if case["inplace"] else "out"
            print(f"{case['collective']:>15} {case['impl']:>8} {placement:>9} {case['dtype']:>9} "
                  f"{result['multiple']:>9.2f} {result['n_wrong']:>8}", flush=True)


def cases(args) -> list[dict]:
    from commbench.collectives import COLLECTIVES

    wanted_placements = {"in": True, "out": False}
    found = []
    for name in args.collective or sorted(COLLECTIVES):
        collective = COLLECTIVES[name]
        for impl in collective.implementations:
            if args.impl and impl not in args.impl:
                continue
            for inplace in collective.inplace_choices:
                if args.placement and inplace not in {wanted_placements[p] for p in args.placement}:
                    continue
                for dtype in args.dtype or DTYPES:
                    found.append({"collective": name, "impl": impl, "inplace": inplace, "dtype": dtype,
                                  "op": args.op, "size_bytes": args.size_mib * 1024**2})
    return found


def run_case(case: dict, *, world: int) -> dict:
    """Start `world` fresh rank processes for one case; the case with its multiple (largest over ranks) and n_wrong."""
    port = _free_port()
    ranks = []
    for rank in range(world):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
               "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
               "OMP_NUM_THREADS": "1"}
        ranks.append(subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--rank-case", json.dumps(case)],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = []
    for process in ranks:
        stdout, stderr = process.communicate(timeout=600)
        lines = [line for line in stdout.splitlines() if line.startswith(_RESULT)]
        if process.returncode or not lines:
            raise RuntimeError(f"rank failed ({process.returncode}) on {case}:\n{stderr[-3000:]}")
        results.append(json.loads(lines[-1][len(_RESULT):]))
    n_wrong = next(result["n_wrong"] for result in results if result["rank"] == 0)
    return {**case, "world": world, "multiple": max(result["multiple"] for result in results), "n_wrong": n_wrong,
            "per_rank": [result["multiple"] for result in results]}


def measure_on_this_rank(*, collective: str, impl: str, inplace: bool, dtype: str, op: str, size_bytes: int) -> dict:
    from commbench.bench_kind import RankRun
    from commbench.execution.distributed import init_group, shutdown
    from commbench.machine import Machine
    from commbench.sweep.collective_point import measure_point
    from commbench.sweep.spec import SweepSpec, plan

    ctx = init_group(Machine.here(), backend="gloo", device_type="cpu", timeout_s=600)

    def point_of(size: int):
        spec = SweepSpec(collectives=(collective,), impls=(impl,), sizes=(size,), dtypes=(dtype,), ops=(op,),
                         placement="in" if inplace else "out", backend="gloo", device="cpu", nproc=ctx.world,
                         warmup=1, iters=6, check=True)
        [point] = plan(spec, ctx.world)
        return spec, point

    spec, point = point_of(WARM_UP_BYTES)
    measure_point(spec, point, RankRun(ctx, run_id="check-memory", state=None))
    ctx.platform.release()
    ctx.barrier()
    spec, point = point_of(size_bytes)
    ctx.platform.reset_peak()
    idle = ctx.platform.peak()["peak_mem_bytes"]
    row = measure_point(spec, point, RankRun(ctx, run_id="check-memory", state=None)).row
    peak = ctx.platform.peak()["peak_mem_bytes"]
    shutdown()
    return {"rank": ctx.rank, "multiple": (peak - idle) / point.layout.size_bytes,
            "n_wrong": row["n_wrong"] if row else None}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


if __name__ == "__main__":
    main()
