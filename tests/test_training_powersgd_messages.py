"""PowerSGD's predicted messages (training/powersgd_messages.py): hand-computed sizes, and torch's own powerSGD_hook
registered as the sweeps register it, run on a one-rank gloo group in this process (PowerSGD needs NCCL across ranks;
on one rank its all-reduces cannot mismatch), whose all-reduces are the predicted ones on DDP's real buckets."""

import math

import pytest
import torch
import torch.distributed as dist

from commbench.training import ddp_buckets
from commbench.training.powersgd_messages import bucket_messages, powersgd_traffic, predicted_traffic, step_messages
from commbench.training.spec import ModelShape
from commbench.training.synthetic import batch_loss, build_model
from commbench.training.wrappers import apply_ddp

TINY = ModelShape(layers=2, hidden=64, heads=4, seq_len=8, vocab=96)


@pytest.mark.no_process
def test_each_gradient_is_compressed_only_where_rank_r_factors_halve_it_at_least():
    # (12, 4): (12+4)·1·2 = 32 < 48, compressed: P 12, Q 4. (12,) is 12 × 1: 26 ≥ 12, sent whole. (3, 2, 5) is viewed
    # as 3 × 10: 26 < 30, compressed: P 3, Q 10. (1, 7): 16 ≥ 7, sent whole
    assert bucket_messages([(12, 4), (12,), (3, 2, 5), (1, 7)]) == (12 + 7, 12 + 3, 4 + 10)
    # rank 4 on 64 × 64: (64+64)·4·2 = 1024 < 4096; on 12 × 4 the rank is min(12, 4, 4) = 4: 128 ≥ 48, sent whole
    assert bucket_messages([(64, 64), (12, 4)], rank=4) == (48, 256, 256)
    # a bucket of vectors only still all-reduces empty P and Q buffers; one of matrices only, an empty first message
    assert step_messages([[(5,), (7,)], [(64, 64)]]) == [12, 0, 0, 0, 64, 64]


@pytest.mark.no_process
def test_the_bytes_are_a_ring_all_reduce_of_each_message():
    traffic = powersgd_traffic([[(64, 64), (64,)]], world=4, element_bytes=4)
    assert traffic.msg_elements == 64 + 64 + 64
    assert traffic.bytes_sent_per_rank == pytest.approx(2 * 3 / 4 * 192 * 4)
    assert powersgd_traffic([[(64, 64)]], world=1, element_bytes=4).bytes_sent_per_rank == 0


@pytest.mark.no_process
def test_torchs_powersgd_hook_sends_the_predicted_messages_on_ddps_real_buckets(tmp_path, monkeypatch):
    cap_mb = 0.05  # several buckets for this model, each holding matrices and vectors
    buckets = ddp_buckets.predicted_bucket_shapes(TINY, cap_mb, None)
    assert len(buckets) >= 4
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        ddp = apply_ddp(build_model(TINY, seed=0, device=torch.device("cpu")), device=torch.device("cpu"),
                        bucket_cap_mb=cap_mb, comm_hook="powersgd")
        sent: list[int] = []
        all_reduce = dist.all_reduce

        def recorded(tensor, *args, **kwargs):  # the hook calls dist.all_reduce, looked up at each call
            sent.append(tensor.numel())
            work = all_reduce(tensor, *args, **kwargs)
            if work is not None:
                # finished here, so the hook's .then() callbacks run inline in this thread: on gloo's two worker
                # threads, two buckets' callbacks could each wait on a nested all-reduce queued behind the other
                # (the test hung so, now and then)
                work.wait()
            return work

        monkeypatch.setattr(dist, "all_reduce", recorded)
        inputs, targets = (torch.randint(0, TINY.vocab, (2, TINY.seq_len)) for _ in range(2))
        per_step = []
        for _ in range(4):  # two plain iterations (DDP rebuilds its buckets after the first), then compressed ones
            sent.clear()
            ddp.zero_grad(set_to_none=True)
            batch_loss(ddp(inputs), targets).backward()
            per_step.append(list(sent))
        rebuilt = ddp._get_ddp_logging_data()["rebuilt_bucket_sizes"]
    finally:
        dist.destroy_process_group()
    assert [int(size) for size in rebuilt.split(",")] == list(ddp_buckets.predicted_buckets(TINY, cap_mb, None))
    assert per_step[1] == [sum(math.prod(size) for size in bucket) for bucket in buckets]  # plain: the buckets
    for step in per_step[2:]:
        assert sorted(step) == sorted(step_messages(buckets))  # gloo may finish buckets out of order
    traffic = predicted_traffic(TINY, cap_mb=cap_mb, first_mb=None, world=1, element_bytes=4)
    assert traffic.msg_elements == sum(per_step[3]) < sum(per_step[1])
