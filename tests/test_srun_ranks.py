"""srun's tasks as the ranks of one job (commbench/srun_ranks.py): the derivation as a function of the environment
(srun steps, the batch step, torchrun, a k8s pod's torchrun), the refusal, and real `srun -n 2 commbench sweep`
steps on a local Slurm cluster (tests/local_slurm.py) giving one world-2 run, not one run per task."""

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from commbench import gpu_mapping, srun_ranks
from commbench.errors import CommbenchError
from commbench.machine import Machine, resolve_target
from tests.conftest import commbench_env
from tests.local_slurm import started

NO_GPU_FACTS = {"gpus": 0, "nccl_available": False, "nccl_version": None}


def _srun_task(*, procid: int, tasks: int, nodes: str = "n[1-2]", per_node: str = "1(x2)", localid: int = 0,
               nodeid: int = 0, **extra: str) -> dict[str, str]:
    """What srun sets in a task's environment (as seen on the local cluster: `srun -N2 -n2 env`)."""
    return {"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "3", "SLURM_PROCID": str(procid), "SLURM_NTASKS": str(tasks),
            "SLURM_STEP_NUM_TASKS": str(tasks), "SLURM_STEP_NODELIST": nodes,
            "SLURM_STEP_NUM_NODES": str(len(per_node.split(",")) if "(x" not in per_node else
                                        int(per_node.split("(x")[1].rstrip(")"))), "SLURM_NODELIST": nodes,
            "SLURM_STEP_TASKS_PER_NODE": per_node, "SLURM_TASKS_PER_NODE": per_node, "SLURM_LOCALID": str(localid),
            "SLURM_NODEID": str(nodeid), "SLURMD_NODENAME": f"n{nodeid + 1}", **extra}


@pytest.mark.no_process
def test_every_task_of_a_cpu_step_is_a_rank_of_one_job():
    tasks = [_srun_task(procid=rank, tasks=4, per_node="2(x2)", localid=rank % 2, nodeid=rank // 2)
             for rank in range(4)]
    derived = [srun_ranks.derive(environ) for environ in tasks]
    assert [d.rank for d in derived] == [0, 1, 2, 3]
    assert {d.world_size for d in derived} == {4}
    assert [d.local_rank for d in derived] == [0, 1, 0, 1]
    assert {d.local_world_size for d in derived} == {2}
    # every task names the same rendezvous: the step's first node, a port derived from job and step alike
    assert {d.master_node for d in derived} == {"n1"}
    assert len({d.master_port for d in derived}) == 1
    assert srun_ranks.PORT_BASE <= derived[0].master_port < srun_ranks.PORT_BASE + srun_ranks.PORT_SPAN


@pytest.mark.no_process
def test_the_environment_it_adds_names_rank_world_and_the_first_nodes_address():
    environ = _srun_task(procid=1, tasks=2, nodeid=1)
    added = srun_ranks.derive(environ).environment(environ, address_of={"n1": "10.0.0.1"}.__getitem__)
    assert added["RANK"] == "1" and added["WORLD_SIZE"] == "2" and added["MASTER_ADDR"] == "10.0.0.1"
    assert added["MASTER_PORT"].isdigit()
    # LOCAL_RANK stays unset: the rank is still an srun task, whose GPU binding the mapping reads
    assert "LOCAL_RANK" not in added
    after = {**environ, **added}
    assert gpu_mapping.launcher_of(after) == gpu_mapping.SRUN
    machine = Machine.here_from(NO_GPU_FACTS, after)
    assert (machine.rank, machine.world_size, machine.local_rank, machine.local_world_size) == (1, 2, 0, 1)


@pytest.mark.no_process
def test_master_address_and_port_set_by_the_user_win():
    environ = _srun_task(procid=0, tasks=2, MASTER_ADDR="ib-node1", MASTER_PORT="29555")
    added = srun_ranks.derive(environ).environment(environ, address_of=lambda node: pytest.fail("not asked"))
    assert "MASTER_ADDR" not in added and "MASTER_PORT" not in added


@pytest.mark.no_process
def test_steps_of_one_job_get_different_ports_and_so_do_jobs():
    ports = {srun_ranks.derive(_srun_task(procid=0, tasks=2, SLURM_JOB_ID=job, SLURM_STEP_ID=step)).master_port
             for job in ("100", "101") for step in ("0", "1")}
    assert len(ports) == 4


@pytest.mark.no_process
@pytest.mark.parametrize("environ, why", [
    ({"SLURM_NTASKS": "2", "SLURM_PROCID": "0", "SLURM_NODELIST": "n1", "SLURM_JOB_ID": "7"},
     "the batch step of sbatch -n 2 (SLURM_NTASKS, no step variables): one process, which launches torchrun"),
    (_srun_task(procid=0, tasks=1, per_node="1"), "srun -n 1: commbench launches torchrun itself"),
    ({**_srun_task(procid=0, tasks=2), "RANK": "0", "WORLD_SIZE": "2"}, "RANK and WORLD_SIZE set by the user"),
    ({**_srun_task(procid=0, tasks=2), "RANK": "3", "WORLD_SIZE": "16", "LOCAL_RANK": "3",
      "LOCAL_WORLD_SIZE": "8"}, "torchrun's rank inside an srun task (commbench slurm submit)"),
    ({"PET_NNODES": "2", "PET_MASTER_ADDR": "job-0", "RANK": "1", "WORLD_SIZE": "16", "LOCAL_RANK": "1",
      "LOCAL_WORLD_SIZE": "8"}, "a k8s pod's torchrun rank"),
    ({}, "no job at all"),
])
def test_nothing_is_derived_outside_a_several_task_srun_step(environ, why):
    assert srun_ranks.derive(environ) is None, why


@pytest.mark.no_process
def test_one_task_per_node_on_gpu_nodes_is_refused_with_the_commands_that_work():
    environ = _srun_task(procid=0, tasks=2, SLURM_STEP_GPUS="0,1,2,3,4,5,6,7", CUDA_VISIBLE_DEVICES="0,1,2,3,4,5,6,7")
    derived = srun_ranks.derive(environ)
    assert isinstance(derived, srun_ranks.SrunRefusal)
    message = derived.message
    assert "\n" not in message and "8 GPU(s)" in message and "GPUs would sit idle" in message
    assert "--gpus-per-task=1" in message and "torchrun --nnodes=2 --nproc-per-node=8" in message
    assert "commbench slurm submit" in message
    # nothing is set, and whatever would launch ranks says it before any folder exists
    environ_after = dict(environ)
    assert isinstance(srun_ranks.adopt(environ_after, address_of=lambda node: node), srun_ranks.SrunRefusal)
    assert environ_after == environ
    machine = Machine.here_from({**NO_GPU_FACTS, "gpus": 8, "nccl_available": True}, environ_after)
    assert not machine.in_job and machine.launch_refused == message
    with pytest.raises(CommbenchError, match="GPUs would sit idle"):
        resolve_target(machine)


@pytest.mark.no_process
@pytest.mark.parametrize("extra, per_node", [
    ({"SLURM_STEP_GPUS": "0,1,2,3,4,5,6,7"}, "8(x2)"),  # 8 tasks on 8 GPUs, unbound: task i takes GPU i
    ({"SLURM_STEP_GPUS": "0,1,2,3,4,5,6,7", "CUDA_VISIBLE_DEVICES": "5"}, "4(x2)"),  # each task bound to its own
    ({"SLURM_GPUS_ON_NODE": "2"}, "4(x2)"),  # more tasks than GPUs: the GPU mapping's to refuse (NCCL only)
])
def test_one_task_per_gpu_is_one_rank_per_gpu(extra, per_node):
    derived = srun_ranks.derive(_srun_task(procid=0, tasks=16, per_node=per_node, **extra))
    assert isinstance(derived, srun_ranks.SrunRanks) and derived.world_size == 16


@pytest.mark.no_process
@pytest.mark.parametrize("hostlist, first", [
    ("n1", "n1"), ("n[1-2]", "n1"), ("gpu[007-009,012],login1", "gpu007"), ("a,b[1-3]", "a"),
    ("rack[2-3]-node[01-04]", "rack2-node01"), ("x[5,1-2]", "x5"), ("", None), ("n[1-2", None),
])
def test_first_node_of_a_hostlist(hostlist, first):
    assert srun_ranks.first_node(hostlist) == first


def test_a_refused_step_exits_2_in_one_line_and_launches_nothing(tmp_path):
    environ = {**commbench_env(), **_srun_task(procid=0, tasks=2, SLURM_GPUS_ON_NODE="8")}
    completed = subprocess.run([sys.executable, "-m", "commbench", "sweep", "-c", "all_reduce", "--sizes", "64K",
                                "--out", str(tmp_path / "results")], cwd=tmp_path, env=environ,
                               capture_output=True, text=True, timeout=120)
    assert completed.returncode == 2, completed.stderr
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("commbench: error: srun started 2 task(s)"), completed.stderr
    assert "Traceback" not in completed.stderr
    assert not (tmp_path / "results").exists()


# ---- real srun steps on a local Slurm cluster -------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with started(tmp_path_factory, nodes=2) as running:
        yield running


def _srun(cluster, cwd: Path, *srun_args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    environ = {**commbench_env(), "SLURM_CONF": cluster.env["SLURM_CONF"], **(env or {})}
    return subprocess.run(["srun", "--partition", cluster.partition, *srun_args], cwd=cwd, env=environ,
                          capture_output=True, text=True, timeout=300)


def _wait_for_job(environ: dict, job_id: str, timeout_s: float = 240) -> str:
    """The job's final state, polled every 0.5 s (sbatch --wait polls at 2, 8, then every 32 s)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        shown = subprocess.run(["scontrol", "show", "job", job_id], env=environ, capture_output=True, text=True,
                               timeout=30).stdout
        state = re.search(r"JobState=(\S+)", shown)
        if state and state.group(1) not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
            return state.group(1)
        time.sleep(0.5)
    return "still running"


def _one_run(results: Path) -> Path:
    folders = [path for path in results.iterdir() if path.is_dir()]
    assert len(folders) == 1, folders  # one job, not a private torchrun per task
    return folders[0]


@pytest.mark.distributed
@pytest.mark.parametrize("placement", [["-n", "2"], ["-N", "2", "-n", "2"]], ids=["one-node", "two-nodes"])
def test_srun_tasks_without_rank_make_one_world_2_run(cluster, tmp_path, placement):
    completed = _srun(cluster, tmp_path, *placement, sys.executable, "-m", "commbench", "sweep", "-c", "all_reduce",
                      "--sizes", "64K", "--iters", "6", "--backend", "gloo", "--device", "cpu", "--out", "results")
    assert completed.returncode == 0, completed.stdout + completed.stderr
    run_dir = _one_run(tmp_path / "results")
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "complete" and meta["world_size"] == 2 and len(meta["ranks"]) == 2
    assert meta["slurm_job_id"]
    # one rank per task: on two nodes each node holds one rank
    assert meta["job_cpus"]["local_ranks"] == (2 if placement == ["-n", "2"] else 1)
    results = pd.read_csv(run_dir / "results.csv")
    assert len(results) == 1 and (results["n_wrong"] == 0).all()
    assert completed.stdout.count("# Results:") == 1  # only rank 0 prints


@pytest.mark.distributed
def test_the_batch_step_keeps_launching_torchrun_itself(cluster, tmp_path):
    # sbatch -n 2's batch script sees SLURM_NTASKS=2 but is one process: it launches its own 2 ranks, as before
    environ = {**commbench_env(), "SLURM_CONF": cluster.env["SLURM_CONF"]}
    command = (f"{sys.executable} -m commbench sweep -c all_reduce --sizes 64K --iters 6 --backend gloo --device cpu "
               "--nproc 2 --out results")
    submitted = subprocess.run(["sbatch", "--parsable", "--partition", cluster.partition, "-n", "2", "--output",
                                "batch.out", "--wrap", command], cwd=tmp_path, env=environ, capture_output=True,
                               text=True, timeout=60, check=True)
    state = _wait_for_job(environ, submitted.stdout.strip().split(";")[0])
    assert state == "COMPLETED", state + (tmp_path / "batch.out").read_text()
    run_dir = _one_run(tmp_path / "results")
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "complete" and meta["world_size"] == 2
    assert "job_cpus" not in meta  # commbench placed these ranks itself, after checking the cores
