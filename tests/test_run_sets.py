"""Run sets (`--launches N`) and the gate on them: N complete launch folders and run_set.json with the launch
noise; a real slowdown recorded as run sets is a REGRESSION, tested across launches; two single launches are never a
REGRESSION within the launch-noise floor, and every compared row says the smallest change it could have detected.

Real sweeps (gloo on CPU, 2 sizes, few iterations): one run set of unchanged code and one with every timed call made
slower by the fault (COMMBENCH_SLOWDOWN_PCT), by as much as the first run set's measured launch noise says every row
needs; both are shared by every test, and their launches are the single launches too."""

import json
import math
import socket
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from scipy.stats import norm
from scipy.stats import t as student_t

from commbench import store
from commbench.benches.collective import KIND as COLLECTIVE
from commbench.gate import launch_values, machine_noise, run_set
from commbench.gate.launch_tests import ALL_ROWS
from commbench.gate.priors import CPU_PRIOR
from commbench.gate.run_set import RUN_SET_FILE
from commbench.gate.verdicts import ALPHA
from tests.conftest import commbench_env, machine_share
from tests.refusals import assert_refused, invoke

SWEEP = ("-c", "all_reduce", "--impl", "builtin", "--sizes", "1M,4M", "--iters", "10", "--warmup", "2",
         "--backend", "gloo", "--device", "cpu")
LAUNCHES = 3
ROWS = 2
THRESHOLD_PCT = 5.0  # busbw's default
SLOW_SIDE_SPREAD = 2.0
"""How much wider than the unchanged run set's launch spread the slowed run set's is allowed to be when the slowdown
is chosen. The slowdown fault waits a fixed share of the rank's fastest call so far, so once the wait dominates, a
slowed launch scatters as that fastest call does, not as its median: narrower than the unchanged launches, not wider;
twice as wide is the margin."""


def slowdown_pct_for(base: Path) -> float:
    """The COMMBENCH_SLOWDOWN_PCT that makes every row of the run set at base a REGRESSION, from that run set's own
    launches. Each row is tested by Welch's t on the launches' log busbw at ALPHA / ROWS, each side's spread the
    rows' pooled one or the row's own, whichever is wider; at worst both sides use their own (n - 1 = 2 degrees of
    freedom each, Welch's df >= 2). So a row needs a log change of t(ALPHA / ROWS, df 2) * sqrt(sd_base^2 / n +
    sd_slow^2 / n), with sd_slow up to SLOW_SIDE_SPREAD * sd_base. The fault adds P % of the rank's fastest call, and
    a row's median is up to p50/min times that call, so the row's time grows by at least 1 + P / 100 / (p50/min):
    P = (exp(needed) - 1) * (the largest p50/min of the base's rows) * 100."""
    values = launch_values.launch_values(base)
    logs = [run_set.log_values(row) for (_, metric), row in values.items() if metric == "busbw"]
    pooled, _ = run_set.pooled_log_sd(logs)
    t_needed = student_t.isf(ALPHA / ROWS, 2)
    needed = max(t_needed * max(pooled, statistics.stdev(row)) * math.sqrt((1 + SLOW_SIDE_SPREAD ** 2) / LAUNCHES)
                 for row in logs)
    tails = [float(p50) / float(fastest) for launch in sorted(base.glob("launch*"))
             for p50, fastest in store.read_results(launch, COLLECTIVE)[["time_us_p50", "time_us_min"]].values]
    return math.expm1(needed) * max(tails) * 100


@pytest.fixture(scope="module")
def run_sets(tmp_path_factory) -> dict:
    """"base" and "slow": run sets of LAUNCHES launches; "slow" with every timed call slowed by the fault, by as much
    as base's measured launch noise says a row needs (slowdown_pct_for); "printed": what each command printed;
    "cache": the machine-facts cache they stored their launch noise in (their own: a figure stored in the tests'
    shared cache would set the floor of other tests' single launches)."""
    out = tmp_path_factory.mktemp("run-sets")
    cache = out / "cache"
    printed = {}
    with machine_share(exclusive=True):  # their launch-to-launch spread is what the gate tests: no other test beside
        printed["base"] = _record(out, "base", cache)
        slowdown = slowdown_pct_for(out / "base")
        printed["slow"] = _record(out, "slow", cache, COMMBENCH_SLOWDOWN_PCT=f"{slowdown:.0f}")
    return {"base": out / "base", "slow": out / "slow", "printed": printed, "cache": cache, "slowdown_pct": slowdown}


def _record(out: Path, name: str, cache: Path, **env: str) -> str:
    completed = subprocess.run([sys.executable, "-m", "commbench", "sweep", *SWEEP, "--launches", str(LAUNCHES),
                                "--out", str(out), "--run-id", name],
                               env=commbench_env(COMMBENCH_CACHE_DIR=str(cache), **env), capture_output=True,
                               text=True, timeout=600)
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
def test_a_run_set_with_a_real_slowdown_is_a_regression_in_every_row(run_sets, commbench_cli, tmp_path):
    outcome, document = _json(commbench_cli, run_sets["base"], run_sets["slow"])
    assert outcome.returncode == 1, outcome.stdout + outcome.stderr
    assert document["launches"] == {"baseline": LAUNCHES, "new": LAUNCHES}
    for entry in _busbw(document):  # each row tested at ALPHA / ROWS (Bonferroni), against its launches' noise
        assert entry["test"] == "Welch t on launches" and entry["launches"] == [LAUNCHES, LAUNCHES], entry
        assert entry["verdict"] == "REGRESSION", (entry, run_sets["slowdown_pct"])
        assert entry["p_value"] < ALPHA / ROWS and entry["worse_pct"] > entry["detectable_pct"] >= THRESHOLD_PCT
    (overall,) = _all_rows(document)  # and all rows at once, over the launches' geometric means
    assert overall["verdict"] == "REGRESSION" and overall["row"] == f"{ALL_ROWS}, {ROWS} rows", overall
    assert overall["p_value"] < ALPHA and overall["launches"] == [LAUNCHES, LAUNCHES]
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
    machine = machine_noise.stored(machine_noise.Key(socket.gethostname(), "gloo", "cpu"))
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
        assert line.endswith("; added to this machine's launch noise for gloo on cpu (commbench env)"), line
    shown = subprocess.run([sys.executable, "-m", "commbench", "env"], capture_output=True, text=True, timeout=120,
                           env=commbench_env(COMMBENCH_CACHE_DIR=str(run_sets["cache"])))
    monkeypatch.setenv("COMMBENCH_CACHE_DIR", str(run_sets["cache"]))
    machine = machine_noise.stored(machine_noise.Key(socket.gethostname(), "gloo", "cpu"))
    assert machine is not None
    assert f"launch noise, gloo on cpu: {machine.noise_pct:.1f} % over 2 run sets" in shown.stdout, shown.stdout
    document = json.loads(subprocess.run([sys.executable, "-m", "commbench", "env", "--json"], capture_output=True,
                                         text=True, timeout=120,
                                         env=commbench_env(COMMBENCH_CACHE_DIR=str(run_sets["cache"]))).stdout)
    (kept,) = document["launch_noise"]
    assert (kept["backend"], kept["device"], kept["run_sets"]) == ("gloo", "cpu", 2)
    assert kept["pct"] == pytest.approx(machine.noise_pct)


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
