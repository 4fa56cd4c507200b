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
from gpu_validation import BUDGET_S, SHARED_TRACE, STEPS  # noqa: E402

CHECKED_STEPS = ("probes", "sweep-batch", "gloo-cuda-profile", "trace-analyze", "ddp-world1", "selftest", "replay")
"""The steps whose CPU stand-ins the test runs: one per check function of the script (the other steps run the same
check on another command: per-iteration timing, FSDP, ZeRO, DDP with gloo on CUDA tensors, each run by its own tests
on CPU), which keeps CI within its 12 minutes. `benchmarks/gpu_validation.py --dry-run` runs every step."""


def test_the_dry_run_prints_the_plan_and_every_cpu_stand_in_passes(tmp_path):
    outcomes_file = tmp_path / "outcomes.json"
    run = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--out", str(tmp_path / "out"), "--json",
                          str(outcomes_file), "--only", ",".join(CHECKED_STEPS)], capture_output=True, text=True,
                         timeout=900, cwd=ROOT)
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


def test_every_step_has_a_timeout_and_together_they_fit_8_minutes_on_one_gpu():
    assert all(step.timeout_s > 0 for step in STEPS)
    assert sum(step.timeout_s for step in STEPS) <= BUDGET_S <= 9 * 60


def test_without_a_gpu_a_real_run_is_refused_with_the_way_out(tmp_path):
    run = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path)], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    if "no CUDA GPU" not in run.stderr:
        pytest.skip("a GPU is visible here: the real run is benchmarks/gpu_validation.py itself")
    assert run.returncode == 2 and "--dry-run" in run.stderr


def test_an_unknown_step_is_refused_naming_the_steps():
    run = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--only", "nope"], capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    assert run.returncode == 2 and "nope" in run.stderr and "sweep-batch" in run.stderr
