"""Run sets (`--launches N`) and the gate on them: N complete launch folders and run_set.json with the launch
noise; a real slowdown recorded as run sets is tested across launches, each row's verdict its test's; two single
launches are never a REGRESSION within the launch-noise floor, and every compared row says the smallest change it
could have detected.

Real sweeps (gloo on CPU, 2 sizes, few iterations): one run set of unchanged code and one with every timed call made
slower by the fault (COMMBENCH_SLOWDOWN_PCT) by far more than any launch noise (FAR_BEYOND_NOISE_PCT); both are
shared by every test, and their launches are the single launches too. They share the machine with the other tests:
each verdict is checked against the test it comes from and the noise measured in the same run, never against a quiet
machine."""

import json
import math
import socket
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from scipy.stats import norm

from commbench import store
from commbench.benches.collective import KIND as COLLECTIVE
from commbench.gate import machine_noise, run_set
from commbench.gate.launch_tests import ALL_ROWS
from commbench.gate.priors import CPU_PRIOR
from commbench.gate.run_set import RUN_SET_FILE
from commbench.gate.verdicts import ALPHA
from tests.conftest import commbench_env
from tests.in_process import commbench_here
from tests.refusals import assert_refused, invoke

SWEEP = ("-c", "all_reduce", "--impl", "builtin", "--sizes", "1M,4M", "--iters", "10", "--warmup", "2",
         "--backend", "gloo", "--device", "cpu")
LAUNCHES = 3
DEFAULT_WORLD = 2
"""The ranks of SWEEP's launches: the default on CPU (gloo, 2 ranks)."""
ROWS = 2
THRESHOLD_PCT = 5.0  # busbw's default
FAR_BEYOND_NOISE_PCT = 2000.0
"""The slowed run set's slowdown: each timed call waits 20x the rank's fastest call, so every slowed row reads far
slower than an unchanged one, even where the other pytest worker's ranks make an unchanged call read several times
its fastest."""


@pytest.fixture(scope="module")
def run_sets(tmp_path_factory) -> dict:
    """"base" and "slow": run sets of LAUNCHES launches; "slow" with every timed call slowed by the fault by
    FAR_BEYOND_NOISE_PCT; "printed": what each command printed; "cache": the machine-facts cache they stored their
    launch noise in (their own: a figure stored in the tests' shared cache would set the floor of other tests' single
    launches)."""
    out = tmp_path_factory.mktemp("run-sets")
    cache = out / "cache"
    printed = {}
    printed["base"] = _record(out, "base", cache)
    slowdown = FAR_BEYOND_NOISE_PCT
    printed["slow"] = _record(out, "slow", cache, COMMBENCH_SLOWDOWN_PCT=f"{slowdown:.0f}")
    return {"base": out / "base", "slow": out / "slow", "printed": printed, "cache": cache, "slowdown_pct": slowdown}


def _record(out: Path, name: str, cache: Path, **env: str) -> str:
    completed = commbench_here("sweep", *SWEEP, "--launches", str(LAUNCHES), "--out", str(out), "--run-id", name,
                               env={"COMMBENCH_CACHE_DIR": str(cache), **env})
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
    return completed.stdout


def _json(commbench_cli, *args):
    outcome = commbench_cli("compare", *map(str, args), "--json")
    return outcome, json.loads(outcome.stdout)


def _busbw(document: dict) -> list[dict]:
    """The per-row busbw entries (not the all-rows one)."""
    entries = [entry for entry in document["entries"]
               if entry["metric"] == "busbw" and not entry["row"].startswith(ALL_ROWS)]
    assert len(entries) == ROWS, document["entries"]
    return entries


def _all_rows(document: dict) -> list[dict]:
    return [entry for entry in document["entries"] if entry["row"].startswith(ALL_ROWS)]


def _geomean_worse_pct(run_sets: dict, row: str) -> float:
    """busbw's worse_pct between the two run sets' geometric means of one row's launch values (run_set.json): the
    change the Welch test decides on, which `detectable` is a bound of (docs/gate.md)."""
    means = []
    for name in ("base", "slow"):
        document = json.loads((run_sets[name] / RUN_SET_FILE).read_text())
        (values,) = [entry["values"] for entry in document["rows"]
                     if entry["row"] == row and entry["metric"] == "busbw"]
        means.append(statistics.fmean(math.log(value) for value in values))
    return -math.expm1(means[1] - means[0]) * 100


def _floor_pct(noise_pct: float, launches: tuple[int, int], rows: int) -> float:
    """The floor as busbw's worse_pct, computed here from its definition (docs/gate.md)."""
    bound = norm.isf(ALPHA / rows) * math.log1p(noise_pct / 100) * math.sqrt(1 / launches[0] + 1 / launches[1])
    return -math.expm1(-bound) * 100


@pytest.mark.distributed
def test_launches_write_complete_launch_folders_and_run_set_json(run_sets):
    for name in ("base", "slow"):
        set_dir = run_sets[name]
        names = [f"launch{index}" for index in range(1, LAUNCHES + 1)]
        assert sorted(path.name for path in set_dir.iterdir()) == [*names, RUN_SET_FILE]
        values = {}
        for launch in names:
            assert store.read_meta(set_dir / launch)["status"] == store.STATUS_COMPLETE
            results = store.read_results(set_dir / launch, COLLECTIVE)
            assert len(results) == ROWS and (results["n_wrong"] == 0).all()
            for size, busbw in zip(results["size_bytes"], results["busbw_gbps"]):
                values.setdefault(int(size), []).append(float(busbw))
        document = json.loads((set_dir / RUN_SET_FILE).read_text())
        assert document["launches"] == names and document["rows_measured"] == ROWS
        assert sorted(sorted(row["values"]) for row in document["rows"]) == sorted(map(sorted, values.values()))
        # the launch noise: the spread of each row's log values around their mean, pooled over the rows
        logs = [[math.log(value) for value in row] for row in values.values()]
        squares = sum((value - statistics.fmean(row)) ** 2 for row in logs for value in row)
        pooled = math.expm1(math.sqrt(squares / (ROWS * (LAUNCHES - 1)))) * 100
        assert document["launch_noise_pct"] == pytest.approx(pooled)
        line = next(line for line in run_sets["printed"][name].splitlines() if line.startswith("# run set "))
        assert line.startswith(f"# run set {set_dir}: {LAUNCHES} launches, launch noise "
                               f"{document['launch_noise_pct']:.1f} %"), line


@pytest.mark.distributed
def test_a_run_set_with_a_real_slowdown_is_judged_across_launches_in_every_row(run_sets, commbench_cli, tmp_path):
    """Each row is tested by Welch's t on the launches at ALPHA / ROWS (Bonferroni), and its verdict is that test's:
    REGRESSION exactly where p is under it. That a slowdown is caught whatever the launch noise is not a property of
    3 launches on a loaded machine (a 1 MiB gloo call reads 0.5 or 5 ms there), so it is held on a quiet machine:
    benchmarks/ci_gate.py, in .ci/run after the suite, fails CI unless an unchanged pair of run sets passes and a
    slowed one fails (docs/gate.md, "CI's gate")."""
    outcome, document = _json(commbench_cli, run_sets["base"], run_sets["slow"])
    assert document["launches"] == {"baseline": LAUNCHES, "new": LAUNCHES}
    verdicts = []
    for entry in _busbw(document):
        assert entry["test"] == "Welch t on launches" and entry["launches"] == [LAUNCHES, LAUNCHES], entry
        assert entry["worse_pct"] > 50, entry  # every call 20x its fastest: far slower in every row, under any load
        assert (entry["verdict"] == "REGRESSION") == (entry["p_value"] < ALPHA / ROWS), entry
        if entry["verdict"] == "REGRESSION":  # Welch decides on the launches' geometric means, not the medians
            assert _geomean_worse_pct(run_sets, entry["row"]) > entry["detectable_pct"] >= THRESHOLD_PCT, entry
        verdicts.append(entry["verdict"])
    (overall,) = _all_rows(document)  # and all rows at once, over the launches' geometric means
    assert overall["row"] == f"{ALL_ROWS}, {ROWS} rows" and overall["launches"] == [LAUNCHES, LAUNCHES], overall
    assert (overall["verdict"] == "REGRESSION") == (overall["p_value"] < ALPHA), overall
    verdicts.append(overall["verdict"])
    assert outcome.returncode == (1 if "REGRESSION" in verdicts else 0), outcome.stdout + outcome.stderr
    text = commbench_cli("compare", str(run_sets["base"]), str(run_sets["slow"]), "--markdown",
                         str(tmp_path / "gate.md"))
    header = text.stdout.splitlines()
    assert " detectable  wide CI verdict" in header[0] and header[1].endswith(" (% of b) (>±10 %)"), header[:2]
    assert "| detectable change (% of baseline) |" in (tmp_path / "gate.md").read_text()
    assert "single launch" not in text.stdout


@pytest.mark.distributed
def test_single_launches_are_never_a_regression_within_the_floor(run_sets, commbench_cli):
    base, slow = run_sets["base"] / "launch1", run_sets["slow"] / "launch1"
    outcome, document = _json(commbench_cli, base, slow, "--launch-noise", "1000")
    assert outcome.returncode == 0, outcome.stdout + outcome.stderr
    assert document["launch_noise"] == {"pct": 1000.0, "source": "--launch-noise"}
    floor = _floor_pct(1000.0, (1, 1), rows=ROWS)
    for entry in _busbw(document):  # many times slower, and still within a floor this wide
        assert entry["worse_pct"] > 50 and entry["verdict"] == "~", entry
        assert entry["detectable_pct"] == entry["floor_pct"] == pytest.approx(floor)
        assert "within the launch-noise floor" in entry["why"] and entry["test"] == "Mann-Whitney U on samples"
    assert any("launch noise from --launch-noise" in note for note in document["notes"])
    # without a floor the samples decide, and they see the slowdown
    outcome, document = _json(commbench_cli, base, slow, "--launch-noise", "0")
    assert outcome.returncode == 1 and any(entry["verdict"] == "REGRESSION" for entry in _busbw(document))
    assert all(entry["detectable_pct"] == THRESHOLD_PCT for entry in _busbw(document))


@pytest.mark.distributed
def test_the_floor_comes_from_a_run_set_else_the_machine_else_the_prior(run_sets, commbench_cli, monkeypatch,
                                                                         tmp_path):
    stored = json.loads((run_sets["base"] / RUN_SET_FILE).read_text())["launch_noise_pct"]
    _, document = _json(commbench_cli, run_sets["base"], run_sets["slow"] / "launch1")
    assert document["launch_noise"]["pct"] == pytest.approx(stored)
    assert str(run_sets["base"] / RUN_SET_FILE) in document["launch_noise"]["source"]
    for entry in _busbw(document):
        assert entry["launches"] == [LAUNCHES, 1] and entry["test"] != "Welch t on launches"
        assert entry["detectable_pct"] == pytest.approx(max(THRESHOLD_PCT, _floor_pct(stored, (LAUNCHES, 1), ROWS)))
    single = (run_sets["base"] / "launch1", run_sets["base"] / "launch2")
    monkeypatch.setenv("COMMBENCH_CACHE_DIR", str(tmp_path / "empty-cache"))  # nothing measured for this machine
    _, document = _json(commbench_cli, *single)
    assert document["launch_noise"]["pct"] == CPU_PRIOR.noise_pct
    assert document["launch_noise"]["source"].startswith(CPU_PRIOR.source), document["launch_noise"]
    monkeypatch.setenv("COMMBENCH_CACHE_DIR", str(run_sets["cache"]))  # where the two run sets kept theirs
    _, document = _json(commbench_cli, *single)
    machine = machine_noise.stored(machine_noise.Key(socket.gethostname(), "gloo", "cpu", DEFAULT_WORLD))
    assert machine is not None and machine.run_sets == 2 and machine.df == 2 * ROWS * (LAUNCHES - 1)
    assert document["launch_noise"] == {"pct": pytest.approx(machine.noise_pct), "source": machine.source}
    both = [run_set.log_spread(json.loads((run_sets[name] / RUN_SET_FILE).read_text())["launch_noise_pct"])
            for name in ("base", "slow")]  # pooled over the two run sets, each with the same degrees of freedom
    assert machine.noise_pct == pytest.approx(run_set.spread_pct(math.sqrt(statistics.fmean(sd ** 2 for sd in both))))
    for entry in _busbw(document):
        assert entry["verdict"] != "REGRESSION" or abs(entry["worse_pct"]) > entry["detectable_pct"], entry


@pytest.mark.distributed
def test_a_run_set_keeps_its_launch_noise_as_a_fact_of_the_machine_and_env_shows_it(run_sets, monkeypatch):
    for name in ("base", "slow"):
        line = next(line for line in run_sets["printed"][name].splitlines() if line.startswith("# run set "))
        assert line.endswith(f"; added to this machine's launch noise for gloo on cpu, {DEFAULT_WORLD} ranks "
                             "(commbench env)"), line
    shown = commbench_here("env", env={"COMMBENCH_CACHE_DIR": str(run_sets["cache"])})
    monkeypatch.setenv("COMMBENCH_CACHE_DIR", str(run_sets["cache"]))
    machine = machine_noise.stored(machine_noise.Key(socket.gethostname(), "gloo", "cpu", DEFAULT_WORLD))
    assert machine is not None
    assert machine_noise.stored(machine_noise.Key(socket.gethostname(), "gloo", "cpu", DEFAULT_WORLD + 1)) is None
    assert f"launch noise, gloo on cpu, {DEFAULT_WORLD} ranks: {machine.noise_pct:.1f} % over 2 run sets" \
        in shown.stdout, shown.stdout
    document = json.loads(commbench_here("env", "--json", env={"COMMBENCH_CACHE_DIR": str(run_sets["cache"])}).stdout)
    (kept,) = document["launch_noise"]
    assert (kept["backend"], kept["device"], kept["world"], kept["run_sets"]) == ("gloo", "cpu", DEFAULT_WORLD, 2)
    assert kept["pct"] == pytest.approx(machine.noise_pct)


@pytest.mark.no_process
def test_the_launch_spread_is_pooled_over_rows_with_n_minus_one_degrees_of_freedom_each():
    """The pooled sd: Σ (n_i − 1)·s_i² / Σ (n_i − 1), s_i² each row's sample variance; a row of one launch adds
    nothing."""
    rows = [[1.0, 2.0, 3.0], [4.0, 6.0], [9.0]]
    df = sum(len(row) - 1 for row in rows)
    pooled = math.sqrt(sum((len(row) - 1) * statistics.variance(row) for row in rows if len(row) > 1) / df)
    assert run_set.pooled_log_sd(rows) == (pytest.approx(pooled), 3)
    assert pooled == pytest.approx(math.sqrt(4 / 3))


@pytest.mark.no_process
def test_bad_launches_and_launch_noise_are_refused_in_one_line(tmp_path):
    for args, fragment in ((["sweep", *SWEEP, "--launches", "0"], "--launches"),
                           (["perf", "all_reduce", "--launches", "-1"], "--launches"),
                           (["run", "cpu-ci", "--launches", "two"], "--launches"),
                           (["run", "cpu-ci", "--launches", "2", "--into", str(tmp_path)], "with --into"),
                           (["compare", str(tmp_path), str(tmp_path), "--launch-noise", "-5"], "--launch-noise"),
                           (["compare", str(tmp_path), str(tmp_path), "--launch-noise", "nan"], "--launch-noise")):
        assert_refused(invoke([*args, "--out", str(tmp_path / "out")] if args[0] != "compare" else args),
                       fragment=fragment, left_empty=[tmp_path / "out"])


@pytest.mark.distributed
def test_launches_inside_a_job_are_refused(tmp_path):
    """Inside torchrun every rank is one launch, the job's: N launches cannot be made from there."""
    job = commbench_env(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT="29555")
    completed = subprocess.run([sys.executable, "-m", "commbench", "sweep", *SWEEP, "--launches", "2", "--out",
                                str(tmp_path / "out")], env=job, capture_output=True, text=True, timeout=120)
    assert completed.returncode == 2 and completed.stderr.count("\n") == 1, completed.stderr
    assert "--launches 2 inside torchrun or srun" in completed.stderr and not (tmp_path / "out").exists()
