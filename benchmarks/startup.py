"""Benchmark (not a test): how long `commbench --help` takes to start, through the installed `commbench` script (what
a shell runs, and its completion at every Tab) and as `python -m commbench`, against a bare Python that imports click
(the least a Click CLI can cost). The three are alternated --rounds times; prints each round, the medians and their
ratios to import click, then which heavy packages (torch, scipy, pandas, matplotlib) `--help` imports and the import
time of each one's own modules (from `python -X importtime`). Runs in the checkout this file belongs to (the script
is this interpreter's, or --script; a pyenv shim in front of it adds its own start); CPU only, seconds.

    python benchmarks/startup.py [--rounds 10] [--script PATH]
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "scipy", "pandas", "matplotlib")
HELP = [sys.executable, "-m", "commbench", "--help"]
BASELINE = [sys.executable, "-c", "import click"]
SCRIPT = Path(sysconfig.get_path("scripts")) / "commbench"  # the console script `pip install` wrote for this Python


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
    parser.add_argument("--script", default=str(SCRIPT) if SCRIPT.exists() else shutil.which("commbench"),
                        help="the installed commbench script [default: this interpreter's]")
    args = parser.parse_args()
    where = subprocess.run([sys.executable, "-c", "import commbench; print(commbench.__file__)"], cwd=REPO,
                           check=True, capture_output=True, text=True).stdout.strip()
    print(f"commbench from {where}, script {args.script}")
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        print("PYTHONDONTWRITEBYTECODE is set: with no bytecode cache written, every start compiles what it imports")
    commands = {"commbench --help (script)": [args.script, "--help"], "python -m commbench --help": HELP,
                "python -c 'import click'": BASELINE}
    times: dict[str, list[float]] = {label: [] for label in commands}
    for command in commands.values():  # once untimed, so the first round does not pay for cold file caches alone
        _timed(command)
    for index in range(args.rounds):  # alternated, so all see the same machine conditions
        for label, command in commands.items():
            times[label].append(_timed(command))
        print(f"round {index}: " + ", ".join(f"{label} {seconds[-1]:.3f} s" for label, seconds in times.items()))
    medians = {label: statistics.median(seconds) for label, seconds in times.items()}
    click_s = medians["python -c 'import click'"]
    print("median: " + ", ".join(f"{label} {seconds:.3f} s ({seconds / click_s:.1f}x)"
                                 for label, seconds in medians.items()))
    heavy = heavy_imports()
    print("heavy packages --help imports: " +
          (", ".join(f"{name} ({seconds:.2f} s)" for name, seconds in heavy.items()) or "none"))


if __name__ == "__main__":
    main()
