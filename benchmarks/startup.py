"""Benchmark (not a test): how long `commbench --help` takes to start, against a bare Python that imports click (the
least a Click CLI can cost). The two are alternated --rounds times; prints each round, the medians and their ratio,
then which heavy packages (torch, scipy, pandas, matplotlib) `--help` imports and the import time of each one's
own modules (from `python -X importtime`). Runs `python -m commbench` in the checkout this file belongs to; CPU only,
seconds.

    python benchmarks/startup.py [--rounds 10]
"""

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "scipy", "pandas", "matplotlib")
HELP = [sys.executable, "-m", "commbench", "--help"]
BASELINE = [sys.executable, "-c", "import click"]


def _timed(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=REPO, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def heavy_imports() -> dict[str, float]:
    """The heavy packages `commbench --help` imports, each with the import time of its own modules in seconds (the
    sum of their self times, so torch's share excludes the numpy it pulls in)."""
    completed = subprocess.run([sys.executable, "-X", "importtime", "-m", "commbench", "--help"], cwd=REPO,
                               check=True, capture_output=True, text=True)
    found = {}
    # lines read "import time:  self [us] |  cumulative | imported package", nesting shown by indentation
    for line in completed.stderr.splitlines():
        fields = line.removeprefix("import time:").split("|")
        if len(fields) != 3 or not fields[0].strip().isdigit():
            continue
        package = fields[2].strip().split(".")[0]
        if package in HEAVY:
            found[package] = found.get(package, 0.0) + int(fields[0]) / 1e6
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    where = subprocess.run([sys.executable, "-c", "import commbench; print(commbench.__file__)"], cwd=REPO,
                           check=True, capture_output=True, text=True).stdout.strip()
    print(f"commbench from {where}")
    _timed(HELP)  # once untimed, so the first round does not pay for cold file caches alone
    help_s, click_s = [], []
    for index in range(args.rounds):  # alternated, so both see the same machine conditions
        help_s.append(_timed(HELP))
        click_s.append(_timed(BASELINE))
        print(f"round {index}: commbench --help {help_s[-1]:.3f} s, python -c 'import click' {click_s[-1]:.3f} s")
    ratio = statistics.median(help_s) / statistics.median(click_s)
    print(f"median: commbench --help {statistics.median(help_s):.3f} s, "
          f"import click {statistics.median(click_s):.3f} s, ratio {ratio:.1f}x")
    heavy = heavy_imports()
    print("heavy packages --help imports: " +
          (", ".join(f"{name} ({seconds:.2f} s)" for name, seconds in heavy.items()) or "none"))


if __name__ == "__main__":
    main()
