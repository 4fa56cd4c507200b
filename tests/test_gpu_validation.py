"""benchmarks/gpu_validation.py: the GPU check's plan and its estimate of device time on one GPU and on 8, every
step's CPU stand-in run with the checks the GPU run uses (the script cannot fail for a reason of its own the first
time a GPU is at hand), a step past its timeout, and the archive a node's run leaves."""

import json
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gpu_validation.py"
H200_1 = ROOT / "tests" / "data" / "gpu" / "h200-1"

sys.path.insert(0, str(ROOT / "benchmarks"))
from gpu_check_archive import archive, gpu_model  # noqa: E402
from gpu_check_context import Context, Step, exit_0, one_rank  # noqa: E402
from gpu_check_plan import (  # noqa: E402
    MACHINE_START_S,
    Estimate,
    binaries_lines,
    estimate_lines,
    plan_line,
    planned,
)
from gpu_check_run import MARKER, fresh_out, run_all  # noqa: E402
from gpu_check_steps import FACT_FILES, SHARED_TRACE, STEPS, compared_collectives  # noqa: E402
from process_group import TERM_GRACE_S  # noqa: E402

CHECKED_STEPS = ("probes", "node-facts", "sweep-per-iteration", "launch-noise", "gloo-cuda-profile", "trace-analyze",
                 "ddp-gloo-cuda", "replay")
"""The steps whose CPU stand-ins the test runs: one per check function of the script (fsdp runs ddp-gloo-cuda's
check on another command, run by its own tests on CPU; vs-nccl-tests' dry run and its check run in
tests/test_vs_nccl_tests.py; selftest's check is exit_0, which every check here calls first, and its stand-in,
`commbench selftest --backend gloo --device cpu --nproc 2 --only sweep`, is what tests/test_selftest.py runs: the
fault run with `--only sweep` at the default 2 CPU ranks, the full run every step, each passing path asserted; run
here too it took 16 s of CI's 12 minutes), which keeps CI within them. `benchmarks/gpu_validation.py --dry-run` runs
every step."""
DEVICE_SESSION_S = 15 * 60
"""The lent GPU machine's device time per session: the one-GPU check's worst case must fit it, so that a check whose
every step hangs still comes back with its table and archive."""


def run_script(*args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)


@pytest.mark.distributed
def test_the_dry_run_prints_the_plan_and_every_cpu_stand_in_passes_and_is_archived(tmp_path):
    outcomes_file = tmp_path / "outcomes.json"
    # --gpus 1: the one-GPU plan without asking torch for the GPUs here (a CPU machine has none)
    run = run_script("--dry-run", "--gpus", "1", "--out", str(tmp_path / "out"), "--json", str(outcomes_file),
                     "--archive", str(tmp_path / "archive"), "--commit", "abc1234", "--only", ",".join(CHECKED_STEPS),
                     timeout=900)
    plan = run.stdout.split("\n| step | world | mode |")[0]
    for step in STEPS:  # the plan names each step it runs with its world, expected time, timeout and command
        assert (plan_line(step, 1) in plan) == (step.name in CHECKED_STEPS), step.name
    outcomes = {outcome["step"]: outcome for outcome in json.loads(outcomes_file.read_text())}
    assert list(outcomes) == [step.name for step in STEPS if step.name in CHECKED_STEPS]
    failed = {name: outcome["detail"] for name, outcome in outcomes.items() if outcome["verdict"] == "FAIL"}
    if not SHARED_TRACE.exists():  # a clone without ../shared: the replay's input is absent, and says so
        assert "absent" in failed.pop("replay", "absent")
    assert not failed, failed
    assert all(outcome["mode"] == "CPU stand-in" for outcome in outcomes.values())
    assert run.returncode == (0 if SHARED_TRACE.exists() else 1), run.stderr
    # one JSON, a README naming it, in a folder named by machine, date and commit; the folder as one file in --out
    [archived] = (tmp_path / "archive").iterdir()
    assert archived.name.startswith("cpu-stand-in-") and archived.name.endswith("-abc1234")
    document = json.loads((archived / "gpu_validation.json").read_text())
    assert document["commit"] == "abc1234" and [o["step"] for o in document["outcomes"]] == list(outcomes)
    assert document["probes"]["torch"] and document["gpu"] is False and document["gpus"] == 1
    noise = document["launch_noise"]  # the run set's figure with the key gate/priors.MEASURED takes it under
    assert (noise["backend"], noise["device_type"], noise["world_size"]) == ("gloo", "cpu", 2)
    assert noise["launch_noise_pct"] >= 0 and noise["df"] > 0
    readme = (archived / "README.md").read_text()
    assert "`gpu_validation.json`" in readme and "`steps/`" in readme
    assert sorted(path.name for path in (archived / "steps").iterdir()) == sorted(
        f"{name}.{stream}" for name in CHECKED_STEPS for stream in ("out", "err"))
    with tarfile.open(tmp_path / "out" / f"{archived.name}.tar.gz") as packed:
        assert f"{archived.name}/gpu_validation.json" in packed.getnames()


@pytest.mark.no_process
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


def printed_table(lines: list[str]) -> tuple[dict[str, tuple[str, float, float]], tuple[float, float]]:
    """The estimate's rows (step → world, expected, timeout) and its total row, read back from the printed lines."""
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines if line.startswith("| ")]
    table = {name: (world, float(expected), float(timeout)) for name, world, expected, timeout in rows[2:]}
    _, total_expected, total_timeouts = table.pop("total")
    return table, (total_expected, total_timeouts)


@pytest.mark.no_process
@pytest.mark.parametrize(("gpus", "budget_s"), [(1, 9 * 60), (8, 10 * 60)])
def test_the_printed_estimate_adds_up_and_fits_9_minutes_on_one_gpu_and_10_on_8(gpus, budget_s):
    estimate = Estimate(gpus, tuple(planned(gpus, [])))
    lines = estimate_lines(estimate)
    table, (total_expected, total_timeouts) = printed_table(lines)
    assert table.pop("machine start") == ("-", MACHINE_START_S, MACHINE_START_S)
    assert list(table) == [step.name for step in planned(gpus, [])]
    assert all(timeout > expected > 0 for _, expected, timeout in table.values()), table
    assert total_expected == MACHINE_START_S + sum(expected for _, expected, _ in table.values())
    assert total_timeouts == MACHINE_START_S + sum(timeout for _, _, timeout in table.values())
    assert total_expected <= budget_s == estimate.budget_s
    worst = float(re.search(r"worst case (\d+) s", lines[-1]).group(1))  # every step at its timeout, then stopped
    assert worst == total_timeouts + TERM_GRACE_S * len(table)
    if gpus == 1:
        assert worst <= DEVICE_SESSION_S


@pytest.mark.no_process
def test_each_step_runs_at_world_1_or_n_where_it_means_something_and_says_what_replaces_it_elsewhere():
    one, eight = Context(Path("/out"), gpu=True, gpus=1), Context(Path("/out"), gpu=True, gpus=8)
    for step in STEPS:
        assert step.one_gpu_s is not None or step.several_gpus_s is not None, step.name
        assert (step.one_gpu_s is None or step.several_gpus_s is None) == bool(step.instead), step.name
    by_name = {step.name: step for step in STEPS}
    assert "--nproc 1" in " ".join(by_name["sweep-per-iteration"].command(eight))  # world 1 on every node
    for name in ("fsdp", "selftest", "replay"):  # world N: every GPU, NCCL
        assert "--nproc 8" in " ".join(by_name[name].command(eight)), name
    assert "--backend nccl" in " ".join(by_name["replay"].command(eight))
    assert "--backend gloo" in " ".join(by_name["replay"].command(one))  # one GPU: 2 gloo ranks on it
    assert {"sendrecv", "all_to_all"} <= set(compared_collectives(8))  # they mean something with peers only
    assert "sendrecv" not in compared_collectives(1)
    command = " ".join(by_name["vs-nccl-tests"].command(eight))
    assert "--ngpus 8" in command and "--binaries" in command and "--build-only" not in command


@pytest.mark.no_process
def test_the_plan_says_which_nccl_tests_binaries_are_missing_and_the_cpu_side_command_that_builds_them(tmp_path):
    binaries = tmp_path / "nccl-tests-bin"
    lines = "\n".join(binaries_lines(binaries, ("all_reduce", "sendrecv"), None))
    assert "MISSING" in lines and "all_reduce_perf, sendrecv_perf" in lines
    assert f"python benchmarks/vs_nccl_tests.py --build-only --arch 90 --binaries {binaries}" in lines
    binaries.mkdir()
    for program in ("all_reduce_perf", "sendrecv_perf"):
        (binaries / program).write_text("")
        (binaries / program).chmod(0o755)
    assert "prebuilt" in binaries_lines(binaries, ("all_reduce", "sendrecv"), None)[0]


def test_a_step_past_its_timeout_fails_with_its_process_group_stopped_and_the_next_step_runs(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    hangs = [sys.executable, "-c", "import pathlib, subprocess, sys, time; child = subprocess.Popen(['sleep', '600']); "
             "pathlib.Path(sys.argv[1]).write_text(str(child.pid)); time.sleep(600)", str(pid_file)]
    steps = [Step("hangs", "never ends", lambda ctx: hangs, lambda ctx, result: None, one_rank, 0.5, None),
             Step("next", "exits 0", lambda ctx: [sys.executable, "-c", "pass"], lambda ctx, result: exit_0(result),
                  one_rank, 0.5, None)]
    outcomes = run_all(steps, Context(tmp_path, gpu=True, gpus=1))
    assert [(outcome.step, outcome.verdict) for outcome in outcomes] == [("hangs", "FAIL"), ("next", "PASS")]
    assert "over its 1 s timeout" in outcomes[0].detail
    stat = Path(f"/proc/{pid_file.read_text()}/stat")  # the hung step's own child, stopped with its group
    assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"


@pytest.mark.no_process
def test_the_archive_of_a_gpu_node_keeps_the_files_tests_read_from_tests_data_gpu(tmp_path):
    """A node's files under the names of tests/data/gpu/h200-1 (what node_facts.py writes), read back as
    tests/test_expect.py reads that folder."""
    from commbench.expect import read_facts

    out = tmp_path / "out"
    (out / "node-facts").mkdir(parents=True)
    for name in FACT_FILES:
        shutil.copy(H200_1 / name, out / "node-facts" / name)
    (out / "probes.json").write_text(json.dumps({"cuda": {"devices": [{"torch_name": "NVIDIA H200"}]}}))
    ctx = Context(out, gpu=True, gpus=1)
    target = archive(tmp_path / "gpu", ctx, [], "abc1234", Estimate(1, tuple(planned(1, []))))
    assert target.name.startswith("h200x1-") and target.name.endswith("-abc1234")
    assert read_facts(target / "nccl-topo.xml").gpus_per_node == 1
    assert re.search(r"PCIe Generation\s+Max\s+:\s+5", (target / "nvidia-smi.txt").read_text())
    assert json.loads((target / "nvml.json").read_text())["gpus"][0]["name"] == "NVIDIA H200"
    readme = (target / "README.md").read_text()
    assert all(f"`{name}`" in readme for name in FACT_FILES)
    assert json.loads((target / "gpu_validation.json").read_text())["estimate"]["budget_s"] == 9 * 60


class RefusingNvml:
    """pynvml on a GPU that answers NOT_SUPPORTED to every query, as H200-1 answered for its NVLink links; it notes
    each name asked for, which must be pynvml's."""

    def __init__(self):
        self.asked: set[str] = set()

    def __getattr__(self, name: str):
        import pynvml

        self.asked.add(name)
        if name == "nvmlDeviceGetHandleByIndex":
            return lambda index: object()
        if name.startswith(("NVML_", "c_nvml")):  # constants and structures as pynvml has them
            return getattr(pynvml, name)

        def refuse(*args):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return refuse


@pytest.mark.no_process
def test_node_facts_asks_nvml_what_h200_1s_nvml_json_holds_and_keeps_each_refusal_as_a_fact():
    import pynvml
    from node_facts import gpu_facts

    h200 = json.loads((H200_1 / "nvml.json").read_text())["gpus"][0]
    nvml = RefusingNvml()
    facts = gpu_facts(nvml, 0)
    assert sorted(name for name in nvml.asked if not hasattr(pynvml, name)) == []
    assert set(facts) == set(h200)
    assert facts["nvlink"][0] == h200["nvlink"][0]  # "error: NVMLError_NotSupported: Not Supported", link by link
    assert set(facts["pcie"]) == set(h200["pcie"]) and set(facts["fields"]) == set(h200["fields"])


@pytest.mark.no_process
@pytest.mark.parametrize(("torch_name", "model"), [("NVIDIA H200", "h200"), ("NVIDIA H100 80GB HBM3", "h100"),
                                                   ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"),
                                                   ("NVIDIA GeForce RTX 5090", "geforce-rtx-5090")])
def test_the_archive_is_named_by_the_gpu_model_not_its_memory(torch_name, model):
    assert gpu_model(torch_name) == model


def test_without_a_gpu_a_real_run_is_refused_with_the_way_out(tmp_path):
    run = run_script("--out", str(tmp_path), timeout=120)
    if "no CUDA GPU" not in run.stderr:
        pytest.skip("a GPU is visible here: the real run is benchmarks/gpu_validation.py itself")
    assert run.returncode == 2 and "--dry-run" in run.stderr


def test_an_unknown_step_is_refused_naming_the_steps():
    run = run_script("--dry-run", "--only", "nope", timeout=120)
    assert run.returncode == 2 and "nope" in run.stderr and "vs-nccl-tests" in run.stderr
