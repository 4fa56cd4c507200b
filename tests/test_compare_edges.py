"""Three edges of `commbench compare` (issue 49):

- the sizes nccl-tests prints with busbw 0.00 are judged on their time, the figure that carries the information
  there, rather than set aside as `no figure` (two imports of a real H100 log, one with its small sizes made slower
  as nccl-tests would print them);
- a suite run (a bare `commbench sweep` is the `default` suite) against a single run is compared through the suite's
  one bench of that run's kind, and a note says which; with several such benches, or none, it is refused in one line
  that names them (the committed run set results/baselines/cpu-ci, and one real suite run of two collective benches
  and a p2p bench);
- the README's `commbench compare results/base results/new`: a side that does not exist is refused with the command
  that makes it, and two run sets of suite runs (what `commbench sweep --launches 3` writes) compare across launches.
"""

import json
import math
import re
import shutil
import warnings
from pathlib import Path

import pandas as pd
import pytest

from commbench.bench_kind import Metric
from commbench.benches.collective import KIND as COLLECTIVE
from commbench.errors import CommbenchWarning
from commbench.gate.launch_tests import Floor, Launches
from commbench.gate.metric_entry import _single_launch
from commbench.gate.verdicts import IMPROVED, NO_FIGURE, NOISE, OK, REGRESSION, verdict
from commbench.machine import Machine
from commbench.suite.load import load_suite
from tests.in_process import commbench_here
from tests.refusals import assert_refused, invoke

ROOT = Path(__file__).parent.parent
H100_LOG = ROOT / "tests" / "data" / "imports" / "nccl-tests" / "h100_2node_16rank_all_reduce.txt"
ALL_REDUCE_FACTOR_16 = 2 * 15 / 16
"""all_reduce's busbw / algbw at 16 ranks (the log's world size)."""
BASELINE_SET = ROOT / "results" / "baselines" / "cpu-ci"
"""Five real launches of the suite cpu-ci (one collective bench, `gate`), recorded on a 2-core VM."""


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """No launch noise stored for any machine: the floor of a single launch is its device's prior, whatever other
    runs on this machine stored."""
    monkeypatch.setenv("COMMBENCH_CACHE_DIR", str(tmp_path / "cache"))


def _slowed_log(factors: dict[int, float]) -> str:
    """The H100 log with the rows of these sizes `factor` times slower, both placements, printed as nccl-tests prints
    them: time to 0.1 us, algbw = size / time and busbw = algbw x 2(n-1)/n to 0.01 GB/s."""
    lines = []
    for line in H100_LOG.read_text().splitlines(keepends=True):
        parts = re.split(r"(\s+)", line)  # separators kept: the columns stay where they were
        words = parts[2::2]  # parts[0] is "" before the leading spaces
        if parts[0] == "" and words and words[0].isdigit() and int(words[0]) in factors:
            size, factor = int(words[0]), factors[int(words[0])]
            for time_at in (5, 9):  # out-of-place and in-place: time algbw busbw #wrong
                time_us = float(words[time_at]) * factor
                algbw = size / time_us / 1e3
                words[time_at:time_at + 3] = [f"{time_us:.1f}", f"{algbw:.2f}",
                                              f"{algbw * ALL_REDUCE_FACTOR_16:.2f}"]
            parts[2::2] = words
            line = "".join(parts)
        lines.append(line)
    return "".join(lines)


def _import(commbench_cli, source: Path, out: Path, run_id: str) -> Path:
    outcome = commbench_cli("import", "nccl-tests", str(source), "--out", str(out), "--run-id", run_id)
    assert outcome.returncode == 0, outcome.stderr
    return out / run_id


def _compare_json(commbench_cli, *args) -> tuple[int, dict]:
    outcome = commbench_cli("compare", *map(str, args), "--json")
    assert "Traceback" not in outcome.stderr
    return outcome.returncode, json.loads(outcome.stdout)


def _zero_busbw_sizes(run: Path) -> set[int]:
    rows = pd.read_csv(run / "results.csv")
    return set(rows.loc[rows["busbw_gbps"] == 0, "size_bytes"].astype(int))


@pytest.mark.no_process
def test_sizes_printed_with_busbw_0_are_compared_on_time(commbench_cli, tmp_path):
    first = _import(commbench_cli, H100_LOG, tmp_path, "first")
    second = _import(commbench_cli, H100_LOG, tmp_path, "second")
    zero = _zero_busbw_sizes(first)
    assert zero, "the log's small sizes print busbw 0.00"
    code, document = _compare_json(commbench_cli, first, second)
    assert code == 0, document["gate"]
    entries = document["entries"]
    assert len(entries) == 62 and {entry["verdict"] for entry in entries} == {OK}, entries
    on_time = [entry for entry in entries if entry["metric"] == "time"]
    assert len(on_time) == 2 * len(zero)  # both placements of every size printed as busbw 0.00
    assert all(entry["instead_of"] == "busbw" and entry["worse_pct"] == 0 for entry in on_time)
    assert all(entry["why"].startswith("busbw 0 vs 0: judged on time instead, at the busbw threshold")
               for entry in on_time)
    assert all(entry["instead_of"] is None for entry in entries if entry["metric"] == "busbw")
    assert any(note.startswith(f"{len(on_time)} row(s) have busbw 0 (or none) on a side") for note in
               document["notes"])


@pytest.mark.no_process
def test_a_slowdown_under_busbw_0_is_a_regression_judged_on_time(commbench_cli, tmp_path):
    """The sizes up to 256 B twice as slow (busbw still prints 0.00), 512 B 1.6 times (its busbw 0.01 becomes 0.00):
    each is judged on its time and is a regression by the time's change, beyond the GPU prior's floor; every other
    size is unchanged and ok."""
    base = _import(commbench_cli, H100_LOG, tmp_path, "base")
    zero = _zero_busbw_sizes(base)
    factors = {size: 2.0 for size in zero} | {512: 1.6}
    (tmp_path / "slower.txt").write_text(_slowed_log(factors))
    slow = _import(commbench_cli, tmp_path / "slower.txt", tmp_path, "slow")
    assert _zero_busbw_sizes(slow) == zero | {512}
    code, document = _compare_json(commbench_cli, base, slow)
    assert code == 1, document["gate"]
    by_verdict: dict[str, list[dict]] = {}
    for entry in document["entries"]:
        by_verdict.setdefault(entry["verdict"], []).append(entry)
    regressions = by_verdict.pop(REGRESSION)
    assert set(by_verdict) == {OK}, by_verdict.keys()
    assert len(regressions) == 2 * len(factors)
    before = pd.read_csv(base / "results.csv").set_index(["size_bytes", "inplace"])["time_us_p50"]
    after = pd.read_csv(slow / "results.csv").set_index(["size_bytes", "inplace"])["time_us_p50"]
    for entry in regressions:
        size = next(size for size in factors if entry["row"].endswith(f" {size} B"))
        placement = entry["row"].split()[-3] == "in"
        assert entry["metric"] == "time" and entry["instead_of"] == "busbw", entry
        assert entry["worse_pct"] > entry["floor_pct"]
        assert math.isclose(entry["worse_pct"], (after[size, placement] / before[size, placement] - 1) * 100)


@pytest.mark.no_process
def test_with_time_gated_too_a_busbw_0_row_is_judged_once_by_its_time_entry(commbench_cli, tmp_path):
    first = _import(commbench_cli, H100_LOG, tmp_path, "first")
    second = _import(commbench_cli, H100_LOG, tmp_path, "second")
    zero_rows = 2 * len(_zero_busbw_sizes(first))
    code, document = _compare_json(commbench_cli, first, second, "--fail", "busbw:5%", "--fail", "time:5%")
    assert code == 0
    deferred = [entry for entry in document["entries"] if entry["verdict"] == NO_FIGURE]
    assert len(deferred) == zero_rows
    assert all(entry["metric"] == "busbw" and entry["why"] == "busbw 0 vs 0; its time entry judges the row"
               for entry in deferred)
    times = [entry for entry in document["entries"] if entry["metric"] == "time"]
    assert len(times) == 62 and all(entry["instead_of"] is None for entry in times)


def test_the_default_suite_holds_one_collective_bench():
    """What a bare `commbench sweep` writes is a suite run that compare pairs with a `commbench perf` run, on a CPU
    machine and on a GPU node alike."""
    for machine in (Machine(gpus=0, nccl_available=False), Machine(gpus=8, nccl_available=True)):
        with warnings.catch_warnings():  # the memory plan, skipped where the machine's memory is not known
            warnings.simplefilter("ignore", CommbenchWarning)
            benches = load_suite("default", machine).benches
        assert [bench.bench.kind.name for bench in benches].count(COLLECTIVE.name) == 1


@pytest.mark.no_process
@pytest.mark.parametrize("suite_first", [True, False], ids=["suite-baseline", "suite-new"])
def test_a_suite_run_is_compared_with_a_single_run_through_its_one_bench(commbench_cli, suite_first):
    suite, single = BASELINE_SET / "launch1", BASELINE_SET / "launch2" / "gate"
    sides = (suite, single) if suite_first else (single, suite)
    code, document = _compare_json(commbench_cli, *sides)
    assert code == 0, document["gate"]
    busbw = [entry for entry in document["entries"] if entry["metric"] == "busbw"]
    assert [entry["row"] for entry in busbw] == ["all_reduce builtin float32 sum in 16 MiB",
                                                 "all_reduce builtin float32 sum in 64 MiB"]
    side = "baseline" if suite_first else "new side"
    assert document["notes"][0] == (f"the {side} {suite} is a suite run: its only collective bench, gate "
                                    f"({suite / 'gate'}), is compared with {single}")


@pytest.mark.no_process
def test_a_run_set_of_suite_runs_is_compared_with_a_single_run(commbench_cli):
    code, document = _compare_json(commbench_cli, BASELINE_SET, BASELINE_SET / "launch1" / "gate")
    assert code == 0, document["gate"]
    assert document["notes"][0].startswith(f"the baseline {BASELINE_SET} is a run set of 5 suite runs: its only "
                                           "collective bench, gate")
    assert {entry["launches"][0] for entry in document["entries"] if entry["metric"] == "busbw"} == {5}


SUITE = """
description = "test: two collective benches and a p2p bench"
backend = "gloo"
device = "cpu"
nproc = 2

[[bench]]
name = "ar"
kind = "sweep"
collective = "all_reduce"
impl = "builtin"
sizes = "4K"
iters = 6
warmup = 1

[[bench]]
name = "ar-again"
kind = "sweep"
collective = "all_reduce"
impl = "builtin"
sizes = "4K"
iters = 6
warmup = 1

[[bench]]
name = "pairs"
kind = "p2p"
sizes = "4K"
iters = 6
warmup = 1
"""


@pytest.mark.distributed
def test_a_suite_with_several_benches_of_the_kind_or_none_is_refused_in_one_line(commbench_cli, tmp_path):
    (tmp_path / "mix.toml").write_text(SUITE)
    completed = commbench_here("run", str(tmp_path / "mix.toml"), "--out", str(tmp_path), "--run-id", "mix", "-q")
    assert completed.returncode == 0, completed.stderr[-2000:]
    mix, single = tmp_path / "mix", BASELINE_SET / "launch1" / "gate"
    for sides in ((mix, single), (single, mix)):
        assert_refused(invoke(["compare", *map(str, sides)]),
                       fragment=f"the suite run {mix} holds 2 collective benches (ar, ar-again) to compare with the "
                                f"single run {single}; pass the one you mean: {mix / 'ar'}, {mix / 'ar-again'}")
    chosen = commbench_cli("compare", str(mix / "ar"), str(single))  # as the refusal says: not refused
    assert chosen.returncode != 2 and chosen.stdout.splitlines()[-1].startswith("# gate: "), chosen.stderr
    nothing = invoke(["compare", str(BASELINE_SET / "launch1"), str(mix / "pairs")])
    assert_refused(nothing, fragment=f"cannot compare the suite run {BASELINE_SET / 'launch1'} with the p2p run "
                                     f"{mix / 'pairs'}: the suite holds no p2p bench (its benches: gate "
                                     "(collective)); compare like with like")
    code, document = _compare_json(commbench_cli, mix, mix / "pairs")  # the suite's only p2p bench
    assert code == 0 and document["notes"][0].startswith(f"the baseline {mix} is a suite run: its only p2p bench, "
                                                         "pairs"), document


@pytest.mark.no_process
def test_a_side_that_does_not_exist_is_refused_with_the_command_that_makes_it(tmp_path):
    shutil.copytree(BASELINE_SET, tmp_path / "results" / "base")
    outcome = invoke(["compare", "results/base", "results/new"], cwd=tmp_path)
    assert_refused(outcome, fragment="results/new does not exist; pass a run folder or a run set, e.g. the one "
                                     "`commbench sweep --launches 3 --out results --run-id new` writes")


@pytest.mark.no_process
def test_two_run_sets_of_suite_runs_compare_across_launches(commbench_cli, tmp_path):
    """The README's sequence: `commbench sweep --launches 3 --run-id base`, the same with `--run-id new`, then
    `commbench compare results/base results/new`. Each side holds real launches of a suite run (cpu-ci's; a bare
    sweep's are the default suite's), laid out as --launches writes them."""
    for side, launches in (("base", (1, 2, 3)), ("new", (3, 4, 5))):
        for index, launch in enumerate(launches, start=1):
            shutil.copytree(BASELINE_SET / f"launch{launch}", tmp_path / side / f"launch{index}")
    code, document = _compare_json(commbench_cli, tmp_path / "base", tmp_path / "new")
    assert code == 0, document["gate"]
    busbw = [entry for entry in document["entries"] if entry["metric"] == "busbw"]
    assert len(busbw) == 3 and all(entry["launches"] == [3, 3] for entry in busbw)  # 2 rows and all rows at once
    assert all(entry["row"].startswith("[gate] ") for entry in busbw)


@pytest.mark.no_process
def test_a_change_of_exactly_the_threshold_is_ok_and_a_p_of_alpha_or_more_is_noise():
    """The gate's rule: ok within the threshold, the threshold itself included; beyond it a regression (or an
    improvement) only where its one-sided p is below 0.01, the gate's alpha."""
    assert verdict(5.0, 5.0, p_worse=0.0, p_better=1.0) == OK
    assert verdict(-5.0, 5.0, p_worse=1.0, p_better=0.0) == OK
    assert verdict(5.01, 5.0, p_worse=0.0, p_better=1.0) == REGRESSION
    assert verdict(-5.01, 5.0, p_worse=1.0, p_better=0.0) == IMPROVED
    assert verdict(20.0, 5.0, p_worse=0.009, p_better=0.991) == REGRESSION
    assert verdict(20.0, 5.0, p_worse=0.02, p_better=0.98) == NOISE
    assert verdict(-20.0, 5.0, p_worse=0.98, p_better=0.02) == NOISE


@pytest.mark.no_process
def test_one_launch_a_side_is_judged_by_one_sided_mann_whitney_p_values():
    """Every new sample above every base sample, 3 against 3: the exact one-sided p that the new side is slower is
    1 / C(6, 3) = 0.05 (one ordering of the six in twenty), and that it is faster 1."""
    metric = Metric("time", "time_us_p50", False, "time_us")
    tested = _single_launch(([0.0], [math.log(2)]), Launches(((math.nan, 0), (math.nan, 0)), 1), metric, 5.0,
                            (2.0, 100.0), ([1.0, 2.0, 3.0], [4.0, 5.0, 6.0]), Floor(5.0, "a test"))
    assert (tested.p_worse, tested.p_better) == pytest.approx((1 / math.comb(6, 3), 1.0))
