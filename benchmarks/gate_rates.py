"""Benchmark (not a test): how often the regression gate at its defaults cries wolf, and whether it catches a slowdown.

At default settings (a bare `commbench sweep`, `commbench compare` with its default thresholds and floor), with and
without a noisy neighbour (a `python3 -c 'while True: pass'` process beside the sweeps):

(a) single-launch pairs of unchanged code: in how many pairs the gate fails (goal: at most 1 in 20);
(b) run sets of --launches launches, an unchanged baseline against a new side with every timed call --slowdown %
    slower (COMMBENCH_SLOWDOWN_PCT: a busy wait inside the timed interval): how many pairs are caught (goal: 95 %);
    and pairs of unchanged run sets: how many fail (false positives).

A default sweep takes about 20 s on a 2-core VM, so launches are reused: K unchanged and M slowed run sets are
recorded (interleaved, so both see the same machine), with K * M >= --pairs; (b) pairs every unchanged set with every
slowed set, and every two unchanged sets; (a) pairs the unchanged launches, back-to-back ones first, then ever further
apart, until --pairs. The output says how the pairs were formed.

    python benchmarks/gate_rates.py [--pairs 20] [--neighbour | --no-neighbour] [--slowdown 25] [--launches 3]
        [--keep DIR]

(c) with --ci-rounds N instead: N rounds of CI's own gate check (benchmarks/ci_gate.py: three interleaved run sets of
    the suite cpu-ci, unchanged against unchanged must pass, unchanged against the 2x slowdown fault must fail),
    counting the false alarms and the catches (goal: 0 of N and N of N).
"""

import argparse
import contextlib
import itertools
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from commbench.gate.compare import compare
from commbench.gate.gate_verdict import gate_fails
from commbench.gate.sides import run_folders
from commbench.gate.thresholds import DEFAULT_THRESHOLDS
from commbench.gate.verdicts import REGRESSION
from commbench.measure.stats import as_number

NEIGHBOUR = [sys.executable, "-c", "while True: pass"]


@contextlib.contextmanager
def neighbour(active: bool):
    """A busy-looping process beside the sweeps while active."""
    process = subprocess.Popen(NEIGHBOUR) if active else None
    try:
        yield
    finally:
        if process is not None:
            process.kill()
            process.wait()


def record(out: Path, run_id: str, launches: int, slowdown: float) -> Path:
    """A bare `commbench sweep` as a run set of `launches` launches in out/run_id."""
    env = {key: value for key, value in os.environ.items() if key != "COMMBENCH_SLOWDOWN_PCT"}
    if slowdown:
        env["COMMBENCH_SLOWDOWN_PCT"] = f"{slowdown:g}"
    subprocess.run([sys.executable, "-m", "commbench", "sweep", "--launches", str(launches), "--out", str(out),
                    "--run-id", run_id, "--quiet"], check=True, env=env, stdout=subprocess.DEVNULL)
    return out / run_id


def single_pairs(launches: list[Path], wanted: int) -> list[tuple[Path, Path]]:
    """Pairs of launches, back-to-back ones first (1-2, 3-4, ...), then at distance 1 the other way (2-3, ...), then
    ever further apart, until `wanted`."""
    pairs, seen = [], set()
    for distance in range(1, len(launches)):
        for start in (0, 1) if distance == 1 else (0,):
            for first in range(start, len(launches) - distance, 2 if distance == 1 else 1):
                pair = (first, first + distance)
                if pair not in seen:
                    seen.add(pair)
                    pairs.append((launches[pair[0]], launches[pair[1]]))
    return pairs[:wanted]


def judge(baseline: Path, new: Path) -> tuple[bool, str]:
    """(the gate failed, its worst row) for `commbench compare BASELINE NEW` at its defaults."""
    entries = compare(baseline, new, dict(DEFAULT_THRESHOLDS))
    figures = [entry for entry in entries if "worse_pct" in entry]
    worst = max(figures, key=lambda entry: as_number(entry["worse_pct"]), default=None)
    flagged = [entry for entry in entries if entry["verdict"] == REGRESSION]
    shown = flagged[0] if flagged else worst
    if shown is None:
        return gate_fails(entries, allow_missing=False), "no row with a figure"
    p_value = "-" if shown["p_value"] is None else f"{shown['p_value']:.2g}"
    text = (f"{shown['row']} {shown['change']}, p {p_value}, detectable {shown['detectable_pct']:.0f} %: "
            f"{shown['verdict']}")
    return gate_fails(entries, allow_missing=False), text


def rate(name: str, outcomes: list[tuple[bool, str]], *, caught: bool, goal: str) -> None:
    count = sum(failed for failed, _ in outcomes)
    verb = "caught" if caught else "gate failed in"
    print(f"  {name}: {verb} {count}/{len(outcomes)} ({goal})")
    for index, (failed, text) in enumerate(outcomes, start=1):
        said = ("caught" if failed else "missed") if caught else ("gate FAILED" if failed else "gate passed")
        print(f"    pair {index:>2}: {said}: {text}")


def measure(out: Path, *, pairs: int, with_neighbour: bool, slowdown: float, launches: int) -> None:
    slowed_sets = math.ceil(math.sqrt(pairs))
    unchanged_sets = max(2, math.ceil(pairs / slowed_sets))
    label = "with a busy-looping neighbour" if with_neighbour else "without a neighbour"
    started = time.monotonic()
    unchanged, slowed = [], []
    with neighbour(with_neighbour):
        for index in range(max(unchanged_sets, slowed_sets)):  # interleaved: both see the same machine
            if index < unchanged_sets:
                unchanged.append(record(out, f"unchanged{index + 1}", launches, 0.0))
            if index < slowed_sets:
                slowed.append(record(out, f"slowed{index + 1}", launches, slowdown))
    minutes = (time.monotonic() - started) / 60
    print(f"\n{label}: recorded {unchanged_sets} unchanged run sets and {slowed_sets} with every timed call "
          f"{slowdown:g} % slower, {launches} launches each, interleaved ({(unchanged_sets + slowed_sets) * launches} "
          f"default sweeps in {minutes:.1f} min, under {out})")
    single = single_pairs([folder for run in unchanged for folder in run_folders(run)], pairs)
    print(f"  (a) {len(single)} single-launch pairs of unchanged code, among its {unchanged_sets * launches} launches: "
          "back-to-back launches first, then ever further apart; each compared at compare's defaults (the default "
          "launch-noise floor)")
    rate("(a) single launches, unchanged", [judge(*pair) for pair in single], caught=False,
         goal="goal: at most 1 in 20")
    crossed = list(itertools.product(unchanged, slowed))[:pairs]
    print(f"  (b) {len(crossed)} run-set pairs: each unchanged run set against each slowed one")
    rate(f"(b) run sets of {launches}, +{slowdown:g} %", [judge(*pair) for pair in crossed], caught=True,
         goal="goal: 95 %")
    same = list(itertools.combinations(unchanged, 2))
    print(f"  (b) {len(same)} run-set pairs of unchanged code: every two unchanged run sets")
    rate(f"(b) run sets of {launches}, unchanged", [judge(*pair) for pair in same], caught=False,
         goal="false positives")


def ci_rates(out: Path, rounds: int, launches: int, with_neighbour: bool) -> None:
    """(c): rounds of CI's gate check, each on fresh run sets."""
    import ci_gate  # beside this script

    label = "with a busy-looping neighbour" if with_neighbour else "without a neighbour"
    started = time.monotonic()
    results = []
    with neighbour(with_neighbour):
        for index in range(1, rounds + 1):
            results.append(ci_gate.run_round(out / f"round{index}", launches))
            print(f"round {index}:\n  " + ci_gate.say(results[-1]).replace("\n", "\n  "), flush=True)
    minutes = (time.monotonic() - started) / 60
    print(f"\n(c) CI's gate check, {label}, {rounds} rounds of three interleaved run sets of {launches} launches of "
          f"{ci_gate.SUITE} ({minutes:.1f} min, under {out}):")
    print(f"  unchanged against unchanged: the gate failed in {sum(r.unchanged_failed for r in results)}/{rounds} "
          "(goal: 0)")
    print(f"  unchanged against {ci_gate.SLOWED_FACTOR:g}x slower: caught {sum(r.slowed_caught for r in results)}/"
          f"{rounds} (goal: all)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=20, help="pairs per rate (default 20)")
    parser.add_argument("--neighbour", action=argparse.BooleanOptionalAction, default=None,
                        help="only with (--neighbour) or without (--no-neighbour) a busy-looping process beside the "
                             "sweeps [default: both, without first]")
    parser.add_argument("--slowdown", type=float, default=25.0, help="percent slower, run sets' new side (default 25)")
    parser.add_argument("--launches", type=int, default=3, help="launches per run set (default 3)")
    parser.add_argument("--keep", type=Path, default=None, help="record the runs here and keep them")
    parser.add_argument("--ci-rounds", type=int, default=None, metavar="N",
                        help="measure (c), N rounds of CI's gate check, instead of (a) and (b)")
    args = parser.parse_args()
    if args.pairs < 1 or args.launches < 2:
        parser.error("--pairs must be 1 or more and --launches 2 or more")
    conditions = [False, True] if args.neighbour is None else [args.neighbour]
    with contextlib.ExitStack() as stack:
        out = args.keep or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        if args.ci_rounds is not None:
            for with_neighbour in conditions:
                ci_rates(out / ("neighbour" if with_neighbour else "alone"), args.ci_rounds, args.launches,
                         with_neighbour)
            return
        for with_neighbour in conditions:
            measure(out / ("neighbour" if with_neighbour else "alone"), pairs=args.pairs,
                    with_neighbour=with_neighbour, slowdown=args.slowdown, launches=args.launches)


if __name__ == "__main__":
    main()
