"""Benchmark (not a test): does a one-line change to a formula behind a printed number make the inner loop fail?

The requirement: "a one-line change to any formula behind a printed number (a bandwidth factor, a unit, the result
check, a schedule, a verdict, a model's term) must still make at least one test fail, in the inner loop where it can."
This script measures it for a representative list of such formulas (MUTATIONS below), on a private copy of the
working tree by default (its tracked and untracked, not ignored files, uncommitted edits included, copied to a
temporary folder), so that a mutation is never seen by anything else reading the tree (a full test run, an editor);
--in-place mutates the working tree itself. For each mutation it
  1. reads the target file and refuses to run unless the old text occurs in it exactly once (else the list is stale);
  2. writes the file back with the old text replaced by the new (one line);
  3. runs the inner loop there, stopping at its first failure:
       python3 -m pytest -m no_process -x -q -p no:cacheprovider -o addopts="-n 2 --dist loadfile"
     with PYTHONDONTWRITEBYTECODE=1, so that no bytecode of the mutated source is left behind;
  4. always (try/finally, also on Ctrl-C or SIGTERM) writes back the exact bytes it read, with their modification
     time, never `git checkout`: other uncommitted edits stay as they were.
A mutation is CAUGHT when pytest reports a failed test (exit 1, or 2 where xdist's -x interrupts the session after
it; the first failed test is shown) that passes on the unchanged tree, run alone (a failure that the unchanged tree
shows too, such as a timing test on a loaded machine, proves nothing: the run is repeated without that test),
SURVIVED when it exits 0, and BROKEN on any other outcome (a collection error, an interrupted run). Unless
--no-baseline, the unchanged tree runs first and must pass, or no verdict means anything. Exit status 1 if any
mutation survived or broke.

    python3 benchmarks/formula_mutations.py [--only NAME ...] [--list] [--no-baseline] [--in-place]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INNER_LOOP = [sys.executable, "-m", "pytest", "-m", "no_process", "-x", "-q", "-p", "no:cacheprovider",
              "-o", "addopts=-n 2 --dist loadfile"]


@dataclass(frozen=True)
class Mutation:
    name: str
    path: str  # relative to the repository root
    old: str
    new: str
    breaks: str  # the formula the change breaks


MUTATIONS = [
    Mutation("busbw-all-reduce", "commbench/names.py",
             '"all_reduce": lambda n: 2 * (n - 1) / n,', '"all_reduce": lambda n: 2 * n / n,',
             "all_reduce busbw factor 2(n-1)/n"),
    Mutation("busbw-all-gather", "commbench/names.py",
             '"all_gather": lambda n: (n - 1) / n,', '"all_gather": lambda n: n / n,',
             "all_gather busbw factor (n-1)/n"),
    Mutation("busbw-broadcast", "commbench/names.py",
             '"broadcast": lambda n: 1.0,', '"broadcast": lambda n: (n - 1) / n,',
             "broadcast busbw factor 1"),
    Mutation("algbw-unit", "commbench/measure/bandwidth.py",
             "return algbw_bytes / seconds / 1e9", "return algbw_bytes / seconds / 1e6",
             "algbw = S / t in GB/s (1e9 B/s)"),
    Mutation("time-us", "commbench/sweep/collective_point.py",
             "times_us = [seconds * 1e6 for seconds in samples_s]",
             "times_us = [seconds * 1e3 for seconds in samples_s]",
             "a point's times in us (s x 1e6)"),
    Mutation("check-compare", "commbench/collectives/check_data.py",
             "return values != expected", "return values > expected",
             "the result check: n_wrong counts every element that differs"),
    Mutation("expected-avg", "commbench/collectives/check_data.py",
             "values = values / world", "values = values / (world + 1)",
             "expected avg = sum / n"),
    Mutation("median-ci-ranks", "commbench/measure/stats.py",
             "lo = max(k - 1, 0)", "lo = max(k, 0)",
             "median CI: binomial order-statistic ranks"),
    Mutation("adaptive-stop", "commbench/measure/timing.py",
             "if summarize(samples).ci_half_width_pct <= target_ci_pct:",
             "if summarize(samples).ci_half_width_pct <= 2 * target_ci_pct:",
             "adaptive stopping: CI half-width <= target"),
    Mutation("verdict-threshold", "commbench/gate/verdicts.py",
             "if abs(worse_pct) <= threshold:", "if abs(worse_pct) < threshold:",
             "gate verdict: ok within the threshold (inclusive)"),
    Mutation("gate-alpha", "commbench/gate/verdicts.py",
             "ALPHA = 0.01", "ALPHA = 0.05",
             "gate's significance level alpha 0.01"),
    Mutation("mann-whitney-side", "commbench/gate/metric_entry.py",
             'mannwhitneyu(samples[1], samples[0], alternative="greater")',
             'mannwhitneyu(samples[1], samples[0], alternative="two-sided")',
             "one-sided Mann-Whitney U p (new slower)"),
    Mutation("launch-noise-pool", "commbench/gate/run_set.py",
             "df += len(values) - 1", "df += len(values)",
             "launch noise pooled sd: n-1 degrees of freedom per row"),
    Mutation("zero-16psi", "commbench/models/memory.py",
             'StateBytes(2, 2, 12, "16-bit params and grads;', 'StateBytes(2, 2, 8, "16-bit params and grads;',
             "mixed-precision Adam model state 16 bytes/param (16Psi/N)"),
    Mutation("fsdp-1.5x-ddp", "commbench/models/strategies.py",
             'Strategy("zero3", "ZeRO-3/FSDP", True, True, True, ring_phases=3)',
             'Strategy("zero3", "ZeRO-3/FSDP", True, True, True, ring_phases=2)',
             "FSDP comm volume 3 ring phases = 1.5x DDP"),
    Mutation("ring-bytes-per-rank", "commbench/models/comm_volume.py",
             "per_phase = (ranks - 1) / ranks * payload", "per_phase = ranks / ranks * payload",
             "ring bytes per rank (n-1)/n x payload per phase"),
    Mutation("ddp-bucket-close", "commbench/models/shard_layout.py",
             "if held >= limits[limit]:", "if held > limits[limit]:",
             "DDP bucket closes once it holds its limit or more"),
    Mutation("alpha-beta-weights", "commbench/models/alpha_beta.py",
             "weights = 1.0 / times_us**2", "weights = 1.0 / times_us",
             "alpha-beta fit weighted by relative error (1/t^2)"),
    Mutation("expect-tree", "commbench/expect/model.py",
             "tree_ok = healthy.TREE_NCCL.share * 2 * (ranks - 1) / ranks * channel",
             "tree_ok = healthy.TREE_NCCL.share * (ranks - 1) / ranks * channel",
             "healthy busbw of a tree all_reduce: share x 2(n-1)/n x channel"),
    Mutation("exposed-comm", "commbench/training/exposed.py",
             "differences = [first - second for first, second in zip(with_comm_ms, without_ms)]",
             "differences = [second - first for first, second in zip(with_comm_ms, without_ms)]",
             "exposed comm = step - compute-only step"),
    Mutation("hunt-detectable", "commbench/cluster/diagnosis.py",
             "detectable = max(threshold, settings.min_z * node_spread, settings.min_z * (noise or 0.0))",
             "detectable = max(threshold, settings.min_z * node_spread)",
             "hunt's detectable slowdown: max(threshold, z x spread, z x repeat noise)"),
    Mutation("mfu-6n", "commbench/training/flops.py",
             "return 6 * (params - embedding_params)", "return 2 * (params - embedding_params)",
             "model FLOPs per token 6N (+ attention) behind TFLOPS and MFU"),
]


@dataclass
class Outcome:
    mutation: Mutation
    verdict: str  # CAUGHT, SURVIVED, BROKEN
    test: str
    seconds: float


def _source(tree: Path, mutation: Mutation) -> tuple[Path, str]:
    path = tree / mutation.path
    text = path.read_text()
    found = text.count(mutation.old)
    if found != 1:
        raise SystemExit(f"{mutation.name}: the old text occurs {found} times in {mutation.path} (must be exactly "
                         f"once; the list is stale): {mutation.old!r}")
    if "\n" in mutation.old or "\n" in mutation.new:
        raise SystemExit(f"{mutation.name}: a mutation is a one-line change")
    return path, text


def copy_tree(into: Path) -> Path:
    """The working tree as it is now (tracked files with their uncommitted edits, untracked files git does not
    ignore), copied into a new folder, with the modification times kept."""
    listed = subprocess.run(["git", "ls-files", "-z", "-c", "-o", "--exclude-standard"], cwd=ROOT, check=True,
                            capture_output=True).stdout.decode().split("\0")
    tree = into / "tree"
    for name in filter(None, listed):
        source, target = ROOT / name, tree / name
        if source.is_symlink():  # a tracked link (suites -> commbench/data/suites) stays a link
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(os.readlink(source))
        elif source.is_file():  # a deleted tracked file is listed but absent
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return tree


def _first_failure(output: str) -> str:
    match = re.search(r"^(?:FAILED|ERROR) (.+?)(?: - .*)?$", output, re.MULTILINE)  # ids may hold spaces
    return match.group(1) if match else ""


def _inner_loop(tree: Path, deselect: list[str] | None = None) -> tuple[int, str, float]:
    started = time.monotonic()
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    command = INNER_LOOP + [f"--deselect={test}" for test in deselect or ()]
    # its own session, so that an interrupted run takes pytest and its workers down with it
    process = subprocess.Popen(command, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
    try:
        output, _ = process.communicate()
    except BaseException:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise
    return process.returncode, output, time.monotonic() - started


def _fails_unchanged(tree: Path, test: str) -> bool:
    """Whether the test fails on the unchanged tree too, run alone (a timing test that a loaded machine fails)."""
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", test],
                          cwd=tree, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}, capture_output=True)
    return done.returncode != 0


def run_one(tree: Path, mutation: Mutation, tries: int = 3) -> Outcome:
    """The mutation's verdict. A failed test that fails on the unchanged tree too (run alone, after the restore) is
    no proof: the run is repeated without it, up to `tries` runs in all."""
    path, original = _source(tree, mutation)
    raw, stat = path.read_bytes(), path.stat()
    skipped: list[str] = []
    for _ in range(tries):
        try:
            path.write_text(original.replace(mutation.old, mutation.new))
            code, output, seconds = _inner_loop(tree, skipped)
        finally:
            path.write_bytes(raw)
            os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        if path.read_bytes() != raw:
            raise SystemExit(f"{path} was not restored: restore it by hand")
        failed = _first_failure(output)
        if code in (1, 2) and failed and _fails_unchanged(tree, failed):
            print(f"    {failed} fails on the unchanged tree too: run again without it", flush=True)
            skipped.append(failed)
            continue
        if code in (1, 2) and failed:
            return Outcome(mutation, "CAUGHT", failed, seconds)
        if code == 0:
            return Outcome(mutation, "SURVIVED", "", seconds)
        tail = " | ".join(output.strip().splitlines()[-3:])
        return Outcome(mutation, "BROKEN", f"pytest exit {code}: {tail[:200]}", seconds)
    return Outcome(mutation, "BROKEN", f"{tries} runs failed only in tests that fail unchanged: {', '.join(skipped)}",
                   seconds)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", metavar="NAME", help="run this mutation only (repeatable)")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--no-baseline", action="store_true", help="skip the run of the unchanged tree")
    parser.add_argument("--in-place", action="store_true",
                        help="mutate the working tree itself (restored after each run), not a private copy of it")
    args = parser.parse_args()
    names = {mutation.name for mutation in MUTATIONS}
    if len(names) != len(MUTATIONS):
        raise SystemExit("two mutations share a name")
    unknown = set(args.only or ()) - names
    if unknown:
        raise SystemExit(f"unknown mutation {', '.join(sorted(unknown))}; known: {', '.join(sorted(names))}")
    chosen = [mutation for mutation in MUTATIONS if not args.only or mutation.name in args.only]
    for mutation in chosen:  # refuse before changing anything if any entry is stale
        _source(ROOT, mutation)
    if args.list:
        for mutation in chosen:
            print(f"{mutation.name:<22} {mutation.path:<40} {mutation.breaks}")
        return 0
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # SIGINT: a background job inherits it ignored
        signal.signal(signum, _interrupt)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="formula-mutations-") as scratch:
        tree = ROOT if args.in_place else copy_tree(Path(scratch))
        print(f"mutating {tree}{' (the working tree itself)' if args.in_place else ', a copy of the working tree'}",
              flush=True)
        if not args.no_baseline:
            code, output, seconds = _inner_loop(tree)
            print(f"baseline (unchanged tree): pytest exit {code} in {seconds:.0f} s", flush=True)
            if code != 0:
                print(output[-3000:])
                raise SystemExit("the inner loop fails on the unchanged tree: no mutation verdict would mean anything")
        outcomes = []
        for mutation in chosen:
            outcome = run_one(tree, mutation)
            outcomes.append(outcome)
            print(f"  {mutation.name}: {outcome.verdict} in {outcome.seconds:.0f} s {outcome.test}", flush=True)
    print()
    print(f"{'mutation':<22} {'formula':<62} {'file':<38} {'verdict':<8} first failing test")
    for outcome in outcomes:
        mutation = outcome.mutation
        print(f"{mutation.name:<22} {mutation.breaks:<62} {mutation.path:<38} {outcome.verdict:<8} {outcome.test}")
    caught = sum(outcome.verdict == "CAUGHT" for outcome in outcomes)
    print(f"\n{caught}/{len(outcomes)} caught; {time.monotonic() - started:.0f} s in all")
    return 0 if caught == len(outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
