"""Benchmark (not a test): the lines of commbench/ that the test suite runs, counted in every process the tests start
(CLI subprocesses, torchrun and its ranks, the ranks commbench forks and ends with os._exit: coverage.py's
`patch = fork, _exit, subprocess`, 7.10 or newer), per module. Coverage is a floor, not an aim: `compare` fails when
any module covers fewer lines than the recorded figures, which a percentage would hide (deleting or omitting code
raises it).

    python benchmarks/coverage_floor.py run --out cov.json [-- PYTEST ARGS]     # the suite under coverage
    python benchmarks/coverage_floor.py compare BEFORE.json AFTER.json          # exit 1 if a module covers fewer lines
    python benchmarks/coverage_floor.py count DATA_DIR --rc RC --out cov.json  # count existing data files
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

RC = """[run]
source_pkgs = commbench
parallel = true
patch = fork, _exit, subprocess
data_file = {data}
"""


def run(out: Path, pytest_args: list[str]) -> int:
    """The README's test command under coverage, from the checkout; returns pytest's exit code."""
    work = Path(tempfile.mkdtemp(prefix="commbench-coverage-"))
    rc = work / "coveragerc"
    rc.write_text(RC.format(data=work / "data" / ".coverage"))
    (work / "data").mkdir()
    start = time.monotonic()
    code = subprocess.run([sys.executable, "-m", "coverage", "run", f"--rcfile={rc}", "-m", "pytest", "-q",
                           *pytest_args], cwd=REPO).returncode
    print(f"# suite under coverage: exit {code}, {time.monotonic() - start:.0f} s", flush=True)
    count(work / "data", rc, out)
    return code


def count(data: Path, rc: Path, out: Path) -> None:
    """Combines the data files under data and writes {module: {"covered": n, "statements": n}} to out."""
    subprocess.run([sys.executable, "-m", "coverage", "combine", f"--rcfile={rc}", "--keep", "-q",
                    f"--data-file={data / '.coverage'}", str(data)], check=True, cwd=REPO)
    report = data / "report.json"
    subprocess.run([sys.executable, "-m", "coverage", "json", f"--rcfile={rc}", f"--data-file={data / '.coverage'}",
                    "-o", str(report), "-q"], check=True, cwd=REPO)
    files = json.loads(report.read_text())["files"]
    modules = {_module(name): {"covered": entry["summary"]["covered_lines"],
                               "statements": entry["summary"]["num_statements"]} for name, entry in files.items()}
    out.write_text(json.dumps(dict(sorted(modules.items())), indent=1) + "\n")
    covered = sum(entry["covered"] for entry in modules.values())
    statements = sum(entry["statements"] for entry in modules.values())
    print(f"# {covered} of {statements} statements covered in {len(modules)} modules -> {out}")


def _module(path: str) -> str:
    """commbench/x/y.py whichever checkout it was measured in."""
    parts = Path(path).parts
    return "/".join(parts[len(parts) - 1 - parts[::-1].index("commbench"):])


def compare(before: Path, after: Path) -> int:
    old, new = json.loads(before.read_text()), json.loads(after.read_text())
    fewer = []
    for module in sorted(old.keys() | new.keys()):
        was, now = old.get(module, {"covered": 0}), new.get(module, {"covered": 0})
        if now["covered"] < was["covered"]:
            fewer.append(module)
            # code merged into another module takes its covered lines along: the uncovered count tells a module whose
            # statements moved out (uncovered unchanged) from one whose tests no longer reach a line
            uncovered = [side.get("statements", 0) - side["covered"] for side in (was, now)]
            print(f"FEWER  {module}: {was['covered']} -> {now['covered']} covered lines "
                  f"({was.get('statements', 0)} -> {now.get('statements', 0)} statements, "
                  f"uncovered {uncovered[0]} -> {uncovered[1]})")
    total = [sum(side[module]["covered"] for module in side) for side in (old, new)]
    print(f"# covered lines: {total[0]} -> {total[1]}; {len(fewer)} module(s) with fewer")
    return 1 if fewer else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = parser.add_subparsers(dest="verb", required=True)
    run_verb = verbs.add_parser("run")
    run_verb.add_argument("--out", type=Path, required=True)
    run_verb.add_argument("pytest_args", nargs="*")
    count_verb = verbs.add_parser("count")
    count_verb.add_argument("data", type=Path)
    count_verb.add_argument("--rc", type=Path, required=True)
    count_verb.add_argument("--out", type=Path, required=True)
    compare_verb = verbs.add_parser("compare")
    compare_verb.add_argument("before", type=Path)
    compare_verb.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.verb == "run":
        return run(args.out, args.pytest_args)
    if args.verb == "count":
        count(args.data, args.rc, args.out)
        return 0
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
