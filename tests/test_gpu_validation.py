"""benchmarks/gpu_validation.py --dry-run: the GPU check's plan, and every step's CPU stand-in run with the checks
the GPU run uses (the script cannot fail for a reason of its own the first time a GPU is at hand)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gpu_validation.py"

pytestmark = pytest.mark.distributed

sys.path.insert(0, str(ROOT / "benchmarks"))
from gpu_validation import BUDGET_S, MARKER, SHARED_TRACE, STEPS, TIMEOUT_FACTOR, fresh_out  # noqa: E402

CHECKED_STEPS = ("probes", "sweep-per-iteration", "gloo-cuda-profile", "trace-analyze", "ddp-gloo-cuda", "replay")
"""The steps whose CPU stand-ins the test runs: one per check function of the script (fsdp-world1 runs
ddp-gloo-cuda's check on another command, run by its own tests on CPU; vs-nccl-tests' dry run and its check run in
tests/test_vs_nccl_tests.py; selftest's check is exit_0, which every check here calls first, and its stand-in,
`commbench selftest --backend gloo --device cpu --nproc 2 --only sweep`, is what tests/test_selftest.py runs: the
fault run with `--only sweep` at the default 2 CPU ranks, the full run every step, each passing path asserted; run
here too it took 16 s of CI's 12 minutes), which keeps CI within them. `benchmarks/gpu_validation.py --dry-run` runs
every step."""


def test_the_dry_run_prints_the_plan_and_every_cpu_stand_in_passes_and_reruns_in_place(tmp_path):
    outcomes_file = tmp_path / "outcomes.json"
    command = [sys.executable, str(SCRIPT), "--dry-run", "--out", str(tmp_path / "out"), "--json", str(outcomes_file),
               "--archive", str(tmp_path / "archive"), "--commit", "abc1234", "--only", ",".join(CHECKED_STEPS)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=ROOT)
    plan = run.stdout.split("\n| step |")[0]
    for step in STEPS:  # the plan names each step it runs with its timeout and its command
        assert (f"- {step.name} [{step.timeout_s} s]" in plan) == (step.name in CHECKED_STEPS), step.name
    outcomes = {outcome["step"]: outcome for outcome in json.loads(outcomes_file.read_text())}
    assert list(outcomes) == [step.name for step in STEPS if step.name in CHECKED_STEPS]
    failed = {name: outcome["detail"] for name, outcome in outcomes.items() if outcome["verdict"] == "FAIL"}
    if not SHARED_TRACE.exists():  # a clone without ../shared: the replay's input is absent, and says so
        assert "absent" in failed.pop("replay", "absent")
    assert not failed, failed
    assert all(outcome["mode"] == "CPU stand-in" for outcome in outcomes.values())
    assert run.returncode == (0 if SHARED_TRACE.exists() else 1), run.stderr
    assert "| step | mode | seconds | result | detail |" in run.stdout
    # one JSON and the compared texts, in a folder named by machine, date and commit
    [archived] = (tmp_path / "archive").iterdir()
    assert archived.name.startswith("cpu-stand-in-") and archived.name.endswith("-abc1234")
    document = json.loads((archived / "gpu_validation.json").read_text())
    assert document["commit"] == "abc1234" and [o["step"] for o in document["outcomes"]] == list(outcomes)
    assert document["probes"]["torch"] and document["gpu"] is False


def test_a_second_run_in_the_same_out_folder_starts_from_an_empty_one_and_a_foreign_folder_is_refused(tmp_path):
    """The earlier run's folders (their run ids) would refuse every step ("... already exists; choose another
    --run-id"): the script empties the folder it wrote (it holds the marker), and never one it did not."""
    out = tmp_path / "out"
    fresh_out(out)
    (out / "sweep-per-iteration").mkdir()  # what a first run leaves
    fresh_out(out)
    assert sorted(path.name for path in out.iterdir()) == [MARKER]
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    with pytest.raises(SystemExit, match="did not write"):
        fresh_out(foreign)
    assert (foreign / "keep.txt").read_text() == "mine"


def test_every_step_has_a_timeout_of_one_and_a_half_its_time_and_together_they_fit_9_minutes_on_one_gpu():
    # timeouts are 1.5 × the time a step took on a GPU; the budget is on those times: 9 minutes of GPU time less the
    # machine's start (a hung step costs at most half its time again)
    assert all(step.timeout_s >= TIMEOUT_FACTOR * step.expected_s > 0 for step in STEPS)
    assert sum(step.expected_s for step in STEPS) <= BUDGET_S < 9 * 60


def test_without_a_gpu_a_real_run_is_refused_with_the_way_out(tmp_path):
    run = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path)], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    if "no CUDA GPU" not in run.stderr:
        pytest.skip("a GPU is visible here: the real run is benchmarks/gpu_validation.py itself")
    assert run.returncode == 2 and "--dry-run" in run.stderr


def test_an_unknown_step_is_refused_naming_the_steps():
    run = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--only", "nope"], capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    assert run.returncode == 2 and "nope" in run.stderr and "vs-nccl-tests" in run.stderr
