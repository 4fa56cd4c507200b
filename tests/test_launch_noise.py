"""Launch noise as a fact of the machine (gate/machine_noise.py): where a side of `commbench compare` is a single
launch, its floor takes --launch-noise, else a run set side's, else the figure stored for the machine that recorded
the new side, else the prior for its device (GPU: a few per cent; CPU: a shared 2-core VM's measured figure), and the
note names the figure and its source. (Run sets storing their figure, and `commbench env` showing it, are tested with
real run sets in test_run_sets.py.)

The slowed sides are copies of real runs with every time multiplied (and every bandwidth divided) by one factor:
what a uniformly slower machine or library would record."""

import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest

from commbench import store
from commbench.gate import machine_noise, priors, run_set
from commbench.gate.verdicts import ALPHA
from tests.in_process import commbench_here

NCCL_TESTS_H100 = Path(__file__).parent / "data" / "imports" / "nccl-tests" / "h100_2node_16rank_all_reduce.txt"
SWEEP = ("sweep", "-c", "all_reduce", "--impl", "builtin", "--sizes", "1M,4M", "--iters", "30", "--warmup", "2",
         "--backend", "gloo", "--device", "cpu")
"""30 samples a point: beyond the floor, the samples' Mann-Whitney test decides, and a launch's samples on a busy
2-core machine spread over more than a factor of 2 (10 samples left one of two rows of a doubled copy at p > 0.01)."""
TIME_COLUMNS = ("time_us",)
"""Columns holding a time (results' time_us_p50, _min, ...; samples' time_us) are those starting so."""


def slowed_copy(run: Path, to: Path, factor: float) -> Path:
    """A copy of the run with every time multiplied by factor and every bandwidth divided by it."""
    shutil.copytree(run, to)
    for name in (store.RESULTS_FILE, store.SAMPLES_FILE):
        path = to / name
        if not path.exists():
            continue
        frame = pd.read_csv(path)
        for column in frame.columns:
            if column.startswith(TIME_COLUMNS) and pd.api.types.is_numeric_dtype(frame[column]):
                frame[column] = frame[column] * factor
            elif column.endswith("_gbps") and pd.api.types.is_numeric_dtype(frame[column]):
                frame[column] = frame[column] / factor
        frame.to_csv(path, index=False)
    return to


@pytest.fixture(scope="module")
def gloo_run(tmp_path_factory) -> Path:
    """One real gloo sweep (2 ranks on CPU, two sizes)."""
    out = tmp_path_factory.mktemp("gloo-run")
    completed = commbench_here(*SWEEP, "--out", str(out), "--run-id", "one", "--quiet")
    assert completed.returncode == 0, completed.stderr[-2000:]
    return out / "one"


@pytest.fixture
def own_cache(tmp_path, monkeypatch) -> Path:
    """An empty machine-facts cache for this test (the tests' shared one may hold what another test measured)."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("COMMBENCH_CACHE_DIR", str(cache))
    return cache


def _compare(commbench_cli, base: Path, new: Path, *options: str) -> tuple[int, dict, str]:
    outcome = commbench_cli("compare", str(base), str(new), "--json", *options)
    text = commbench_cli("compare", str(base), str(new), *options).stdout
    return outcome.returncode, json.loads(outcome.stdout), text


def _verdicts(document: dict) -> set[str]:
    return {entry["verdict"] for entry in document["entries"] if entry.get("metric") == "busbw"}


@pytest.mark.no_process
def test_imported_nccl_tests_logs_one_half_slower_are_a_regression_at_the_gpu_prior(commbench_cli, tmp_path,
                                                                                       own_cache):
    """nccl-tests' rows say nccl on cuda: with nothing measured, the floor takes the GPU prior, not the CPU one, and
    a 1.5x slower copy of a real H100 log is a regression at every size with a figure."""
    outcome = commbench_cli("import", "nccl-tests", str(NCCL_TESTS_H100), "--out", str(tmp_path), "--run-id", "h100")
    assert outcome.returncode == 0, outcome.stderr
    slow = slowed_copy(tmp_path / "h100", tmp_path / "slow", 1.5)
    code, document, text = _compare(commbench_cli, tmp_path / "h100", slow)
    assert code == 1 and _verdicts(document) - {"no figure"} == {"REGRESSION"}, _verdicts(document)
    assert document["launch_noise"]["pct"] == priors.GPU_PRIOR.noise_pct != priors.CPU_PRIOR.noise_pct
    assert document["launch_noise"]["source"].startswith(priors.GPU_PRIOR.source)
    source = document["launch_noise"]["source"]
    assert "(nccl on cuda, " in source and " ranks on ztan-mig-235z: no launch noise stored for it here" in source
    notes = " ".join(line.removeprefix("#").strip() for line in text.splitlines() if line.startswith("#"))
    assert f"The floor takes {priors.GPU_PRIOR.noise_pct:.1f} % launch noise from the prior for GPU ranks" \
        in notes, notes


@pytest.mark.distributed
def test_a_doubled_run_is_a_regression_at_a_measured_launch_noise_of_3_pct(gloo_run, commbench_cli, tmp_path,
                                                                            own_cache):
    doubled = slowed_copy(gloo_run, tmp_path / "doubled", 2.0)
    code, document, _ = _compare(commbench_cli, gloo_run, doubled)  # nothing stored: the CPU prior, deaf to 2x
    assert code == 0 and document["launch_noise"]["pct"] == priors.CPU_PRIOR.noise_pct
    assert _verdicts(document) == {"~"}, _verdicts(document)
    deaf = {entry["row"]: entry for entry in document["entries"] if entry.get("metric") == "busbw"}
    code, document, _ = _compare(commbench_cli, gloo_run, doubled, "--launch-noise", "3")
    heard = {entry["row"]: entry for entry in document["entries"] if entry.get("metric") == "busbw"}
    # beyond the 3 % floor the samples' test decides each row, on the same samples as under the prior: a row whose
    # doubled samples stand out (p < alpha) is a regression now and was noise under the prior. On a loaded machine a
    # point's samples can spread over more than 2x, and then its doubled copy is rightly noise at any floor.
    flipped = [row for row, entry in heard.items() if entry["p_value"] < ALPHA]
    assert flipped, heard  # 30 samples a point: a doubled copy stands out in a row at least
    for row, entry in heard.items():
        assert entry["p_value"] == deaf[row]["p_value"], row
        assert entry["verdict"] == ("REGRESSION" if row in flipped else "~"), entry
    assert code == 1
    meta = store.read_meta(gloo_run)
    other_world = machine_noise.Key(meta["launcher_host"], "gloo", "cpu", meta["world_size"] + 1)
    machine_noise.record(other_world, run_set.log_spread(3.0), df=8, run_set_dir=tmp_path / "a-run-set")
    code, document, _ = _compare(commbench_cli, gloo_run, doubled)  # another world size's figure is not this one's
    assert document["launch_noise"]["pct"] == priors.CPU_PRIOR.noise_pct
    key = machine_noise.Key(meta["launcher_host"], "gloo", "cpu", meta["world_size"])
    machine_noise.record(key, run_set.log_spread(3.0), df=8, run_set_dir=tmp_path / "a-run-set")
    code, document, text = _compare(commbench_cli, gloo_run, doubled)
    assert code == 1 and _verdicts(document) == {"REGRESSION"}, document["entries"]
    assert document["launch_noise"]["pct"] == pytest.approx(3.0)
    assert document["launch_noise"]["source"] == machine_noise.stored(key).source
    assert f"the launch noise stored for {key.host} (gloo on cpu, {meta['world_size']} ranks)" in " ".join(text.split())


@pytest.mark.no_process
def test_the_stored_figure_pools_the_latest_run_sets_by_their_degrees_of_freedom(own_cache, tmp_path):
    key = machine_noise.Key("node-a", "nccl", "cuda", 8)
    assert machine_noise.stored(key) is None
    figures = [(2.0, 4), (6.0, 12)]
    for pct, df in figures:
        machine_noise.record(key, run_set.log_spread(pct), df, run_set_dir=tmp_path)
    stored = machine_noise.stored(key)
    pooled = math.sqrt(sum(run_set.log_spread(pct) ** 2 * df for pct, df in figures) / 16)
    assert stored.noise_pct == pytest.approx(run_set.spread_pct(pooled)) and (stored.run_sets, stored.df) == (2, 16)
    for _ in range(machine_noise.KEPT):  # only the latest KEPT count
        machine_noise.record(key, run_set.log_spread(1.0), 4, run_set_dir=tmp_path)
    assert machine_noise.stored(key).noise_pct == pytest.approx(1.0)
    assert machine_noise.stored(machine_noise.Key("node-a", "gloo", "cpu", 8)) is None  # per backend and device
    assert machine_noise.stored(machine_noise.Key("node-a", "nccl", "cuda", 1)) is None  # per world size
    assert machine_noise.stored(machine_noise.Key("node-b", "nccl", "cuda", 8)) is None  # and per host
    assert [noise.key for noise in machine_noise.stored_here("node-a")] == [key]


@pytest.mark.no_process
def test_a_damaged_cache_file_reads_as_nothing_stored_and_the_next_run_set_replaces_it(own_cache, tmp_path):
    key = machine_noise.Key("node-a", "gloo", "cpu")
    own_cache.mkdir()
    (own_cache / "launch-noise-node-a.json").write_text("{not json")
    assert machine_noise.stored(key) is None
    machine_noise.record(key, run_set.log_spread(10.0), 4, run_set_dir=tmp_path)
    assert machine_noise.stored(key).noise_pct == pytest.approx(10.0)


@pytest.mark.no_process
def test_priors_by_device_say_where_they_come_from(monkeypatch):
    assert priors.prior("cuda") is priors.GPU_PRIOR and priors.GPU_PRIOR.noise_pct <= 10
    assert priors.prior("cpu") is priors.CPU_PRIOR
    assert priors.prior("cpu", "gloo", 2) is priors.MEASURED[("gloo", "cpu", 2)]
    measured_h100 = priors.Prior(2.0, "a GPU run set at world 1")
    monkeypatch.setitem(priors.MEASURED, ("nccl", "cuda", 1), measured_h100)
    assert priors.prior("cuda", "nccl", 1) is measured_h100
    assert priors.prior("cuda", "nccl", 8) is priors.GPU_PRIOR  # a world size no measurement covers
    assert priors.prior("xpu") is priors.CPU_PRIOR  # no prior of its own: the widest
    assert "docs/measurements.md" in priors.CPU_PRIOR.source
    assert "not yet measured on a GPU" in priors.GPU_PRIOR.source


@pytest.mark.no_process
def test_a_run_set_of_fewer_launches_than_the_minimum_keeps_no_launch_noise(tmp_path):
    """Two launches give one degree of freedom per row: too few for a machine's launch noise, so nothing is kept
    (and nothing read)."""
    from commbench.gate import noise_record

    assert machine_noise.MIN_LAUNCHES == 3
    assert noise_record.record_run_set(tmp_path / "absent", 2) == []
