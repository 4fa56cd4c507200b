"""Benchmark (not a test): what sharing one launch saves a suite. The same three benches (a collective sweep, a DDP
sweep with memory reset, another sweep) run as one suite (`commbench run`: one torchrun, one process group) and as
three separate commands (three torchruns), alternated --rounds times; prints the wall time of each and the ratio.

    python benchmarks/suite_launches.py [--rounds 3]
"""

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMON = ["--backend", "gloo", "--device", "cpu", "--nproc", "2"]
BENCHES = [
    ["sweep", "-c", "all_reduce", "--impl", "builtin", "--sizes", "4K,64K,1M", "--iters", "10", "--warmup", "2"],
    ["ddp", "--bucket-cap-mb", "1,25", "--params", "1M", "--layers", "2", "--steps", "6", "--profile-steps", "0",
     "--isolation", "reset"],
    ["sweep", "-c", "all_gather", "--impl", "builtin", "--sizes", "4K,64K,1M", "--iters", "10", "--warmup", "2"],
]
SUITE = """
backend = "gloo"
device = "cpu"
nproc = 2

[[bench]]
name = "ar"
kind = "sweep"
collective = "all_reduce"
impl = "builtin"
sizes = "4K,64K,1M"
iters = 10
warmup = 2

[[bench]]
kind = "ddp"
bucket-cap-mb = [1, 25]
params = "1M"
layers = 2
steps = 6
profile-steps = 0
isolation = "reset"

[[bench]]
name = "ag"
kind = "sweep"
collective = "all_gather"
impl = "builtin"
sizes = "4K,64K,1M"
iters = 10
warmup = 2
"""


def _timed(commands: list[list[str]]) -> float:
    start = time.perf_counter()
    for command in commands:
        subprocess.run([sys.executable, "-m", "commbench", *command], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    suite_s, separate_s = [], []
    with tempfile.TemporaryDirectory() as out:
        suite = Path(out) / "three.toml"
        suite.write_text(SUITE)
        for index in range(args.rounds):  # alternated, so both see the same machine conditions
            suite_s.append(_timed([["run", str(suite), "--out", out, "--run-id", f"suite{index}", "-q"]]))
            separate_s.append(_timed([[*bench, *COMMON, "--out", out, "--run-id", f"separate{index}-{number}", "-q"]
                                      for number, bench in enumerate(BENCHES)]))
            print(f"round {index}: suite (1 launch) {suite_s[-1]:.1f} s, separate (3 launches) {separate_s[-1]:.1f} s")
    print(f"median: suite {statistics.median(suite_s):.1f} s, separate {statistics.median(separate_s):.1f} s, "
          f"suite/separate {statistics.median(suite_s) / statistics.median(separate_s):.2f}")


if __name__ == "__main__":
    main()
