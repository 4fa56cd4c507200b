"""Benchmark (not a test): measured busbw as a fraction of commbench's expected busbw.

On this machine: --rounds times, the host's rates measured again (`commbench env --json`, which refreshes the cache),
then a gloo sweep of all_reduce and all_gather at 16 and 64 MiB; prints each row's measured / expected. On the real
nccl-tests logs in tests/data/imports: each imported with its machine's preset, measured / expected at the largest
size.

    python benchmarks/expected_ratio.py [--rounds 3] [--nproc 2]
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

LOGS = Path(__file__).resolve().parents[1] / "tests" / "data" / "imports" / "nccl-tests"
IMPORTS = [("a100_2node_16rank_mpi_prefix_old_layout_all_reduce.txt", "aws-p4d", ["--collective", "all_reduce"]),
           ("h100_2node_16rank_all_reduce.txt", "gcp-a3-mega", ["--collective", "all_reduce"]),
           ("v100_dgx2_12gpu_old_layout_5tests_concatenated.txt", "dgx-2", []),
           ("a100_8gpu_sendrecv_wrong_na_table_only.txt", "dgx-a100",
            ["--collective", "sendrecv", "--world-size", "8", "--partial"])]


def commbench(*args: str) -> str:
    completed = subprocess.run([sys.executable, "-m", "commbench", *args], capture_output=True, text=True)
    if completed.returncode not in (0, 1):
        sys.exit(f"commbench {' '.join(args)} failed ({completed.returncode}):\n{completed.stderr[-3000:]}")
    return completed.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--nproc", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch)
        print("round  collective  size (MiB)  measured busbw (GB/s)  expected (GB/s)  bound by      measured/expected")
        for round_ in range(args.rounds):
            facts = json.loads(commbench("env", "--json"))["facts"]
            commbench("sweep", "-c", "all_reduce,all_gather", "--sizes", "16M,64M", "--nproc", str(args.nproc),
                      "--out", str(out), "--run-id", f"r{round_}", "-q")
            rows = pd.read_csv(out / f"r{round_}" / "results.csv")
            for _, row in rows.iterrows():
                bound = str(row["expected_basis"]).split("bound by ")[-1].split(";")[0]
                print(f"{round_:5d}  {row['collective']:<10}  {row['size_bytes'] / 2**20:10.0f}  "
                      f"{row['busbw_gbps']:21.3f}  {row['expected_busbw_gbps']:15.3f}  {bound:<12}  "
                      f"{row['busbw_gbps'] / row['expected_busbw_gbps']:17.2f}")
            print(f"       (copy {facts['memcpy_gbps']:.2f} GB/s, loopback {facts['loopback_gbps']:.2f} GB/s)")
        print("\nlog  collective  size (B)  measured busbw (GB/s)  expected (GB/s)  measured/expected  "
              "expected rests on")
        for name, machine, options in IMPORTS:
            run_id = name.split("_")[0] + "-" + machine
            commbench("import", "nccl-tests", str(LOGS / name), "--machine", machine, *options, "--out", str(out),
                      "--run-id", run_id, "-q")
            rows = pd.read_csv(out / run_id / "results.csv")
            for collective, group in rows.groupby("collective"):
                top = group[group["size_bytes"] == group["size_bytes"].max()]
                measured, expected = top["busbw_gbps"].max(), top["expected_busbw_gbps"].iloc[0]
                print(f"{run_id}  {collective}  {int(top['size_bytes'].iloc[0])}  {measured:.2f}  {expected:.2f}  "
                      f"{measured / expected:.3f}  {top['expected_basis'].iloc[0]}")


if __name__ == "__main__":
    main()
