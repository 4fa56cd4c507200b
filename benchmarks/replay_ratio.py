"""Benchmark (not a test): how close a replay comes to the traced step on this machine. Records a DDP and a FSDP
configuration with `commbench ddp` / `commbench fsdp` (torch.profiler traces under traces/), replays each trace
--rounds times with `commbench replay` (back to back, and with --with-compute-gaps), and prints per call group the
replayed / traced time (medians over the rounds) and the whole sequence's.

    python benchmarks/replay_ratio.py [--rounds 3] [--nproc 2]
"""

import argparse
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import pandas as pd

TRAINING = {"ddp": ["--bucket-cap-mb", "1"],
            "fsdp": ["--reshard-after-forward", "true", "--forward-prefetch", "0", "--backward-prefetch", "default"]}


def commbench(*args: str) -> None:
    completed = subprocess.run([sys.executable, "-m", "commbench", *args], capture_output=True, text=True)
    if completed.returncode != 0:
        sys.exit(f"commbench {' '.join(args)} failed ({completed.returncode}):\n{completed.stderr[-3000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--nproc", type=int, default=2)
    args = parser.parse_args()
    target = ["--backend", "gloo", "--device", "cpu", "--nproc", str(args.nproc)]
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch)
        for bench, options in TRAINING.items():
            commbench(bench, *target, "--steps", "6", "--warmup-steps", "2", "--profile-steps", "1", "--layers", "2",
                      *options, "--out", str(out), "--run-id", bench, "-q")
            for gaps in ([], ["--with-compute-gaps"]):
                ratios: dict[tuple, list[float]] = defaultdict(list)
                for round_ in range(args.rounds):
                    run_id = f"{bench}-replay{'-gaps' if gaps else ''}-{round_}"
                    commbench("replay", str(out / bench / "traces"), *target, *gaps, "--out", str(out),
                              "--run-id", run_id, "-q")
                    rows = pd.read_csv(out / run_id / "results.csv")
                    for _, row in rows.iterrows():
                        ratios[(row["kind"], int(row["size_bytes"]), int(row["calls"]))].append(
                            row["replayed_vs_traced"])
                print(f"\n# {bench}, replay {'with the traced gaps' if gaps else 'back to back'}: replayed / traced "
                      f"time, median over {args.rounds} rounds (min–max)")
                for (kind, size, calls), values in ratios.items():
                    print(f"  {kind:<15} {size:>12} B  x{calls:<3} {statistics.median(values):6.2f} "
                          f"({min(values):.2f}–{max(values):.2f})")


if __name__ == "__main__":
    main()
