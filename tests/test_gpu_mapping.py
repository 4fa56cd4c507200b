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


def test_srun_with_one_gpu_bound_per_task_runs_each_task_on_its_own_gpu():
    """srun --ntasks-per-node=8 --gpus-per-task=1: each task sees one device (CUDA_VISIBLE_DEVICES is its GPU) while
    8 tasks share the node; the step holds all 8 GPUs there. Refused before gpu_mapping (1 device < 8 tasks)."""
    for local_id in range(8):
        machine = machine_seeing(1, srun_task(local_id, 8, SLURM_STEP_GPUS=EIGHT_GPUS,
                                              CUDA_VISIBLE_DEVICES=str(local_id)))
        target = resolve_target(machine)
        assert (target.backend, target.device, target.nproc) == ("nccl", "cuda", 8)
        assert machine.gpu_index("nccl") == 0


def test_srun_gpu_bind_single_reads_slurm_gpus_on_node_when_the_step_lists_none():
    machine = machine_seeing(1, srun_task(5, 8, SLURM_GPUS_ON_NODE="8", CUDA_VISIBLE_DEVICES="5"))
    assert resolve_target(machine).nproc == 8 and machine.gpu_index("nccl") == 0


def test_srun_tasks_bound_in_blocks_to_numa_gpus_each_take_a_different_one():
    """--gpu-bind=closest on a 2-socket node: tasks 0-3 see GPUs 0-3, tasks 4-7 see GPUs 4-7 (4 devices each)."""
    indices = []
    for local_id in range(8):
        visible = "0,1,2,3" if local_id < 4 else "4,5,6,7"
        machine = machine_seeing(4, srun_task(local_id, 8, SLURM_STEP_GPUS=EIGHT_GPUS, CUDA_VISIBLE_DEVICES=visible))
        resolve_target(machine)
        indices.append((visible, machine.gpu_index("nccl")))
    physical = [int(visible.split(",")[index]) for visible, index in indices]
    assert physical == list(range(8))


def test_srun_without_binding_maps_the_local_id_to_a_visible_gpu():
    for local_id in range(8):
        machine = machine_seeing(8, srun_task(local_id, 8, SLURM_STEP_GPUS=EIGHT_GPUS,
                                              CUDA_VISIBLE_DEVICES=EIGHT_GPUS))
        assert resolve_target(machine).nproc == 8 and machine.gpu_index("nccl") == local_id


def test_uuids_and_mig_ids_count_as_the_devices_they_name():
    uuid = "GPU-5e6c1a2b-0000-1111-2222-333344445555"
    machine = machine_seeing(1, srun_task(1, 2, SLURM_STEP_GPUS="0,1", CUDA_VISIBLE_DEVICES=uuid))
    assert machine.visible_gpu_ids == (uuid,) and machine.gpu_index("nccl") == 0
    mig = "MIG-2b3c4d5e-6f70-8192-a3b4-c5d6e7f80912"
    with pytest.raises(CommbenchError, match=f"2 ranks on this machine exceed its 1 visible GPU.*{mig}") as refused:
        resolve_target(machine_seeing(1, torchrun(0, 2, CUDA_VISIBLE_DEVICES=mig)))
    assert "\n" not in str(refused.value) and "--nproc-per-node 1" in str(refused.value)


@pytest.mark.parametrize("environ, gpus, fragments", [
    # torchrun: every rank sees the same devices, so 8 ranks on 4 GPUs would put two on one
    (torchrun(0, 8), 4, ["8 ranks on this machine exceed its 4 visible GPU(s)", "torchrun --nproc-per-node 4"]),
    # srun without binding and a step of 1 GPU: every task sees it
    (srun_task(0, 8, SLURM_STEP_GPUS="0", CUDA_VISIBLE_DEVICES="0"), 1,
     ["8 ranks on this machine exceed its 1 visible GPU(s) (CUDA_VISIBLE_DEVICES=0)", "srun --gpus-per-task=1"]),
    # srun without any Slurm GPU facts: nothing says the tasks' devices differ
    (srun_task(0, 8), 2, ["8 ranks on this machine exceed its 2 visible GPU(s)", "--gpu-bind=single:1"]),
    # bound per task, but more tasks on the node than GPUs in the step: two tasks must share one
    (srun_task(0, 8, SLURM_STEP_GPUS="0,1,2,3", CUDA_VISIBLE_DEVICES="0"), 1,
     ["8 srun tasks on this node and the Slurm step holds 4 GPU(s) there", "one task per GPU"]),
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
    environ = torchrun(5, 8, SLURM_LOCALID="0", SLURM_NTASKS_PER_NODE="1", SLURM_STEP_GPUS=EIGHT_GPUS)
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
