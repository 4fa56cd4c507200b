"""Resolving auto choices and refusing impossible targets, for stated machine facts (GPU count, NCCL present)."""

import pytest

from commbench.backends import resolve_target, unsupported_reason
from commbench.errors import CommbenchError


def resolve(**kwargs):
    facts = dict(backend="auto", device="auto", nproc=None, world_size_in_job=None, gpus=0, nccl_available=False)
    facts.update(kwargs)
    return resolve_target(**facts)


def test_cpu_machine_defaults_to_gloo_with_two_ranks():
    target = resolve()
    assert (target.backend, target.device, target.nproc) == ("gloo", "cpu", 2)


def test_gpu_machine_defaults_to_nccl_on_every_gpu():
    target = resolve(gpus=8, nccl_available=True)
    assert (target.backend, target.device, target.nproc) == ("nccl", "cuda", 8)


def test_gloo_by_name_means_cpu_unless_cuda_is_asked_for():
    assert resolve(backend="gloo", gpus=1, nccl_available=True).device == "cpu"
    assert resolve(backend="gloo", device="cuda", nproc=2, gpus=1, nccl_available=True).device == "cuda"


def test_nccl_needs_one_gpu_per_rank():
    with pytest.raises(CommbenchError, match="exceed its 1 visible GPU"):
        resolve(nproc=2, gpus=1, nccl_available=True)


def test_nccl_inside_a_job_checks_the_ranks_on_this_machine():
    assert resolve(world_size_in_job=16, local_world_size=8, gpus=8, nccl_available=True).nproc == 16
    with pytest.raises(CommbenchError, match="9 ranks on this machine"):
        resolve(world_size_in_job=16, local_world_size=9, gpus=8, nccl_available=True)


def test_world_size_one_is_allowed():
    assert resolve(nproc=1).nproc == 1


def test_old_nccl_has_no_avg():
    reason = unsupported_reason(backend="nccl", device="cuda", collective="all_reduce", dtype="float32", op="avg",
                                nccl_version=(2, 9, 9))
    assert "needs 2.10+" in reason
    assert unsupported_reason(backend="nccl", device="cuda", collective="all_reduce", dtype="float32", op="avg",
                              nccl_version=(2, 21, 5)) is None
