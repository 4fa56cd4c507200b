"""DDP's comm hooks and a static graph under accumulation, on real gloo ranks (tests/jobs/ddp_hooks_job.py): the
half-precision hooks all-reduce the gradients at their precision, PowerSGD compresses, and a static graph trained with
no_sync gives the gradients DDP gives without one."""

import json

import pytest

from tests.rank_jobs import run_rank_job

pytestmark = pytest.mark.distributed
NPROC = 2


@pytest.fixture(scope="module")
def observed(tmp_path_factory) -> list[dict]:
    folder = tmp_path_factory.mktemp("ddp_hooks")
    run_rank_job("ddp_hooks_job.py", NPROC, folder, outputs=[f"rank{rank}.json" for rank in range(NPROC)],
                 timeout=300)
    return [json.loads((folder / f"rank{rank}.json").read_text()) for rank in range(NPROC)]


def test_half_precision_hooks_reduce_the_same_gradients_at_their_precision_on_gloo(observed):
    for result in observed:
        errors = result["relative_error"]
        # bf16 keeps 8 bits of mantissa, fp16 11: the error is theirs, and not zero (the bytes really were halved)
        assert 0 < errors["bf16"] < 2e-2 and 0 < errors["fp16"] < 2e-3, errors
        assert errors["fp16"] < errors["bf16"]


def test_powersgd_compresses_after_its_plain_iterations(observed):
    # one bucket: with several, gloo's callback threads issue PowerSGD's all-reduces in different orders on different
    # ranks, which is why the sweeps refuse it on gloo; the registration is NCCL's too
    for result in observed:
        # a rank-1 approximation of each gradient matrix: far from the exact average, yet the same on every rank
        assert result["relative_error"]["powersgd"] > 1e-3
    assert observed[0]["relative_error"]["powersgd"] == observed[1]["relative_error"]["powersgd"]


def test_a_static_graph_with_accumulation_trains_as_ddp_does_without_one(observed):
    for result in observed:
        for static, dynamic in zip(result["static"], result["dynamic"]):
            assert static == pytest.approx(dynamic, rel=1e-5, abs=1e-6)
    for rank0, rank1 in zip(observed[0]["static"], observed[1]["static"]):
        assert rank0 == pytest.approx(rank1, rel=1e-6)  # the replicas agree
