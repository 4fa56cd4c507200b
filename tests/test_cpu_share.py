"""The CPUs a job's ranks got on their node (commbench/machine.py cpu_shortfall, job_cpu_share): fewer than 2 per
local rank is warned about (one line) and recorded in meta.json; enough is silent. As functions of the numbers and
of the environments of torchrun, srun and a k8s pod's torchrun, and a real torchrun job pinned to one core."""

import json
import os
import shutil
import subprocess
import sys
import warnings

import pytest

from commbench.errors import CommbenchWarning
from commbench.machine import CPUS_PER_LOCAL_RANK, Machine, cpu_shortfall, job_cpu_share, resolve_target
from tests.conftest import commbench_env

TORCHRUN_RANK = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
                 "TORCHELASTIC_RUN_ID": "none"}
SRUN_TASK = {"RANK": "3", "WORLD_SIZE": "4", "SLURM_LOCALID": "1", "SLURM_NODEID": "1",
             "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_JOB_ID": "9"}
K8S_POD_RANK = {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "8", "PET_MASTER_ADDR": "bench-node-0-0.bench",
                "RANK": "9", "WORLD_SIZE": "16", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "8"}


@pytest.mark.no_process
def test_fewer_than_two_cpus_per_local_rank_is_one_line_naming_the_numbers_and_the_fix():
    text = cpu_shortfall(1, 2)
    assert text is not None and "\n" not in text
    assert text.startswith("1 usable CPU(s) for the 2 rank(s) of this job on this node")
    assert "--cpus-per-task" in text and "--exclusive" in text and "4 or more" in text


@pytest.mark.no_process
@pytest.mark.parametrize("cpus, local_ranks", [(4, 2), (17, 8), (2, 1), (None, 8), (1, None), (1, 0)])
def test_enough_or_unknown_cpus_say_nothing(cpus, local_ranks):
    assert cpu_shortfall(cpus, local_ranks) is None


@pytest.mark.no_process
@pytest.mark.parametrize("environ, cpus, local_ranks, short", [
    (TORCHRUN_RANK, 1, 2, True), (TORCHRUN_RANK, 4, 2, False),
    (SRUN_TASK, 3, 2, True), (SRUN_TASK, 64, 2, False),
    (K8S_POD_RANK, 8, 8, True), (K8S_POD_RANK, 16, 8, False),
])
def test_inside_a_job_meta_records_cpus_ranks_and_the_shortfall(environ, cpus, local_ranks, short):
    share = job_cpu_share(environ, cpus)
    assert share["usable_cpus"] == cpus and share["local_ranks"] == local_ranks
    assert share["cpus_per_rank_wanted"] == CPUS_PER_LOCAL_RANK
    assert (share["shortfall"] is not None) == short
    assert share["shortfall"] == cpu_shortfall(cpus, local_ranks)


@pytest.mark.no_process
@pytest.mark.parametrize("environ", [{}, {"SLURM_JOB_ID": "9", "SLURM_NTASKS": "2"}, {"RANK": "0", "WORLD_SIZE": "2"}])
def test_outside_a_job_or_with_unknown_local_ranks_nothing_is_recorded(environ):
    # a batch step (commbench launches and checks cores itself); a launcher that says nothing of the node's ranks
    assert job_cpu_share(environ, 1) is None


@pytest.mark.no_process
@pytest.mark.parametrize("cpus, warned", [(1, True), (8, False)])
def test_a_rank_resolving_its_options_in_a_job_warns_when_short(cpus, warned):
    machine = Machine(gpus=0, nccl_available=False, rank=0, world_size=2, local_world_size=2, cpus=cpus)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        target = resolve_target(machine)
    assert target.nproc == 2  # the run goes on
    said = [str(w.message) for w in caught if issubclass(w.category, CommbenchWarning)]
    assert said == ([cpu_shortfall(cpus, 2)] if warned else [])


@pytest.mark.distributed
def test_torchrun_job_pinned_to_one_core_warns_and_records_it(tmp_path):
    if shutil.which("taskset") is None or not hasattr(os, "sched_getaffinity"):
        pytest.skip("needs taskset and an affinity mask (Linux)")
    core = str(min(os.sched_getaffinity(0)))
    completed = subprocess.run(
        ["taskset", "-c", core, sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
         "-m", "commbench", "sweep", "-c", "all_reduce", "--sizes", "4K", "--iters", "6", "--backend", "gloo",
         "--device", "cpu", "--out", str(tmp_path / "results"), "--run-id", "pinned"],
        cwd=tmp_path, env=commbench_env(), capture_output=True, text=True, timeout=240)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    expected = cpu_shortfall(1, 2)
    warned = [line for line in completed.stderr.splitlines() if line.startswith("commbench: warning: 1 usable CPU")]
    assert warned == [f"commbench: warning: {expected}"]  # once: rank 0 says it, rank 1 does not
    meta = json.loads((tmp_path / "results" / "pinned" / "meta.json").read_text())
    assert meta["status"] == "complete" and meta["world_size"] == 2
    assert meta["job_cpus"] == {"usable_cpus": 1, "local_ranks": 2, "cpus_per_rank_wanted": 2,
                                "shortfall": expected}
