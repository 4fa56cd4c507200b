"""Which GPU each rank uses (commbench/gpu_mapping.py), over the ways ranks are started: torchrun (every rank sees
every GPU), srun with a GPU bound per task (each task sees its own), srun without binding, and CUDA_VISIBLE_DEVICES
with indices, UUIDs or MIG ids. The launcher's check (resolve_target) and the rank's choice are the same function."""

import pytest

from commbench import gpu_mapping
from commbench.errors import CommbenchError
from commbench.machine import Machine, resolve_target

pytestmark = pytest.mark.no_process

GPU_FACTS = {"nccl_available": True, "nccl_version": [2, 27, 3], "gpu_capability": [9, 0]}


def machine_seeing(gpus: int, environ: dict) -> Machine:
    """This process as a rank: torch counts `gpus` devices (what CUDA_VISIBLE_DEVICES leaves), environ is its own."""
    return Machine.here_from({**GPU_FACTS, "gpus": gpus}, environ)


def torchrun(local_rank: int, local_ranks: int, **extra) -> dict:
    return {"RANK": str(local_rank), "WORLD_SIZE": str(local_ranks), "LOCAL_RANK": str(local_rank),
            "LOCAL_WORLD_SIZE": str(local_ranks), **extra}


def srun_task(local_id: int, tasks_per_node: int, **extra) -> dict:
    """An srun task running commbench in place (RANK and WORLD_SIZE exported from SLURM_PROCID, SLURM_NTASKS)."""
    return {"RANK": str(local_id), "WORLD_SIZE": str(tasks_per_node), "SLURM_LOCALID": str(local_id),
            "SLURM_PROCID": str(local_id), "SLURM_NTASKS_PER_NODE": str(tasks_per_node), "SLURM_NODEID": "0", **extra}


EIGHT_GPUS = "0,1,2,3,4,5,6,7"


def test_torchrun_ranks_see_every_gpu_and_take_their_local_rank():
    assert [machine_seeing(8, torchrun(rank, 8)).gpu_index("nccl") for rank in range(8)] == list(range(8))


# What slurmstepd sets in each task of a 4-task step holding GPUs 4-7 of an 8-GPU node (another job holds 0-3), per
# Slurm 22.05's gres_common_gpu_set_env and common_gres_set_env (src/plugins/gres/common/gres_common.c), checked on a
# real Slurm in tests/test_slurm_gpu_binding.py. SLURM_GPUS_ON_NODE counts the step's GPUs on the node in every task.
# A bound task's SLURM_STEP_GPUS and CUDA_VISIBLE_DEVICES list only what it may use: by the node's index under
# task/none ("global"); under task/cgroup with ConstrainDevices ("local") the task's cgroup holds only its GPUs and
# CUDA_VISIBLE_DEVICES counts them from 0, while SLURM_STEP_GPUS names the step's first GPU for every task (Slurm
# tests the local index 0 against the task's usable GPUs). Per task: (SLURM_STEP_GPUS, CUDA_VISIBLE_DEVICES).
STEP_OF_4 = "4,5,6,7"
SLURM_SETS = {
    ("--gres=gpu:4", "global"): [(STEP_OF_4, STEP_OF_4)] * 4,
    ("--gres=gpu:4", "local"): [(STEP_OF_4, "0,1,2,3")] * 4,
    ("--gpus-per-task=1", "global"): [("4", "4"), ("5", "5"), ("6", "6"), ("7", "7")],
    ("--gpus-per-task=1", "local"): [("4", "0")] * 4,
    ("--gpu-bind=single:1", "global"): [("4", "4"), ("5", "5"), ("6", "6"), ("7", "7")],
    ("--gpu-bind=single:1", "local"): [("4", "0")] * 4,
    ("--gpu-bind=map_gpu:7,6,5,4", "global"): [("7", "7"), ("6", "6"), ("5", "5"), ("4", "4")],
}


def slurm_task(local_id: int, tasks: int, step_gpus: str, visible: str, gpus_on_node: int) -> dict:
    return srun_task(local_id, tasks, SLURM_STEP_GPUS=step_gpus, CUDA_VISIBLE_DEVICES=visible,
                     SLURM_GPUS_ON_NODE=str(gpus_on_node))


@pytest.mark.parametrize("form, numbering", sorted(SLURM_SETS), ids=[" ".join(case) for case in sorted(SLURM_SETS)])
def test_each_srun_task_runs_on_a_gpu_of_its_own_as_slurm_sets_its_variables(form, numbering):
    """No refusal for any form, and a different GPU per task: the one CUDA_VISIBLE_DEVICES names at the task's index,
    by the node's index (global) or by its place among the step's GPUs (local, unbound); a task bound under local
    numbering takes the one device its cgroup holds, its own (tests/test_slurm_gpu_binding.py opens them)."""
    chosen = []
    for local_id, (step_gpus, visible) in enumerate(SLURM_SETS[form, numbering]):
        devices = visible.split(",")
        machine = machine_seeing(len(devices), slurm_task(local_id, 4, step_gpus, visible, 4))
        target = resolve_target(machine)
        assert (target.backend, target.device, target.nproc) == ("nccl", "cuda", 4)
        index = machine.gpu_index("nccl")
        own_cgroup = numbering == "local" and len(devices) == 1
        chosen.append(f"task {local_id}'s own" if own_cgroup else devices[index])
    assert len(set(chosen)) == 4


def test_the_step_gpus_are_slurm_gpus_on_node_never_the_tasks_own_list():
    """A bound task's SLURM_STEP_GPUS lists its own GPU; the step's count is SLURM_GPUS_ON_NODE. A Slurm older
    than 21.08 sets no SLURM_GPUS_ON_NODE: its SLURM_STEP_GPUS, right for unbound tasks, is taken."""
    assert gpu_mapping.step_gpus_on_node({"SLURM_STEP_GPUS": "5", "SLURM_GPUS_ON_NODE": "8"}) == 8
    assert gpu_mapping.step_gpus_on_node({"SLURM_STEP_GPUS": "0,1,2,3"}) == 4
    assert gpu_mapping.step_gpus_on_node({"SLURM_JOB_GPUS": "0,1"}) is None


def test_srun_tasks_bound_in_blocks_to_numa_gpus_each_take_a_different_one():
    """--gpu-bind=closest on a 2-socket node (task/none): tasks 0-3 see GPUs 0-3, tasks 4-7 see GPUs 4-7."""
    indices = []
    for local_id in range(8):
        visible = "0,1,2,3" if local_id < 4 else "4,5,6,7"
        machine = machine_seeing(4, slurm_task(local_id, 8, visible, visible, 8))
        resolve_target(machine)
        indices.append((visible, machine.gpu_index("nccl")))
    physical = [int(visible.split(",")[index]) for visible, index in indices]
    assert physical == list(range(8))


def test_uuids_and_mig_ids_count_as_the_devices_they_name():
    uuid = "GPU-5e6c1a2b-0000-1111-2222-333344445555"
    machine = machine_seeing(1, slurm_task(1, 2, "1", uuid, 2))  # gres.conf UniqueId= names the bound GPU
    assert machine.visible_gpu_ids == (uuid,) and machine.gpu_index("nccl") == 0
    mig = "MIG-2b3c4d5e-6f70-8192-a3b4-c5d6e7f80912"
    with pytest.raises(CommbenchError, match=f"2 ranks on this machine exceed its 1 visible GPU.*{mig}") as refused:
        resolve_target(machine_seeing(1, torchrun(0, 2, CUDA_VISIBLE_DEVICES=mig)))
    assert "\n" not in str(refused.value) and "--nproc-per-node 1" in str(refused.value)


@pytest.mark.parametrize("environ, gpus, fragments", [
    # torchrun: every rank sees the same devices, so 8 ranks on 4 GPUs would put two on one
    (torchrun(0, 8), 4, ["8 ranks on this machine exceed its 4 visible GPU(s)", "torchrun --nproc-per-node 4"]),
    # srun without binding and a step of 1 GPU: every task sees it
    (slurm_task(0, 8, "0", "0", 1), 1,
     ["8 ranks on this machine exceed its 1 visible GPU(s) (CUDA_VISIBLE_DEVICES=0)", "srun --gpus-per-task=1"]),
    # srun -n 8 --gres=gpu:4, no binding, either numbering: every task sees the step's 4
    (slurm_task(0, 8, STEP_OF_4, STEP_OF_4, 4), 4, ["8 ranks on this machine exceed its 4 visible GPU(s)"]),
    (slurm_task(0, 8, STEP_OF_4, "0,1,2,3", 4), 4, ["8 ranks on this machine exceed its 4 visible GPU(s)"]),
    # srun without any Slurm GPU facts: nothing says the tasks' devices differ
    (srun_task(0, 8), 2, ["8 ranks on this machine exceed its 2 visible GPU(s)", "--gpu-bind=single:1"]),
    # bound per task (--gpu-bind=single:1, either numbering), but more tasks on the node than GPUs in the step: two
    # tasks must share one
    (slurm_task(0, 8, "4", "4", 4), 1, ["8 srun tasks on this node and the Slurm step holds 4 GPU(s) there",
                                        "one task per GPU"]),
    (slurm_task(0, 8, "4", "0", 4), 1, ["8 srun tasks on this node and the Slurm step holds 4 GPU(s) there"]),
])
def test_nccl_refuses_two_ranks_on_one_gpu_in_one_line(environ, gpus, fragments):
    machine = machine_seeing(gpus, environ)
    for check in (lambda: resolve_target(machine), lambda: machine.gpu_index("nccl")):
        with pytest.raises(CommbenchError) as refused:
            check()
        message = str(refused.value)
        assert "\n" not in message and "--backend gloo" in message
        for fragment in fragments:
            assert fragment in message


def test_gloo_on_cuda_may_put_several_ranks_on_one_gpu():
    assert [machine_seeing(2, torchrun(rank, 3)).gpu_index("gloo") for rank in range(3)] == [0, 1, 0]
    machine = machine_seeing(1, torchrun(3, 4))
    assert resolve_target(machine, backend="gloo", device="cuda").nproc == 4 and machine.gpu_index("gloo") == 0


def test_a_process_that_sees_no_gpu_is_told_so():
    with pytest.raises(CommbenchError, match="sees no CUDA device"):
        gpu_mapping.gpu_index(local_rank=0, local_ranks=1, visible=0, backend="nccl")


def test_torchrun_inside_an_srun_task_ignores_the_tasks_slurm_binding():
    """commbench slurm submit: one srun task per node runs torchrun; its ranks inherit SLURM_LOCALID=0 and the one
    task's variables, which describe torchrun's process, not theirs."""
    environ = torchrun(5, 8, SLURM_LOCALID="0", SLURM_NTASKS_PER_NODE="1", SLURM_STEP_GPUS=EIGHT_GPUS,
                       SLURM_GPUS_ON_NODE="8")
    machine = machine_seeing(8, environ)
    assert (machine.launcher, machine.step_gpus, machine.local_rank, machine.local_world_size) == ("torchrun", None,
                                                                                                  5, 8)
    assert machine.gpu_index("nccl") == 5


def test_ranks_on_this_node_come_from_the_steps_task_layout():
    """SLURM_STEP_TASKS_PER_NODE lists every node's task count ("8(x2),4"); this node's is at SLURM_NODEID."""
    environ = {"RANK": "17", "WORLD_SIZE": "20", "SLURM_LOCALID": "1", "SLURM_NODEID": "2",
               "SLURM_STEP_TASKS_PER_NODE": "8(x2),4", "SLURM_NTASKS_PER_NODE": "8"}
    assert machine_seeing(4, environ).local_world_size == 4
    assert gpu_mapping.slurm_tasks_on_node({"SLURM_TASKS_PER_NODE": "2,3", "SLURM_NODEID": "1"}) == 3
    assert gpu_mapping.slurm_tasks_on_node({"SLURM_NTASKS_PER_NODE": "6"}) == 6
    assert gpu_mapping.slurm_tasks_on_node({}) is None


@pytest.mark.parametrize("value, ids", [(None, None), ("", ()), ("0,1,-1,2", ("0", "1")), (" 2, 3 ", ("2", "3")),
                                        ("GPU-aa,GPU-bb", ("GPU-aa", "GPU-bb")), ("MIG-cc", ("MIG-cc",))])
def test_cuda_visible_devices_is_read_as_cuda_reads_it(value, ids):
    environ = {} if value is None else {"CUDA_VISIBLE_DEVICES": value}
    assert gpu_mapping.visible_device_ids(environ) == ids


def test_ranks_per_gpu_counts_what_shares_a_device():
    assert gpu_mapping.ranks_per_gpu(local_ranks=8, visible=8) == 1
    assert gpu_mapping.ranks_per_gpu(local_ranks=8, visible=1, step_gpus=8) == 1  # bound per task
    assert gpu_mapping.ranks_per_gpu(local_ranks=4, visible=1) == 4  # gloo on one GPU


def test_the_rank_takes_the_gpu_the_mapping_gives():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU: the rank's platform makes its mapped GPU the current device")
    from commbench.platform import platform_for

    machine = machine_seeing(torch.cuda.device_count(), torchrun(0, 1))
    platform = platform_for(backend="nccl", device_type="cuda", machine=machine)
    assert platform.device.index == machine.gpu_index("nccl") == torch.cuda.current_device()
