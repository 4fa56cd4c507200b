"""`commbench selftest`: a real full run on CPU (every applicable path passes, the n/a rows say why, the run folder
holds every sub-run) and a run with an injected wrong element (its paths FAIL, exit 1). Two selftest launches for
these: the fault run selects the sweep only (`--only sweep`), which is where the fault lands; a third profiles one
gloo rank. Each runs the CLI in this process (tests/in_process.py), its steps as processes of their own."""

import json
import subprocess

import pandas as pd
import pytest
from click.testing import CliRunner

from commbench import store
from commbench.cli import main
from commbench.machine import Machine
from commbench.selftest import Selftest, format_table
from commbench.selftest.plan import LARGE_BYTES, STEPS, ProfilePoint, plan_selftest, profile_point
from commbench.selftest.steps import StepRun
from commbench.selftest.verdicts import FAIL, NA, PASS, Check, SubRun, profile_check
from tests.in_process import commbench_here

CPU_MACHINE = Machine(gpus=0, nccl_available=False)
GPU_MACHINE = Machine(gpus=2, nccl_available=True)
ONE_GPU = Machine(gpus=1, nccl_available=True)
# gloo on CPU on every machine, so a GPU host runs the same test (its nvml row then says CPU tensors)
CPU_TARGET = ("--backend", "gloo", "--device", "cpu")


def _selftest(tmp_path, *args, env=None, run_id="st") -> subprocess.CompletedProcess:
    """`commbench selftest` in this process (tests/in_process.py: its exit code and what it prints on stdout and
    stderr, read at the file descriptors, without an interpreter start and a torch import); its steps are
    processes of their own, as in any selftest."""
    return commbench_here("selftest", *CPU_TARGET, "--out", str(tmp_path / "results"), "--run-id", run_id, *args,
                          cwd=tmp_path, env=env)


@pytest.mark.parametrize("args, fragment", [
    (["--nproc", "0"], "--nproc 0 is not a rank count"),
    (["--only", "sweep,frobnicate"], "unknown --only step 'frobnicate'"),
    (["--step-timeout", "0"], "--step-timeout 0 must be above 0"),
])
@pytest.mark.no_process
def test_bad_input_exits_2_with_one_line_and_runs_nothing(args, fragment, tmp_path, monkeypatch):
    for name in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    result = CliRunner().invoke(main, ["selftest", *args, "--out", str(tmp_path)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and fragment in lines[0] and lines[0].startswith("commbench: error:"), result.output
    assert not any(tmp_path.iterdir())


@pytest.mark.no_process
def test_inside_a_job_it_refuses(monkeypatch):
    with pytest.raises(Exception, match="launches its own ranks"):
        plan_selftest(Machine(gpus=0, nccl_available=False, rank=0, world_size=2), backend="auto", device="auto",
                      nproc=None, only=(), timeout_s=300)


@pytest.mark.no_process
def test_the_plan_on_a_gpu_node_and_with_gloo_on_cuda():
    nccl = plan_selftest(GPU_MACHINE, backend="auto", device="auto", nproc=None, only=(), timeout_s=300)
    assert (nccl.backend, nccl.device, nccl.nproc, nccl.large_bytes) == ("nccl", "cuda", 2, LARGE_BYTES["cuda"])
    assert nccl.selected == STEPS and not nccl.not_applicable
    assert set(nccl.commands) == {"sweep", "profile", "ddp", "fsdp", "zero"}
    assert {(p.collective, p.impl) for p in nccl.sweep.points} == set(nccl.collective_paths)
    assert "--sizes" in nccl.commands["sweep"].args and "4096,268435456" in nccl.commands["sweep"].args

    gloo = plan_selftest(GPU_MACHINE, backend="gloo", device="cuda", nproc=None, only=(), timeout_s=300)
    assert {(p.collective, p.impl) for p in gloo.sweep.points} == {("all_reduce", "builtin"),
                                                                   ("broadcast", "builtin")}
    assert set(gloo.commands) == {"sweep", "profile", "ddp"}
    for path in ("fsdp", "zero", "all_reduce ring", "reduce_scatter builtin", "all_to_all builtin"):
        assert gloo.not_applicable[path]  # each with its reason


@pytest.mark.no_process
def test_the_profile_step_traces_a_device_copy_with_one_nccl_rank_and_an_all_reduce_elsewhere():
    """NCCL with one rank communicates nothing: in place it does nothing, out of place it copies on the device. The
    plan is a function of (world size, backend, device) alone."""
    one = profile_point(1, "nccl", "cuda")
    assert (one.collective, one.placement) == ("all_gather", "out") and "device copy" in one.no_communication
    for world, backend, device in ((2, "nccl", "cuda"), (8, "nccl", "cuda"), (1, "gloo", "cpu"), (2, "gloo", "cpu"),
                                   (1, "gloo", "cuda"), (2, "gloo", "cuda")):
        assert profile_point(world, backend, device) == ProfilePoint("all_reduce", "in"), (world, backend, device)

    plan = plan_selftest(ONE_GPU, backend="auto", device="auto", nproc=None, only=("profile",), timeout_s=300)
    assert (plan.backend, plan.device, plan.nproc, plan.profile) == ("nccl", "cuda", 1, one)
    args = plan.commands["profile"].args
    assert args[args.index("--collective") + 1] == "all_gather" and args[args.index("--placement") + 1] == "out"
    [point] = plan.commands["profile"].bench.points
    assert (point.collective, point.inplace, point.layout.size_bytes) == ("all_gather", False, 4096)
    two = plan_selftest(GPU_MACHINE, backend="auto", device="auto", nproc=None, only=("profile",), timeout_s=300)
    [point] = two.commands["profile"].bench.points
    assert (two.nproc, point.collective, point.inplace) == (2, "all_reduce", True)


@pytest.mark.no_process
def test_with_one_nccl_rank_the_profile_verdict_asks_for_gpu_traces_not_communication(tmp_path):
    plan = plan_selftest(ONE_GPU, backend="auto", device="auto", nproc=None, only=("profile",), timeout_s=300)
    log, analysis = tmp_path / "profile.log", tmp_path / "trace_analysis.json"
    log.write_text("")

    def judged(device: str, n_wrong) -> Check:
        # what `trace analyze --json` reports of a one-rank trace: no communication event, GPU or CPU activity only
        analysis.write_text(json.dumps({"traces": [{"rank": 0, "device": device, "comm_us": 0.0, "collectives": []}]}))
        profile = SubRun(StepRun("profile", (), 0, 1.0, log), {"status": store.STATUS_COMPLETE},
                         pd.DataFrame({"n_wrong": [n_wrong]}), tmp_path)
        return profile_check(plan, profile, StepRun("trace-analyze", (), 0, 1.0, log, stdout=analysis))

    passed = judged("gpu", 0)
    assert passed.result == PASS, passed
    assert passed.detail.startswith("1 trace (1 all_gather point × 1 rank), each a GPU trace, 0 wrong; no "
                                    "communication to find: NCCL runs a one-rank collective as a device copy")
    assert judged("cpu", 0) == Check("profile + trace analyze", FAIL, "no GPU activity in the trace of rank(s) [0]")
    assert judged("gpu", float("nan")).detail == "profiled sweep: its row was not checked (n_wrong empty)"


@pytest.mark.distributed
def test_one_gloo_rank_profiles_an_all_reduce_whose_trace_shows_communication(tmp_path):
    """gloo records its spans at world size 1 too: only NCCL's one-rank path is judged without communication."""
    completed = _selftest(tmp_path, "--nproc", "1", "--only", "profile", "--json")
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-4000:]
    paths = {entry["path"]: entry for entry in json.loads(completed.stdout)["paths"]}
    profile = paths["profile + trace analyze"]
    assert profile["result"] == PASS, profile
    assert profile["detail"].startswith("1 trace (1 all_reduce point × 1 rank): ") and "comm up to" in profile["detail"]


@pytest.mark.no_process
def test_only_brings_what_a_step_needs():
    plan = plan_selftest(CPU_MACHINE, backend="auto", device="auto", nproc=None, only=("compare",), timeout_s=60)
    assert plan.selected == ("sweep", "compare") and set(plan.commands) == {"sweep"}


@pytest.mark.no_process
def test_the_table_has_a_row_per_path_and_ends_with_the_run_folder_and_time(tmp_path):
    checks = [Check("collective all_reduce builtin", PASS, "4 rows, 0 wrong"), Check("nvml sampler", NA, "no GPU"),
              Check("compare", FAIL, "compare exit 2")]
    table = format_table(Selftest(tmp_path, checks, 61.4, {"counts": {PASS: 1, FAIL: 1, NA: 1}}))
    lines = table.splitlines()
    assert lines[0].split() == ["path", "result", "detail"]
    assert lines[1].split()[:4] == ["collective", "all_reduce", "builtin", "pass"]
    assert lines[-1] == f"# 1 pass, 1 FAIL, 1 n/a; run folder {tmp_path}, wall time 61 s"


@pytest.mark.distributed
def test_a_full_selftest_passes_every_applicable_path_and_keeps_everything_it_ran(tmp_path):
    completed = _selftest(tmp_path, "--json")
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-4000:]
    document = json.loads(completed.stdout)  # stdout is the one JSON document; progress went to stderr
    assert "selftest: sweep: exit 0" in completed.stderr
    paths = {entry["path"]: entry for entry in document["paths"]}
    assert document["ok"] is True and document["counts"][FAIL] == 0
    for entry in paths.values():
        assert entry["result"] in (PASS, NA) and entry["detail"], entry
    expected = {"collective all_reduce builtin", "collective all_reduce ring", "collective reduce_scatter ring",
                "collective all_gather ring", "collective broadcast builtin", "collective reduce builtin",
                "collective all_to_all builtin", "collective sendrecv builtin",
                "timing per-iteration", "timing batch", "placement out", "placement in", "profile + trace analyze",
                "ddp step", "fsdp step", "zero step", "report", "compare"}
    assert {path for path, entry in paths.items() if entry["result"] == PASS} == expected | {
        "collective reduce_scatter builtin", "collective all_gather builtin"}
    nvml = paths["nvml sampler"]
    assert nvml["result"] == NA and nvml["detail"] in ("no GPU visible",
                                                       "CPU tensors (--device cpu): NVML samples the GPUs of GPU runs")
    assert "0 wrong" in paths["collective reduce_scatter ring"]["detail"]

    run_dir = tmp_path / "results" / "st"
    assert document["run_dir"] == str(run_dir)
    assert json.loads((run_dir / "selftest.json").read_text()) == document
    for sub_run in ("sweep", "profile", "ddp", "fsdp", "zero"):
        meta = json.loads((run_dir / sub_run / "meta.json").read_text())
        assert meta["status"] == "complete" and (run_dir / sub_run / "results.csv").exists(), sub_run
    assert any((run_dir / "profile" / "traces").iterdir())
    assert json.loads((run_dir / "trace_analysis.json").read_text())["traces"]
    assert (run_dir / "report" / "report.html").stat().st_size > 0 and (run_dir / "compare.md").exists()
    assert {step["name"] for step in document["steps"]} == {"sweep", "profile", "trace-analyze", "ddp", "fsdp",
                                                            "zero", "report", "compare"}
    assert all((run_dir / step["log"]).exists() and step["exit_code"] == 0 for step in document["steps"])


@pytest.mark.distributed
def test_a_wrong_element_fails_its_paths_and_the_exit_code(tmp_path):
    # the fault env reaches every sub-run's ranks; this point index exists only in the big sweep (the profiled
    # sweep has one point, the training sweeps one or two configurations), so only the sweep's paths can fail
    plan = plan_selftest(CPU_MACHINE, backend="gloo", device="cpu", nproc=None, only=("sweep",), timeout_s=300)
    point = next(p for p in plan.sweep.points
                 if (p.collective, p.inplace, p.layout.size_bytes, p.timing) == ("all_to_all", False, 4096, "batch"))
    assert point.index > 1
    # `--nproc 2 --only sweep` on gloo and CPU: benchmarks/gpu_validation.py's CPU stand-in of its selftest step, which
    # tests/test_gpu_validation.py leaves to this run and the full one (--nproc 2 is the default on CPU)
    completed = _selftest(tmp_path, "--nproc", "2", "--only", "sweep",
                          env={"COMMBENCH_FAULT": f"wrong:1:{point.index}"})
    assert completed.returncode == 1, completed.stdout[-4000:] + completed.stderr[-4000:]
    lines = completed.stdout.splitlines()
    assert lines[0].split() == ["path", "result", "detail"]
    results = {}
    for line in lines[1:-1]:
        path, rest = line.split("  ", 1)
        result, detail = rest.strip().split("  ", 1)
        results[path.strip()] = (result, detail.strip())
    failed = {path for path, (result, _) in results.items() if result == FAIL}
    assert failed == {"collective all_to_all builtin", "timing batch", "placement out"}, completed.stdout
    assert "1 wrong element(s)" in results["collective all_to_all builtin"][1]
    assert "all_to_all builtin out 4 KiB batch" in results["timing batch"][1]
    assert "1 wrong element(s) in 1 of" in results["placement out"][1]
    assert results["ddp step"] == (NA, "not selected (--only sweep)")
    assert all(result in (PASS, NA) for path, (result, _) in results.items() if path not in failed)
    assert lines[-1].startswith("# 11 pass, 3 FAIL, 7 n/a; run folder ") and "wall time" in lines[-1]


@pytest.mark.no_process
def test_the_command_line_names_the_steps_the_plan_runs():
    """`commbench selftest --help` lists the steps from the kinds' registry without importing the selftest package."""
    from commbench.cli.selftest import STEP_NAMES
    from commbench.selftest.plan import STEPS

    assert STEP_NAMES == ", ".join(STEPS) == "sweep, profile, ddp, fsdp, zero, report, compare"
