"""Benchmark (not a test): the whole suite, --runs times in a row, with a busy loop pinned to one core beside it, the
way a shared CI machine or a developer's build steals a core. No test may depend on a quiet machine: every run must
pass. Prints each run's exit code, pass/fail counts and wall time; exits 1 if any run failed.

    python benchmarks/suite_under_load.py [--runs 3] [--core 0] [-- PYTEST ARGS]
"""

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUSY_LOOP = "while True: pass"


def _summary(output: str) -> str:
    """pytest's closing line, e.g. '7078 passed, 8 skipped in 480.1s'."""
    found = re.findall(r"^=*\s*(\d+ (?:passed|failed|error).*?)\s*=*$", output, re.M)
    return found[-1] if found else "(no summary line)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--core", type=int, default=0, help="the core the busy loop is pinned to")
    parser.add_argument("pytest_args", nargs="*")
    args = parser.parse_args()
    busy = subprocess.Popen([sys.executable, "-c", BUSY_LOOP], preexec_fn=lambda: os.sched_setaffinity(0, {args.core}))
    failed = 0
    try:
        for run in range(1, args.runs + 1):
            start = time.monotonic()
            completed = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                        *args.pytest_args], cwd=REPO, capture_output=True, text=True)
            wall = time.monotonic() - start
            failed += completed.returncode != 0
            print(f"run {run}: exit {completed.returncode}, {_summary(completed.stdout)}, wall {wall / 60:.1f} min",
                  flush=True)
            if completed.returncode != 0:
                print("\n".join(line for line in completed.stdout.splitlines()
                                if line.startswith(("FAILED", "ERROR"))), flush=True)
    finally:
        busy.kill()
    print(f"# {args.runs - failed} of {args.runs} runs passed with a busy loop on core {args.core}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
