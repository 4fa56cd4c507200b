"""Benchmark (not a test): what isolating configurations costs, in wall time and in peak-memory agreement.

Runs the same `commbench zero` sweep (ddp, zero3, ddp on 2 gloo ranks) with --isolation reset (one launch; memory
released and the peak counter reset between configurations) and --isolation process (one launch per
configuration), alternating the two for --rounds rounds. Prints each mode's median wall time, their ratio, and each
configuration's median peak memory under both, so one can see whether sharing a process changes the peak.

    python benchmarks/training_isolation.py [--rounds 2] [--params 8M]
"""

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from commbench.runs import load_run

MODES = ("reset", "process")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--params", default="8M")
    args = parser.parse_args()
    wall: dict[str, list[float]] = {mode: [] for mode in MODES}
    peaks: dict[tuple[str, int, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as out:
        for round_index in range(args.rounds):
            for mode in MODES:
                run_id = f"{mode}-{round_index}"
                command = [sys.executable, "-m", "commbench", "zero", "--strategy", "ddp,zero3,ddp", "--params",
                           args.params, "--steps", "6", "--profile-steps", "0", "--isolation", mode, "--out", out,
                           "--run-id", run_id, "--quiet"]
                start = time.perf_counter()
                subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
                wall[mode].append(time.perf_counter() - start)
                for row in load_run(Path(out) / run_id).results.to_dict("records"):
                    peaks.setdefault((row["strategy"], row["config_index"], mode), []).append(row["peak_mem_bytes"])
    median = {mode: statistics.median(times) for mode, times in wall.items()}
    print(f"wall time (median of {args.rounds}): reset {median['reset']:.1f} s, process {median['process']:.1f} s, "
          f"process/reset {median['process'] / median['reset']:.2f}")
    print(f"{'configuration':<16} {'peak reset (MiB)':>17} {'peak process (MiB)':>19} {'difference (MiB)':>17}")
    for strategy, index in sorted({(s, i) for s, i, _ in peaks}, key=lambda key: key[1]):
        reset = statistics.median(peaks[(strategy, index, "reset")]) / 2**20
        process = statistics.median(peaks[(strategy, index, "process")]) / 2**20
        print(f"{f'{index}: {strategy}':<16} {reset:>17.0f} {process:>19.0f} {reset - process:>17.0f}")


if __name__ == "__main__":
    main()
