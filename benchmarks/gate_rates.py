"""Benchmark (not a test): how often the regression gate cries wolf, and whether it catches a real slowdown.

Runs the CI gate (suites/cpu-ci.toml, launched 3 times into a run set) --reruns times with unchanged code and
--reruns times for each --slowdowns percentage, every timed call made that much slower (COMMBENCH_SLOWDOWN_PCT: a
busy wait inside the timed interval), interleaved so all see the same machine, compares each run set against the
baseline at each --thresholds busbw threshold, and prints the share of run sets flagged: false positives (unchanged
code) and detection rates (slowed), with every row's ratio.

    python benchmarks/gate_rates.py [--baseline results/baselines/cpu-ci] [--reruns 5]
        [--slowdowns 20,50] [--thresholds 10,15,20,30]
"""

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from commbench.compare import compare, regressions

GATE_SUITE = "cpu-ci"  # what .ci/run's gate runs
GATE_LAUNCHES = 3  # the gate compares run sets: launch-to-launch variation exceeds the variation within one


def _run(out: Path, run_id: str, slowdown: float) -> Path:
    """One gate measurement: GATE_LAUNCHES launches of the gate suite in out/run_id/ (a run set)."""
    env = dict(os.environ, COMMBENCH_SLOWDOWN_PCT=str(slowdown))
    for launch in range(GATE_LAUNCHES):
        subprocess.run([sys.executable, "-m", "commbench", "run", GATE_SUITE, "--out", str(out / run_id),
                        "--run-id", f"launch{launch}", "--quiet"], check=True, env=env, stdout=subprocess.DEVNULL)
    return out / run_id


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, default=Path("results/baselines/cpu-ci"))
    parser.add_argument("--reruns", type=int, default=5)
    parser.add_argument("--slowdowns", default="20,50")
    parser.add_argument("--thresholds", default="10,15,20,30")
    args = parser.parse_args()
    slowdowns = [0.0] + [float(value) for value in args.slowdowns.split(",")]
    thresholds = [float(value) for value in args.thresholds.split(",")]
    flagged = {(slowdown, threshold): 0 for slowdown in slowdowns for threshold in thresholds}
    with tempfile.TemporaryDirectory() as out:
        for index in range(args.reruns):
            for slowdown in slowdowns:  # interleaved, so every case sees the same machine conditions
                run_dir = _run(Path(out), f"run{index}-{slowdown:g}", slowdown)
                entries = compare(args.baseline, run_dir, {"busbw": 0.0})
                ratios = " ".join(f"{entry['ratio']:.3f}" for entry in entries if "ratio" in entry)
                print(f"slowdown {slowdown:>3g} %: busbw new/baseline {ratios}")
                for threshold in thresholds:
                    flagged[(slowdown, threshold)] += bool(regressions(compare(args.baseline, run_dir,
                                                                               {"busbw": threshold})))
    for threshold in thresholds:
        rates = ", ".join(f"{'unchanged (false positives)' if slowdown == 0 else f'+{slowdown:g} % caught'} "
                          f"{flagged[(slowdown, threshold)]}/{args.reruns}" for slowdown in slowdowns)
        print(f"busbw:{threshold:g}%: {rates}")


if __name__ == "__main__":
    main()
