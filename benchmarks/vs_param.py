"""Benchmark (not a test): commbench against PARAM's comms benchmark (facebookresearch/param,
train/comms/pt/comms.py) on the same collective, sizes and ranks, alternated --rounds times in one run.

Per round, in rotating order: `commbench sweep` with PARAM's fixed iterations, PARAM itself, and `commbench sweep
--target-ci P` (adaptive). Prints each run's wall time, the medians and their ratios to PARAM, commbench's achieved
95 % CI per point in the adaptive runs, and the busbw ratio per size, naming each tool's timing method.

PARAM is not a dependency of commbench and none of its code is in this repository: pass a checkout with --param
(e.g. `git clone https://github.com/facebookresearch/param`), or let --clone-param fetch one into a temporary folder.

    python benchmarks/vs_param.py --param ~/src/param [--rounds 3] [--begin 1K --end 64M --factor 4]
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PARAM_TIMING = ("PARAM (--z 0, non-blocking): per rank, the wall time of issuing --n calls plus one wait for them "
                "all, divided by --n (a mean per call); its p50 is across ranks")
COMMBENCH_TIMING = ("commbench per-iteration: barrier, one call, wait; the slowest rank's time per iteration, median "
                    "over iterations (95 % CI of that median from the samples)")
_RESULT_LINE = re.compile(r"COMMS-RES-(?P<collective>\S+)-(?P<dtype>\S+)\s+(?P<size>\d+)\s+\d+\s+(?P<p50>[\d.]+)"
                          r"(?:\s+[\d.]+){4}\s+(?P<algbw>[\d.]+)\s+(?P<busbw>[\d.]+)")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--param", type=Path, help="a checkout of github.com/facebookresearch/param")
    where.add_argument("--clone-param", action="store_true", help="git clone it into a temporary folder first")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--collective", default="all_reduce")
    parser.add_argument("--begin", default="1K", help="smallest size (PARAM's --b, commbench's sizes start)")
    parser.add_argument("--end", default="64M", help="largest size (PARAM's --e)")
    parser.add_argument("--factor", type=int, default=4, help="size step factor (PARAM's --f, commbench's xF)")
    parser.add_argument("--iters", type=int, default=50, help="timed iterations (PARAM's --n, commbench's --iters)")
    parser.add_argument("--warmup", type=int, default=10, help="warm-up iterations (PARAM's --w)")
    parser.add_argument("--target-ci", type=float, default=5.0, help="the adaptive runs' CI target, ± %%")
    parser.add_argument("--max-time", type=float, default=30.0, help="the adaptive runs' time budget per point, s")
    parser.add_argument("--nproc", type=int, default=2)
    return parser.parse_args()


def param_package(checkout: Path, scratch: Path) -> Path:
    """A folder that makes PARAM importable as `param_bench` (its modules import themselves so)."""
    comms = checkout / "train" / "comms" / "pt" / "comms.py"
    if not comms.is_file():
        sys.exit(f"{checkout} is not a PARAM checkout: {comms} is missing")
    (scratch / "param_bench").symlink_to(checkout.resolve())
    return comms


def run_param(args, comms: Path, package: Path) -> tuple[float, dict[int, float]]:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={args.nproc}",
               str(comms), "--backend", "gloo", "--device", "cpu", "--collective", args.collective,
               "--begin-size", args.begin, "--end-size", args.end, "--f", str(args.factor),
               "--num_iters", str(args.iters), "--w", str(args.warmup)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(package), os.environ.get("PYTHONPATH")]))}
    started = time.perf_counter()
    completed = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if completed.returncode != 0:
        sys.exit(f"PARAM failed ({completed.returncode}):\n{completed.stderr[-3000:]}")
    busbw = {int(match["size"]): float(match["busbw"])
             for match in map(_RESULT_LINE.search, completed.stdout.splitlines()) if match}
    if not busbw:
        sys.exit(f"no COMMS-RES rows in PARAM's output:\n{completed.stdout[-3000:]}")
    return wall, busbw


def run_commbench(args, out: Path, run_id: str, *adaptive: str) -> tuple[float, list[dict]]:
    command = [sys.executable, "-m", "commbench", "sweep", "-c", args.collective, "--impl", "builtin",
               "--backend", "gloo", "--device", "cpu", "--nproc", str(args.nproc),
               "--sizes", f"{args.begin}:{args.end}:x{args.factor}", "--warmup", str(args.warmup),
               "--iters", str(args.iters), *adaptive, "--out", str(out), "--run-id", run_id, "--json"]
    started = time.perf_counter()
    completed = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if completed.returncode != 0:
        sys.exit(f"commbench failed ({completed.returncode}):\n{completed.stderr[-3000:]}")
    return wall, json.loads(completed.stdout)["results"]


def _ci_pct(row: dict) -> float:
    p50, low, high = row["time_us_p50"], row["time_us_ci_lo"], row["time_us_ci_hi"]
    return max(p50 - low, high - p50) / p50 * 100 if None not in (p50, low, high) and p50 > 0 else float("nan")


def main() -> None:
    args = parse_args()
    walls: dict[str, list[float]] = {"commbench fixed": [], "PARAM fixed": [], "commbench adaptive": []}
    busbw: dict[str, dict[int, list[float]]] = {"commbench": {}, "PARAM": {}}
    adaptive_rows: list[list[dict]] = []
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        checkout = args.param
        if args.clone_param:
            checkout = scratch / "param"
            subprocess.run(["git", "clone", "--depth", "1", "https://github.com/facebookresearch/param",
                            str(checkout)], check=True)
        package = scratch / "package"
        package.mkdir()
        comms = param_package(checkout, package)
        adaptive = ("--target-ci", str(args.target_ci), "--max-time", str(args.max_time))
        for round_number in range(args.rounds):
            order = list(walls)[round_number % 3:] + list(walls)[:round_number % 3]  # each goes first in turn
            for name in order:
                if name == "PARAM fixed":
                    wall, figures = run_param(args, comms, package)
                    for size, value in figures.items():
                        busbw["PARAM"].setdefault(size, []).append(value)
                else:
                    wall, rows = run_commbench(args, scratch / "runs", f"{name.split()[1]}{round_number}",
                                               *(adaptive if name.endswith("adaptive") else ()))
                    if name.endswith("adaptive"):
                        adaptive_rows.append(rows)
                    else:
                        for row in rows:
                            busbw["commbench"].setdefault(row["size_bytes"], []).append(row["busbw_gbps"])
                walls[name].append(wall)
                print(f"round {round_number}: {name:<19} {wall:7.2f} s", flush=True)
    param_wall = statistics.median(walls["PARAM fixed"])
    print(f"\n# wall time, median of {args.rounds} rounds ({args.collective}, gloo, {args.nproc} ranks, "
          f"{args.begin}–{args.end} x{args.factor}, {args.warmup} warm-up + {args.iters} timed)")
    for name, values in walls.items():
        median = statistics.median(values)
        print(f"{name:<19} {median:7.2f} s   ratio to PARAM {median / param_wall:5.2f}")
    print(f"\n# commbench adaptive (--target-ci {args.target_ci:g} --max-time {args.max_time:g}): achieved 95 % CI "
          "half-width (%) and timed iterations per point, each round")
    for size in sorted({row["size_bytes"] for rows in adaptive_rows for row in rows}):
        cells = [f"±{_ci_pct(row):5.1f} % {row['iters']:>5} it ({row['stop_reason']})"
                 for rows in adaptive_rows for row in rows if row["size_bytes"] == size]
        print(f"{size:>10} B  " + "   ".join(cells))
    print(f"\n# busbw (GB/s), median over rounds; commbench = {COMMBENCH_TIMING}; {PARAM_TIMING}")
    print(f"{'size (B)':>10} {'commbench':>10} {'PARAM':>8} {'ratio':>6}")
    for size in sorted(set(busbw["commbench"]) & set(busbw["PARAM"])):
        ours, theirs = statistics.median(busbw["commbench"][size]), statistics.median(busbw["PARAM"][size])
        print(f"{size:>10} {ours:>10.3f} {theirs:>8.3f} {ours / theirs if theirs else float('nan'):>6.2f}")


if __name__ == "__main__":
    main()
