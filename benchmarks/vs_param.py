"""Benchmark (not a test): commbench against PARAM's comms benchmark (facebookresearch/param,
train/comms/pt/comms.py) on the same collective, sizes and ranks, alternated --rounds times in one run.

Per round, in rotating order:
- `commbench sweep --timing per-iteration` with PARAM's fixed iterations (--warmup W --iters N), and PARAM itself
  (--w W --n N);
- `commbench sweep --target-ci P --max-time S` (adaptive; its first test of the stopping rule after --adaptive-iters);
- both tools on one point (the smallest size), which is their fixed cost: start-up, launch, rendezvous, teardown;
- with --before DIR, the same fixed sweep from another commbench checkout (e.g. `git worktree add /tmp/old HEAD~3`),
  so that the busbw of this checkout can be compared with the figures before a change.

Prints the wall-time medians and their ratios to PARAM, the adaptive runs' achieved 95 % CI, samples and stop reason
per point next to what the fixed runs achieved, where the adaptive runs' time went (timed calls vs the rest), and
busbw per size with each tool's timing method named.

PARAM is not a dependency of commbench and none of its code is in this repository: pass a checkout with --param
(e.g. `git clone https://github.com/facebookresearch/param`), or let --clone-param fetch one into a temporary folder.

    python benchmarks/vs_param.py --param ~/src/param [--rounds 3] [--begin 1K --end 64M --factor 4] [--before DIR]
"""

import argparse
import csv
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from commbench.errors import CommbenchError
from commbench.imports import param_text

COMMBENCH_TIMING = ("commbench per-iteration: barrier, one call, wait; the slowest rank's time per iteration, median "
                    "over iterations (95 % CI of that median from the samples)")
FIXED, PARAM, ADAPTIVE, BEFORE = "commbench fixed", "PARAM fixed", "commbench adaptive", "commbench before, fixed"
ONE_COMMBENCH, ONE_PARAM = "commbench 1 point", "PARAM 1 point"


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
    parser.add_argument("--warmup", type=int, default=10, help="warm-up iterations (PARAM's --w, both tools)")
    parser.add_argument("--target-ci", type=float, default=5.0, help="the adaptive runs' CI target, ± %%")
    parser.add_argument("--max-time", type=float, default=5.0, help="the adaptive runs' time budget per point, s")
    parser.add_argument("--adaptive-iters", type=int, default=10,
                        help="the adaptive runs' --iters: samples before the stopping rule is first tested")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--before", type=Path, help="another commbench checkout to run the fixed sweep from too")
    parser.add_argument("--no-one-point", action="store_true", help="skip the one-point (fixed cost) runs")
    parser.add_argument("--extra", default="", help="more options for this checkout's commbench runs, e.g. "
                                                    "--extra=--bind-cores")
    return parser.parse_args()


def param_package(checkout: Path, scratch: Path) -> Path:
    """A folder that makes PARAM importable as `param_bench` (its modules import themselves so)."""
    comms = checkout / "train" / "comms" / "pt" / "comms.py"
    if not comms.is_file():
        sys.exit(f"{checkout} is not a PARAM checkout: {comms} is missing")
    (scratch / "param_bench").symlink_to(checkout.resolve())
    return comms


def run_param(args, comms: Path, package: Path, *, end: str) -> tuple[float, dict[int, float]]:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={args.nproc}",
               str(comms), "--backend", "gloo", "--device", "cpu", "--collective", args.collective,
               "--begin-size", args.begin, "--end-size", end, "--f", str(args.factor),
               "--num_iters", str(args.iters), "--w", str(args.warmup)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(package), os.environ.get("PYTHONPATH")]))}
    started = time.perf_counter()
    completed = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if completed.returncode != 0:
        sys.exit(f"PARAM failed ({completed.returncode}):\n{completed.stderr[-3000:]}")
    try:  # commbench's own PARAM importer (`commbench import param`) reads the table
        _, tables, _, _ = param_text.parse(completed.stdout, "PARAM's output", collective=None,
                                           world_size=args.nproc, partial=False)
    except CommbenchError as error:
        sys.exit(f"{error}:\n{completed.stdout[-3000:]}")
    return wall, {row.size_bytes: row.busbw_gbps for table in tables for row in table.rows}


def run_commbench(args, out: Path, run_id: str, *, end: str, iters: int, extra: tuple[str, ...] = (),
                  checkout: Path | None = None) -> tuple[float, list[dict]]:
    command = [sys.executable, "-m", "commbench", "sweep", "-c", args.collective, "--impl", "builtin",
               "--backend", "gloo", "--device", "cpu", "--nproc", str(args.nproc),
               "--sizes", f"{args.begin}:{end}:x{args.factor}", "--warmup", str(args.warmup),
               "--iters", str(iters), "--timing", "per-iteration",  # N iterations, as PARAM's --n N
               *extra, "--out", str(out), "--run-id", run_id, "-q"]
    env = dict(os.environ)
    if checkout is not None:  # that checkout's package first on the path, ahead of the installed one
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(checkout.resolve()), env.get("PYTHONPATH")]))
    started = time.perf_counter()
    completed = subprocess.run(command, capture_output=True, text=True, env=env, cwd=checkout or None)
    wall = time.perf_counter() - started
    if completed.returncode != 0:
        sys.exit(f"commbench failed ({completed.returncode}):\n{completed.stderr[-3000:]}")
    run_dir = out / run_id
    with open(run_dir / "results.csv", newline="", encoding="utf-8") as handle:
        rows = [_numbers(row) for row in csv.DictReader(handle)]
    timed = _timed_seconds(run_dir / "samples.csv", rows)
    for row in rows:
        row["timed_s"] = timed.get((row["size_bytes"], row["timing"]), float("nan"))
    return wall, rows


def _numbers(row: dict) -> dict:
    converted = {}
    for key, value in row.items():
        try:
            converted[key] = int(value)
        except ValueError:
            try:
                converted[key] = float(value)
            except ValueError:
                converted[key] = value
    return converted


def _timed_seconds(samples_csv: Path, rows: list[dict]) -> dict:
    """Seconds inside the timed regions per point: the samples' sum (a batch sample is per call, so × its calls)."""
    calls = {(row["size_bytes"], row["timing"]): row.get("calls_per_sample") or 1 for row in rows}
    timed: dict = {}
    with open(samples_csv, newline="", encoding="utf-8") as handle:
        for sample in csv.DictReader(handle):
            key = (int(sample["size_bytes"]), sample["timing"])
            timed[key] = timed.get(key, 0.0) + float(sample["time_us"]) * 1e-6 * int(calls.get(key, 1))
    return timed


def _ci_pct(row: dict) -> float:
    p50, low, high = row["time_us_p50"], row["time_us_ci_lo"], row["time_us_ci_hi"]
    if any(isinstance(value, str) for value in (p50, low, high)) or not p50 > 0:
        return float("nan")
    return max(p50 - low, high - p50) / p50 * 100


def main() -> None:
    args = parse_args()
    names = [FIXED, PARAM, ADAPTIVE] + ([BEFORE] if args.before else []) + \
        ([] if args.no_one_point else [ONE_COMMBENCH, ONE_PARAM])
    walls: dict[str, list[float]] = {name: [] for name in names}
    busbw: dict[str, dict[int, list[float]]] = {FIXED: {}, PARAM: {}, BEFORE: {}}
    rows_of: dict[str, list[list[dict]]] = {FIXED: [], ADAPTIVE: [], BEFORE: []}
    adaptive = ("--target-ci", str(args.target_ci), "--max-time", str(args.max_time))
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
        runs = scratch / "runs"
        if args.before:  # its bytecode compiled once, as an installed package's is: no round pays for compiling it
            subprocess.run([sys.executable, "-m", "compileall", "-q", str(args.before / "commbench")], check=True,
                           stdout=subprocess.DEVNULL)
        for round_number in range(args.rounds):
            shift = round_number % len(names)
            for name in names[shift:] + names[:shift]:  # each goes first in turn
                run_id = f"{name.replace(' ', '-').replace(',', '')}-{round_number}"
                if name in (PARAM, ONE_PARAM):
                    wall, figures = run_param(args, comms, package, end=args.end if name == PARAM else args.begin)
                    if name == PARAM:
                        for size, value in figures.items():
                            busbw[PARAM].setdefault(size, []).append(value)
                else:
                    end = args.begin if name == ONE_COMMBENCH else args.end
                    iters = args.adaptive_iters if name == ADAPTIVE else args.iters
                    extra = (*(adaptive if name == ADAPTIVE else ()),
                             *(() if name == BEFORE else shlex.split(args.extra)))
                    wall, rows = run_commbench(args, runs, run_id, end=end, iters=iters, extra=extra,
                                               checkout=args.before if name == BEFORE else None)
                    if name in rows_of:
                        rows_of[name].append(rows)
                    if name in busbw:
                        for row in rows:
                            busbw[name].setdefault(row["size_bytes"], []).append(row["busbw_gbps"])
                walls[name].append(wall)
                print(f"round {round_number}: {name:<24} {wall:7.2f} s", flush=True)
    report(args, walls, busbw, rows_of)


def report(args, walls, busbw, rows_of) -> None:
    param_wall = statistics.median(walls[PARAM])
    print(f"\n# wall time, median of {args.rounds} rounds ({args.collective}, gloo, {args.nproc} ranks, "
          f"{args.begin}–{args.end} x{args.factor}, {args.warmup} warm-up; fixed: {args.iters} timed; adaptive: "
          f"--target-ci {args.target_ci:g} --max-time {args.max_time:g} --iters {args.adaptive_iters})"
          + (f"; this checkout's runs with {args.extra}" if args.extra else ""))
    for name, values in walls.items():
        median = statistics.median(values)
        reference = statistics.median(walls[ONE_PARAM]) if name.endswith("1 point") else param_wall
        against = "PARAM 1 point" if name.endswith("1 point") else "PARAM"
        print(f"{name:<24} {median:7.2f} s  (min {min(values):6.2f}, max {max(values):6.2f})   ratio to {against} "
              f"{median / reference:5.2f}")
    print("\n# per point: 95 % CI half-width (%), samples, stop reason; fixed = commbench with PARAM's iterations; "
          "timed = seconds inside the adaptive run's timed calls")
    sizes = sorted({row["size_bytes"] for rows in rows_of[ADAPTIVE] for row in rows})
    for size in sizes:
        fixed = [f"±{_ci_pct(row):5.1f}" for rows in rows_of[FIXED] for row in rows if row["size_bytes"] == size]
        cells = [f"±{_ci_pct(row):5.1f} % {row['iters']:>5} {row['timing'][:5]:<5} {row['stop_reason']:<8} "
                 f"timed {row['timed_s']:5.2f} s" for rows in rows_of[ADAPTIVE] for row in rows
                 if row["size_bytes"] == size]
        print(f"{size:>10} B  fixed {' '.join(fixed)}  | adaptive " + " | ".join(cells))
    for rows in rows_of[ADAPTIVE]:
        reached = sum(row["stop_reason"] == "ci" for row in rows)
        timed = sum(row["timed_s"] for row in rows)
        print(f"# adaptive run: {reached} of {len(rows)} points reached ±{args.target_ci:g} %, "
              f"{timed:.2f} s inside timed calls")
    print(f"\n# busbw (GB/s), median over rounds; commbench = {COMMBENCH_TIMING}; {param_text.TIMING_METHOD}")
    before = bool(busbw[BEFORE])
    print(f"{'size (B)':>10} {'commbench':>10} {'PARAM':>8} {'ratio':>6}" +
          (f" {'before':>8} {'now/before':>10}" if before else ""))
    for size in sorted(set(busbw[FIXED]) & set(busbw[PARAM])):
        ours, theirs = statistics.median(busbw[FIXED][size]), statistics.median(busbw[PARAM][size])
        line = f"{size:>10} {ours:>10.3f} {theirs:>8.3f} {ours / theirs if theirs else float('nan'):>6.2f}"
        if before and size in busbw[BEFORE]:
            old = statistics.median(busbw[BEFORE][size])
            line += f" {old:>8.3f} {ours / old if old else float('nan'):>10.2f}"
        print(line)


if __name__ == "__main__":
    main()
