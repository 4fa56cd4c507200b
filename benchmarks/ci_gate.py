"""CI's regression gate, the same verdict on any machine CI lands on: the gate is tested against itself on this
machine, now, never against numbers recorded on another machine.

One round records three run sets of the shipped suite cpu-ci (gloo all_reduce, 2 CPU ranks, 16 and 64 MiB), their
launches interleaved (a1 b1 s1 a2 b2 s2 ...: all three see the same machine, and a drift in its speed falls on each
alike):
  a, b  unchanged code;
  s     every timed call made at least twice as long at the median by the slowdown fault (COMMBENCH_SLOWDOWN_PCT: a
        busy wait inside the timed interval of a share of the rank's fastest call so far). The share is set from the
        first unchanged launch: 100 % times its largest p50/min ratio over the rows, since on a loaded machine a
        point's median call is up to several times its fastest, and 100 % of the fastest would then add far less
        than the median's own time.
Then `commbench compare a b` must pass (exit 0) and `commbench compare a s` must fail (exit 1), at compare's defaults.
Both sides are run sets, so the gate tests across launches (Welch's t per row at 0.01 / rows, and over all rows).

What protects the code's own speed is benchmarks/harness_overhead.py (commbench's harness against a bare loop, in
the same launch); this script protects the gate. `benchmarks/gate_rates.py --ci-rounds 10` runs ten rounds and counts
how often each verdict was right (docs/measurements.md).

    python benchmarks/ci_gate.py [--launches 3] [--keep DIR] [--markdown FILE]
"""

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

SUITE = "cpu-ci"
SLOWED_FACTOR = 2.0
"""The slowed side's median call: at least this many times the unchanged one's."""
SIDES = ("a", "b", "s")
"""The three run sets of a round; s is the slowed one."""


@dataclass(frozen=True)
class Round:
    unchanged_failed: bool
    """`compare a b` failed the gate: a false alarm."""
    slowed_caught: bool
    """`compare a s` failed the gate: the slowdown was caught."""
    lines: tuple[str, str]
    """The last line compare printed for each comparison (its gate line)."""
    slowdown_pct: float
    """The fault's share of the fastest call (COMMBENCH_SLOWDOWN_PCT) the slowed side ran with."""

    @property
    def right(self) -> bool:
        return not self.unchanged_failed and self.slowed_caught


def record_round(out: Path, launches: int) -> float:
    """The three run sets of a round in out/a, out/b, out/s, launch by launch interleaved; the slowdown (percent of
    the fastest call) the slowed side ran with."""
    slowdown = 0.0
    for index in range(1, launches + 1):
        for side in SIDES:
            if side == "s" and not slowdown:
                slowdown = slowdown_pct(out / "a" / "launch1")
            _launch(out / side, f"launch{index}", slowdown if side == "s" else 0.0)
    return slowdown


def slowdown_pct(unchanged: Path) -> float:
    """The fault's share that makes every row's median call at least SLOWED_FACTOR times as long: the wait added is
    that share of the rank's fastest call, and a row's median is at most p50/min times its fastest."""
    from commbench import store
    from commbench.runs import kind_of

    tails = []
    for bench in (store.suite_bench_dirs(unchanged) or {"": unchanged}).values():
        results = store.read_results(bench, kind_of(bench))
        tails += [p50 / fastest for p50, fastest in results[["time_us_p50", "time_us_min"]].to_numpy()]
    return (SLOWED_FACTOR - 1) * max(tails) * 100


def _launch(run_set: Path, run_id: str, slowdown: float) -> None:
    env = {key: value for key, value in os.environ.items() if key != "COMMBENCH_SLOWDOWN_PCT"}
    if slowdown:
        env["COMMBENCH_SLOWDOWN_PCT"] = f"{slowdown:.0f}"
    subprocess.run([sys.executable, "-m", "commbench", "run", SUITE, "--out", str(run_set), "--run-id", run_id,
                    "--quiet"], check=True, env=env, stdout=subprocess.DEVNULL)


def gate(baseline: Path, new: Path, markdown: Path | None = None) -> tuple[int, str]:
    """`commbench compare baseline new` at its defaults: (exit code, its last line)."""
    command = [sys.executable, "-m", "commbench", "compare", str(baseline), str(new)]
    if markdown is not None:
        command += ["--markdown", str(markdown)]
    completed = subprocess.run(command, capture_output=True, text=True)
    if completed.returncode not in (0, 1):
        raise SystemExit(f"commbench compare {baseline} {new} exited {completed.returncode}: "
                         f"{completed.stderr.strip()}")
    return completed.returncode, (completed.stdout.strip().splitlines() or [""])[-1]


def run_round(out: Path, launches: int, markdown: Path | None = None) -> Round:
    slowdown = record_round(out, launches)
    unchanged_code, unchanged_line = gate(out / "a", out / "b")
    slowed_code, slowed_line = gate(out / "a", out / "s", markdown)
    return Round(unchanged_code == 1, slowed_code == 1, (unchanged_line, slowed_line), slowdown)


def say(result: Round) -> str:
    unchanged = "FAILED (a false alarm)" if result.unchanged_failed else "passed"
    slowed = "failed (caught)" if result.slowed_caught else "PASSED (the slowdown was missed)"
    return (f"unchanged against unchanged: {unchanged}: {result.lines[0]}\n"
            f"unchanged against {SLOWED_FACTOR:g}x slower (fault at {result.slowdown_pct:.0f} % of the fastest call): "
            f"{slowed}: {result.lines[1]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=3, help="launches per run set (default 3)")
    parser.add_argument("--keep", type=Path, default=None, help="record the run sets here and keep them")
    parser.add_argument("--markdown", type=Path, default=None,
                        help="write the slowed comparison's Markdown here (a CI job summary)")
    args = parser.parse_args()
    if args.launches < 2:
        parser.error("--launches must be 2 or more: the gate tests across launches")
    with contextlib.ExitStack() as stack:
        out = args.keep or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        result = run_round(out, args.launches, args.markdown)
    print(say(result))
    sys.exit(0 if result.right else 1)


if __name__ == "__main__":
    main()
