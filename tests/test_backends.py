"""Resolving auto choices and refusing impossible targets against a stated Machine (GPU count, NCCL, the job)."""

import os
import subprocess
import sys

import pytest

from commbench.backends import unsupported_reason
from commbench.errors import CommbenchError
from commbench.machine import Machine, resolve_target


def resolve(*, gpus=0, nccl_available=False, world_size_in_job=None, local_world_size=None, **options):
    machine = Machine(gpus=gpus, nccl_available=nccl_available, rank=0 if world_size_in_job else None,
                      world_size=world_size_in_job, local_world_size=local_world_size)
    return resolve_target(machine, **options)


@pytest.mark.no_process
def test_cpu_machine_defaults_to_gloo_with_two_ranks():
    target = resolve()
    assert (target.backend, target.device, target.nproc) == ("gloo", "cpu", 2)


@pytest.mark.no_process
def test_gpu_machine_defaults_to_nccl_on_every_gpu():
    target = resolve(gpus=8, nccl_available=True)
    assert (target.backend, target.device, target.nproc) == ("nccl", "cuda", 8)


@pytest.mark.no_process
def test_gloo_by_name_means_cpu_unless_cuda_is_asked_for():
    assert resolve(backend="gloo", gpus=1, nccl_available=True).device == "cpu"
    assert resolve(backend="gloo", device="cuda", nproc=2, gpus=1, nccl_available=True).device == "cuda"


@pytest.mark.no_process
def test_nccl_needs_one_gpu_per_rank():
    with pytest.raises(CommbenchError, match="exceed its 1 visible GPU"):
        resolve(nproc=2, gpus=1, nccl_available=True)


@pytest.mark.no_process
def test_nccl_inside_a_job_checks_the_ranks_on_this_machine():
    assert resolve(world_size_in_job=16, local_world_size=8, gpus=8, nccl_available=True).nproc == 16
    with pytest.raises(CommbenchError, match="9 ranks on this machine"):
        resolve(world_size_in_job=16, local_world_size=9, gpus=8, nccl_available=True)


@pytest.mark.no_process
def test_world_size_one_is_allowed():
    assert resolve(nproc=1).nproc == 1


@pytest.mark.no_process
def test_old_nccl_has_no_avg():
    reason = unsupported_reason(backend="nccl", device="cuda", collective="all_reduce", dtype="float32", op="avg",
                                nccl_version=(2, 9, 9))
    assert "needs 2.10+" in reason
    assert unsupported_reason(backend="nccl", device="cuda", collective="all_reduce", dtype="float32", op="avg",
                              nccl_version=(2, 21, 5)) is None


@pytest.mark.no_process
def test_a_slurm_jobs_nodes_are_stated_not_read_from_this_machine():
    machine = Machine.for_job(nodes=2, ranks_per_node=8, gpus_per_node=8)
    assert machine.in_job and machine.world_size == 16 and machine.local_world_size == 8
    target = resolve_target(machine)
    assert (target.backend, target.device, target.nproc) == ("nccl", "cuda", 16)
    with pytest.raises(CommbenchError, match="no CUDA GPU is visible"):
        resolve_target(Machine.for_job(nodes=1, ranks_per_node=2, gpus_per_node=0), device="cuda")


@pytest.mark.no_process
def test_machine_here_reads_the_job_from_the_given_environment():
    alone = Machine.here({})
    assert not alone.in_job and alone.rank is None
    rank = Machine.here({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"})
    assert (rank.rank, rank.world_size, rank.local_rank, rank.local_world_size) == (3, 4, 1, 2)


@pytest.mark.no_process
def test_the_planning_tables_agree_with_torch():
    """The launcher plans with element sizes and float-ness by name (it does not import torch); the ranks use torch's
    dtypes. They must agree, or a sweep would be planned with other layouts than it measures."""
    import torch

    from commbench.backends import DTYPES
    from commbench.names import DTYPE_BYTES, FLOATING_DTYPES

    assert set(DTYPE_BYTES) == set(DTYPES) >= FLOATING_DTYPES
    for name, dtype in DTYPES.items():
        assert DTYPE_BYTES[name] == dtype.itemsize
        assert (name in FLOATING_DTYPES) == dtype.is_floating_point
    assert DTYPES["bfloat16"] is torch.bfloat16


def test_planning_a_sweep_imports_no_torch():
    script = ("import sys\n"
              "from commbench.benches.collective import KIND\n"
              "from commbench.sweep.spec import plan, validate\n"
              "from commbench.sweep.memory_plan import check_fits\n"
              "from commbench.gpu_mapping import gpu_index\n"
              "from commbench.sweep.table import format_tables\n"
              "from commbench import runinfo\n"
              "from commbench.execution import session\n"
              "print('torch' in sys.modules)\n")
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert completed.stdout.strip() == "False", completed.stderr


@pytest.mark.no_process
def test_bind_cores_gives_each_launched_cpu_rank_a_core_of_its_own():
    usable = sorted(os.sched_getaffinity(0))
    target = resolve(nproc=1, bind_cores=True)
    assert target.cores == (usable[0],)
    assert resolve(nproc=1).cores is None  # unpinned unless asked


@pytest.mark.no_process
@pytest.mark.parametrize("options, fragment", [
    (dict(nproc=len(os.sched_getaffinity(0)) + 1, oversubscribe=True, bind_cores=True), "needs a core per rank"),
    (dict(gpus=1, nccl_available=True, bind_cores=True), "pins CPU ranks"),
    (dict(world_size_in_job=2, bind_cores=True), "inside torchrun or srun, bind with your launcher"),
])
def test_bind_cores_refuses_what_it_cannot_pin(options, fragment):
    with pytest.raises(CommbenchError, match=fragment):
        resolve(**options)


@pytest.mark.no_process
@pytest.mark.parametrize("capability, refused", [((8, 0), True), ((9, 0), False), ((10, 0), False), (None, False)])
def test_fp8_needs_hopper_or_newer_as_nccl_tests_says(capability, refused):
    """nccl-tests leaves fp8 out below compute capability 9.0 (NCCL's fp8 types need SM 90); so does commbench, from
    the capability NVML reports (None: unknown, not refused here)."""
    from commbench.backends import unsupported_reason

    reason = unsupported_reason(backend="nccl", device="cuda", collective="all_reduce", dtype="float8_e4m3", op="sum",
                                nccl_version=(2, 27, 3), gpu_capability=capability)
    assert (reason is not None) == refused
    if refused:
        assert "compute capability 9.0" in reason and "8.0" in reason
    assert unsupported_reason(backend="nccl", device="cuda", collective="all_reduce", dtype="bfloat16", op="sum",
                              nccl_version=(2, 27, 3), gpu_capability=capability) is None


@pytest.mark.no_process
def test_the_machine_carries_the_gpus_capability_from_its_facts():
    from commbench.machine import Machine

    facts = {"gpus": 8, "nccl_available": True, "nccl_version": [2, 27, 3], "gpu_capability": [9, 0]}
    assert Machine.here_from(facts, environ={}).gpu_capability == (9, 0)
    assert Machine.here_from({**facts, "gpu_capability": None}, environ={}).gpu_capability is None
