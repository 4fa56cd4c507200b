"""Run sets (`--launches N`) and the gate on them: N complete launch folders and run_set.json with the launch
noise; a real slowdown recorded as run sets is a REGRESSION, tested across launches; two single launches are never a
REGRESSION within the launch-noise floor, and every compared row says the smallest change it could have detected.

Real sweeps (gloo on CPU, 2 sizes, few iterations): one run set of unchanged code and one with every timed call made
COMMBENCH_SLOWDOWN_PCT slower, shared by every test; their launches are the single launches too."""

import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from scipy.stats import norm

from commbench import store
from commbench.benches.collective import KIND as COLLECTIVE
from commbench.gate.compare import ALL_ROWS, ALPHA
from commbench.gate.run_set import DEFAULT_LAUNCH_NOISE_PCT, RUN_SET_FILE
from tests.conftest import commbench_env, machine_share
from tests.refusals import assert_refused, invoke

SWEEP = ("-c", "all_reduce", "--impl", "builtin", "--sizes", "1M,4M", "--iters", "10", "--warmup", "2",
         "--backend", "gloo", "--device", "cpu")
LAUNCHES = 3
SLOWDOWN_PCT = "900"
"""Every timed call ten times as long as this rank's fastest: beyond the launch noise of a shared 2-core machine. The
sizes are where that noise is smallest: there, launches of one sweep differed by 30 % at 1-4 MiB, and by a factor of 4
at 64 KiB (gloo's small messages are bimodal)."""
ROWS = 2
THRESHOLD_PCT = 5.0  # busbw's default


@pytest.fixture(scope="module")
def run_sets(tmp_path_factory) -> dict[str, Path]:
    """"base" and "slow": run sets of LAUNCHES launches (what the command printed is in .stdout of the dict's
    "printed")."""
    out = tmp_path_factory.mktemp("run-sets")
    printed = {}
    with machine_share(exclusive=True):  # their launch-to-launch spread is what the gate tests: no other test beside
        for name, env in (("base", {}), ("slow", {"COMMBENCH_SLOWDOWN_PCT": SLOWDOWN_PCT})):
            completed = subprocess.run([sys.executable, "-m", "commbench", "sweep", *SWEEP, "--launches",
                                        str(LAUNCHES), "--out", str(out), "--run-id", name],
                                       env=commbench_env(**env), capture_output=True, text=True, timeout=600)
            assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
            printed[name] = completed.stdout
    return {"base": out / "base", "slow": out / "slow", "printed": printed}


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
def test_a_run_set_with_a_real_slowdown_is_a_regression(run_sets, commbench_cli, tmp_path):
    outcome, document = _json(commbench_cli, run_sets["base"], run_sets["slow"])
    assert outcome.returncode == 1, outcome.stdout + outcome.stderr
    assert document["launches"] == {"baseline": LAUNCHES, "new": LAUNCHES}
    for entry in _busbw(document):  # each row tested at ALPHA / rows (Bonferroni), against its launches' noise
        assert entry["test"] == "Welch t on launches" and entry["launches"] == [LAUNCHES, LAUNCHES], entry
        assert entry["worse_pct"] > THRESHOLD_PCT and entry["verdict"] in ("REGRESSION", "~"), entry
        # a row is a regression exactly when its change is past what it could detect (a row whose 3 launches
        # scatter widely, as small messages do under load, is `~`, and says how much it would have needed)
        assert (entry["verdict"] == "REGRESSION") == (entry["p_value"] < ALPHA / ROWS), entry
        assert entry["detectable_pct"] >= THRESHOLD_PCT, entry
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
def test_the_floor_comes_from_the_other_sides_run_set_else_the_default(run_sets, commbench_cli):
    stored = json.loads((run_sets["base"] / RUN_SET_FILE).read_text())["launch_noise_pct"]
    _, document = _json(commbench_cli, run_sets["base"], run_sets["slow"] / "launch1")
    assert document["launch_noise"]["pct"] == pytest.approx(stored)
    assert str(run_sets["base"] / RUN_SET_FILE) in document["launch_noise"]["source"]
    for entry in _busbw(document):
        assert entry["launches"] == [LAUNCHES, 1] and entry["test"] != "Welch t on launches"
        assert entry["detectable_pct"] == pytest.approx(max(THRESHOLD_PCT, _floor_pct(stored, (LAUNCHES, 1), ROWS)))
    _, document = _json(commbench_cli, run_sets["base"] / "launch1", run_sets["base"] / "launch2")
    assert document["launch_noise"]["pct"] == DEFAULT_LAUNCH_NOISE_PCT
    assert document["launch_noise"]["source"].startswith("the default")
    for entry in _busbw(document):
        assert entry["verdict"] != "REGRESSION" or abs(entry["worse_pct"]) > entry["detectable_pct"], entry


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
