"""TOML suites: validation before launch (in process), and real suite runs with torchrun and gloo ranks on CPU."""

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from commbench.execution.session import launch_groups
from commbench.machine import Machine
from commbench.shipped import shipped_suite
from commbench.suite.load import load_suite
from tests.conftest import commbench_env
from tests.in_process import commbench_here
from tests.rank_jobs import assert_ended_or_torn_down

CPU_MACHINE = Machine(gpus=0, nccl_available=False)

SHIPPED = ("default", "ring", "nccl-tests", "ddp-buckets", "fsdp-prefetch", "zero-stages", "cpu-ci", "hunt")

# Three benches that share one launch (a sweep, a DDP bench in one process with memory reset, a sweep), then one
# with a process per configuration (training on CPU, isolation auto). Two steps per configuration (the fewest a
# training bench takes): what the tests read is where each bench ran and what it stored, not its step times.
MIXED = """
description = "test: every kind of launch group"
backend = "gloo"
device = "cpu"
nproc = 2

[[bench]]
name = "ar"
kind = "sweep"
collective = "all_reduce"
impl = ["builtin", "ring"]
sizes = "4K,64K"
iters = 6
warmup = 1

[[bench]]
kind = "ddp"
bucket-cap-mb = [1, 25]
params = "1M"
layers = 2
steps = 2
profile-steps = 1
isolation = "reset"

[[bench]]
name = "ag"
kind = "sweep"
collective = "all_gather"
impl = "builtin"
sizes = "4K"
iters = 6
check = true
profile = true
profile-iters = 2

[[bench]]
kind = "zero"
strategy = ["ddp", "zero3"]
params = "1M"
layers = 2
steps = 2
profile-steps = 0
"""


def _suite(tmp_path: Path, text: str, name: str = "suite.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _with_bench(extra: str, kind: str = "sweep") -> str:
    return f'backend = "gloo"\ndevice = "cpu"\n\n[[bench]]\nkind = "{kind}"\n{extra}\n'


@pytest.mark.no_process
@pytest.mark.parametrize("text, fragments", [
    ("[[bench]\nkind = 'sweep'", ["not valid TOML", "line 1"]),
    ('description = "no benches"', ["no [[bench]] tables"]),
    (_with_bench("", kind="allreduce"), ["key 'kind' is 'allreduce'", "sweep, ddp, fsdp, zero"]),
    (_with_bench("iters = 'many'"), ["key 'iters'", "--iters 'many' is not a whole number"]),
    ('[[bench]]\nkind = ["sweep"]\n', ["key 'kind' is ['sweep']"]),
    (_with_bench('colective = "all_reduce"'), ["unknown key 'colective'", "collective"]),
    (_with_bench('placement = "sideways"'), ["key 'placement'", "unknown --placement 'sideways'", "out, in, both"]),
    (_with_bench('collective = "allreduce"'), ["unknown collective 'allreduce'"]),
    (_with_bench('sizes = "1K:oops"'), ["--sizes '1K:oops': bad size 'oops'"]),
    (_with_bench("iters = 0"), ["key 'iters'", "--iters 0 must be 1 or more"]),
    (_with_bench("nproc = 4"), ["key 'nproc' belongs at the top of the suite"]),
    (_with_bench('check = "yes"'), ["key 'check'", "--check is a switch"]),
    (_with_bench("timeout = [1, 2]"), ["key 'timeout'", "--timeout takes one value"]),
    (_with_bench('bucket-cap-mb = ["big"]', kind="ddp"),
     ["key 'bucket-cap-mb'", "--bucket-cap-mb 'big' is not a number"]),
    (_with_bench('name = "a b"'), ["key 'name' 'a b' is not a folder name"]),
    (_with_bench("") + '\n[[bench]]\nkind = "sweep"\n', ["two benches are named 'sweep'"]),
    ('nproc = 0\n[[bench]]\nkind = "sweep"\n', ["--nproc 0 is not a rank count"]),
    ('frequency = 3\n[[bench]]\nkind = "sweep"\n', ["the top level: unknown key 'frequency'"]),
])
def test_bad_suite_is_one_line_naming_file_and_key(tmp_path, commbench_cli, text, fragments):
    path = _suite(tmp_path, text)
    outcome = commbench_cli("run", str(path), "--out", str(tmp_path / "results"))
    assert outcome.returncode == 2, outcome
    lines = outcome.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"commbench: error: {path}"), outcome.stderr
    for fragment in fragments:
        assert fragment in lines[0]
    assert not (tmp_path / "results").exists()  # refused before anything was created or launched


@pytest.mark.no_process
def test_missing_suite_names_the_shipped_ones(commbench_cli):
    outcome = commbench_cli("run", "no-such-suite")
    assert outcome.returncode == 2
    assert "suite 'no-such-suite' not found" in outcome.stderr and "cpu-ci" in outcome.stderr


@pytest.mark.no_process
@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_suites_are_valid_where_they_are_meant_to_run(name):
    # nccl-tests is a GPU suite: validate it as on a node with 8 GPUs (what `slurm submit` does on a login node)
    machine = Machine.for_job(nodes=1, ranks_per_node=8, gpus_per_node=8) if name == "nccl-tests" else CPU_MACHINE
    suite = load_suite(name, machine)
    assert suite.path == shipped_suite(name) and suite.path.is_file() and suite.description
    for bench in suite.benches:
        assert bench.bench.points, bench.name
    if name == "nccl-tests":
        spec = suite.benches[0].bench.spec
        assert (spec.backend, spec.device, spec.nproc) == ("nccl", "cuda", 8)
        assert spec.sizes[0] == 8 and spec.sizes[-1] == 8 * 2**30 and spec.placement == "both"


@pytest.mark.no_process
@pytest.mark.parametrize("machine", [CPU_MACHINE, Machine.for_job(nodes=1, ranks_per_node=8, gpus_per_node=8)],
                         ids=["cpu-5M", "gpu-350M"])
def test_the_ddp_buckets_suite_runs_every_bucket_layout_once_with_ddps_default_first(machine):
    from commbench.training import ddp_buckets

    bench = load_suite("ddp-buckets", machine).benches[0].bench
    configs, shape = bench.spec.configs, bench.spec.shape
    assert not bench.notes  # no caps merged as one configuration
    settings = list(dict.fromkeys((config.bucket_cap_mb, config.first_bucket_mb) for config in configs))
    assert settings[0] == (25.0, 1.0) and len(settings) >= 4  # DDP's own buckets, then the model-relative caps
    layouts = {ddp_buckets.predicted_buckets(shape, *setting) for setting in settings}
    assert len({len(layout) for layout in layouts}) == len(settings)  # distinct bucket counts
    assert len(configs) == len(settings) * 2 * 2  # × gradient_as_bucket_view × accumulation 1, 4


@pytest.mark.no_process
def test_launch_groups_share_a_launch_except_process_per_configuration(tmp_path):
    suite = load_suite(_suite(tmp_path, MIXED), CPU_MACHINE)
    groups = launch_groups([bench.bench for bench in suite.benches])
    assert [[suite.benches[index].name for index in group] for group in groups] == [["ar", "ddp", "ag"], ["zero"]]


def _run(tmp_path: Path, *args: str, env: dict | None = None, torchrun: bool = False) -> subprocess.CompletedProcess:
    """`commbench ARGS` in tmp_path: under a torchrun of 2 ranks, or (its launches are what the test is about, not
    its process) in this process (tests/in_process.py: the same launches and output, without an interpreter start
    and a torch import). env: variables added to commbench_env()."""
    if not torchrun:
        return commbench_here(*args, cwd=tmp_path, env=env)
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m",
                           "commbench", *args], cwd=tmp_path, env=commbench_env(**(env or {})), capture_output=True,
                          text=True, timeout=300)


def _bench_meta(run_dir: Path, name: str) -> dict:
    return json.loads((run_dir / name / "meta.json").read_text())


UNPROFILED = MIXED.replace("profile-steps = 1\n", "profile-steps = 0\n").replace("profile = true\nprofile-iters = 2\n",
                                                                                 "")
"""MIXED without the traces that only test_suite_inside_torchrun_runs_every_bench_in_place reads (profiled benches
sharing a launch commbench started: the report suite, tests/report_runs.py, whose trace links
tests/test_report_compare.py reads)."""


@pytest.mark.distributed
def test_mixed_suite_runs_into_one_folder_in_as_few_launches_as_it_can(tmp_path):
    path = _suite(tmp_path, UNPROFILED)
    completed = _run(tmp_path, "run", str(path), "--out", "results", "--run-id", "mixed")
    assert completed.returncode == 0, completed.stderr[-3000:]
    run_dir = tmp_path / "results" / "mixed"
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["kind"] == "suite" and meta["status"] == "complete"
    assert [bench["name"] for bench in meta["benches"]] == ["ar", "ddp", "ag", "zero"]
    assert (run_dir / "suite.toml").read_text() == UNPROFILED
    assert not any(run_dir.rglob("traces"))  # nothing profiled: UNPROFILED is not MIXED
    for name, rows in (("ar", 4), ("ddp", 2), ("ag", 1), ("zero", 2)):
        results = pd.read_csv(run_dir / name / "results.csv")
        assert len(results) == rows and (results["n_wrong"] == 0).all(), name
        assert _bench_meta(run_dir, name)["status"] == "complete"
    # one torchrun for ar, ddp and ag (its log lives with the first of them), one per configuration for zero
    assert (run_dir / "ar" / "launch.log").exists() and (run_dir / "zero" / "launch.log").exists()
    assert not (run_dir / "ddp" / "launch.log").exists() and not (run_dir / "ag" / "launch.log").exists()
    assert _bench_meta(run_dir, "ddp")["isolation"] == "reset"
    assert _bench_meta(run_dir, "zero")["isolation"] == "process"  # auto, on CPU
    zero = pd.read_csv(run_dir / "zero" / "results.csv")
    assert list(zero["strategy"]) == ["ddp", "zero3"]
    assert (zero["mem_carryover_bytes"].abs() <= 2**20).all()  # each started where a fresh process starts
    for heading in ("## ar (sweep): complete", "## ddp (ddp): complete", "## zero (zero): complete"):
        assert heading in completed.stdout


@pytest.mark.distributed
def test_suite_inside_torchrun_runs_every_bench_in_place(tmp_path):
    path = _suite(tmp_path, MIXED.replace('isolation = "reset"\n', ""))
    completed = _run(tmp_path, "run", str(path), "--out", "results", "--run-id", "inplace", "--quiet", torchrun=True)
    run_dir = tmp_path / "results" / "inplace"
    assert json.loads((run_dir / "meta.json").read_text())["status"] == "complete", completed.stderr[-3000:]
    assert_ended_or_torn_down(completed, stored_complete=True)
    assert [path.name for path in (tmp_path / "results").iterdir()] == ["inplace"]  # rank 1 wrote nothing
    for name in ("ar", "ddp", "ag", "zero"):
        assert _bench_meta(run_dir, name)["world_size"] == 2
        assert not (run_dir / name / "launch.log").exists()  # no nested torchrun
        assert (pd.read_csv(run_dir / name / "results.csv")["n_wrong"] == 0).all()
    assert _bench_meta(run_dir, "zero")["isolation"] == "reset"  # no process per configuration in place
    # rank 1 is not handed the folders; it learns them from rank 0 and writes its own traces there
    for name in ("ddp", "ag"):
        ranks = {path.name.split("-")[0] for path in (run_dir / name / "traces").iterdir()}
        assert ranks == {"rank0", "rank1"}, name
    assert completed.stdout == f"{Path('results') / 'inplace'}\n"  # --quiet: the run folder, from rank 0 alone


@pytest.mark.distributed
def test_a_failed_bench_keeps_its_rows_and_stops_the_suite(tmp_path):
    path = _suite(tmp_path, MIXED)
    completed = _run(tmp_path, "run", str(path), "--out", "results", "--run-id", "killed", "--quiet",
                     env={"COMMBENCH_FAULT": "kill:1:1"})
    assert completed.returncode == 3
    assert "bench ar failed: rank 1 exited with code -9 (SIGKILL)" in completed.stderr
    run_dir = tmp_path / "results" / "killed"
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "failed" and meta["reason"].startswith("bench ar:")
    assert len(pd.read_csv(run_dir / "ar" / "results.csv")) == 1  # the point before the kill
    for name in ("ddp", "ag", "zero"):
        assert _bench_meta(run_dir, name)["reason"] == "not run: an earlier bench of the suite failed"


@pytest.mark.distributed
def test_bare_sweep_runs_the_default_suite(bare_sweep):
    assert bare_sweep.returncode == 0, bare_sweep.stderr[-3000:]
    run_dir = bare_sweep.run_dir
    assert (run_dir / "suite.toml").read_text() == shipped_suite("default").read_text()
    results = pd.read_csv(run_dir / "collectives" / "results.csv")
    assert set(results["collective"]) == {"all_reduce", "reduce_scatter", "all_gather"}
    assert set(results["impl"]) == {"builtin"} and (results["n_wrong"] == 0).all()


@pytest.mark.no_process
def test_a_process_group_that_fails_around_the_benches_fails_the_running_ones_or_notes_a_teardown(tmp_path):
    """In place (torchrun/srun), joining or leaving the job's process group can fail around the benches: a bench
    still running fails with the cause, and benches that all stored their rows stay complete with a teardown note."""
    from commbench import store
    from commbench.execution.session import _record_group_failure

    done, running = tmp_path / "done", tmp_path / "running"
    for run_dir, status in ((done, store.STATUS_COMPLETE), (running, store.STATUS_RUNNING)):
        run_dir.mkdir()
        store.write_meta(run_dir, {"schema_version": store.SCHEMA_VERSION, "status": status})
    error = RuntimeError("connection reset by peer\nwhile tearing down")
    assert _record_group_failure([done, None, running], error, after_every_bench=True) is False
    assert store.read_meta(running)["status"] == store.STATUS_FAILED
    assert store.read_meta(running)["reason"] == "rank 0: RuntimeError: connection reset by peer"
    assert store.read_meta(done) == {"schema_version": store.SCHEMA_VERSION, "status": store.STATUS_COMPLETE}
    store.write_meta(running, {"schema_version": store.SCHEMA_VERSION, "status": store.STATUS_COMPLETE})
    assert _record_group_failure([done, running], error, after_every_bench=True) is True
    assert store.read_meta(running)["teardown"] == "RuntimeError: connection reset by peer after its rows were stored"
