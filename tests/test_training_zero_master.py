"""The ZeRO paper's mixed-precision rows, run: bf16 parameters and gradients, fp32 master copies and Adam moments
(training/master_weights.py), counted from each rank's tensors against the seeds' mixed-Adam formulas."""

import pytest
import torch
import torch.distributed as dist

from commbench.errors import CommbenchError
from commbench.models import comm_volume, memory
from commbench.models.shard_layout import greedy_partition, local_state, overlap_partition, zero2_buckets
from commbench.runs import load_run
from commbench.training import plan
from commbench.training.master_weights import MasterWeightAdamW
from commbench.training.model_state import count
from commbench.training.spec import ModelShape, TrainConfig, TrainSpec, validate
from commbench.training.synthetic import batch_loss, build_model, count_params, make_batch
from commbench.training.zero2 import Zero2AdamW
from tests.refusals import assert_refused, invoke

MIXED = memory.PRESETS["mixed-adam"]
# 2 blocks of hidden 64: ZeroRedundancyOptimizer's greedy partition is exactly even at 2 ranks (checked below), so
# ZeRO-1's exact layout and the paper's 12Ψ/N agree to the byte; every parameter has an even number of elements, so
# ZeRO-2's buckets need no padding at 2 ranks whatever the cap, and its layout is the paper's 14Ψ/N exactly
EVEN = ModelShape(kind="transformer", layers=2, hidden=64, heads=4, seq_len=16)
ZERO2_CAP_MB = 0.1  # three ZeRO-2 buckets for EVEN (embedding; a block and a half; the rest): reductions overlap


@pytest.mark.no_process
def test_master_weight_adamw_holds_the_mixed_adam_bytes_and_steps_as_fp32_adamw():
    model = build_model(EVEN, seed=0).to(torch.bfloat16)
    reference = build_model(EVEN, seed=0)  # fp32 AdamW from the same bf16-rounded start
    with torch.no_grad():
        for ours, theirs in zip(model.parameters(), reference.parameters()):
            theirs.copy_(ours.float())
    optimizer, fp32 = MasterWeightAdamW(model.parameters(), lr=1e-3), torch.optim.AdamW(reference.parameters(),
                                                                                       lr=1e-3)
    inputs, targets = make_batch(EVEN, micro_batch=2, seed=0, step=0, rank=0)
    batch_loss(model(inputs), targets).backward()
    for ours, theirs in zip(model.parameters(), reference.parameters()):
        theirs.grad = ours.grad.float()
    optimizer.step()
    fp32.step()
    state = count(model, optimizer)
    psi = count_params(EVEN)
    predicted = memory.state_per_rank("ddp", params=psi, ranks=1, state=MIXED)
    assert (state.param_bytes, state.grad_bytes, state.optim_bytes) == (
        predicted.param_bytes, predicted.grad_bytes, predicted.optim_bytes) == (2 * psi, 2 * psi, 12 * psi)
    for ours, theirs in zip(model.parameters(), reference.parameters()):
        assert torch.allclose(optimizer.state[ours]["master"], theirs, rtol=0, atol=1e-6)
        assert ours.dtype == torch.bfloat16 and torch.equal(ours, theirs.to(torch.bfloat16))


@pytest.mark.no_process
def test_master_weights_are_refused_where_nothing_would_use_them():
    with pytest.raises(CommbenchError, match="--mixed-precision bf16"):
        plan.strategy_configs(strategies=("zero1",), impl="fsdp2", shard_group=None, bucket_cap_mb=None,
                              accum_steps=(1,), world=2, precisions=("fp32",), master_weights=(True,))
    with pytest.raises(CommbenchError, match="--strategy zero1"):
        plan.strategy_configs(strategies=("zero3",), impl="fsdp2", shard_group=None, bucket_cap_mb=None,
                              accum_steps=(1,), world=2, precisions=("bf16",), master_weights=(True,))
    configs = plan.strategy_configs(strategies=("zero1", "zero3"), impl="fsdp2", shard_group=None,
                                    bucket_cap_mb=None, accum_steps=(1,), world=2, precisions=("fp32", "bf16"),
                                    master_weights=(True,))
    assert [(c.strategy, c.mixed_precision, c.master_weights) for c in configs] == [
        ("zero1", "fp32", None), ("zero1", "bf16", True), ("zero3", "fp32", None), ("zero3", "bf16", None)]


@pytest.mark.no_process
def test_zero2_buckets_follow_backward_and_pad_each_bucket_to_a_multiple_of_the_ranks():
    shapes = [(5, 3), (7,), (4, 4), (3,)]  # 15, 7, 16 and 3 elements
    cap_mb = 40 / 2**20  # 40 bytes: 20 bf16 gradient elements
    # from the last parameter back: 3 + 16 elements (38 bytes) stay open, + 7 closes the bucket; 15 are left
    buckets = zero2_buckets(shapes, 3, cap_mb)
    assert [(b.params, b.elements, b.shard) for b in buckets] == [((3, 2, 1), 26, 9), ((0,), 15, 5)]
    # every rank: the whole 41 parameters, and a 9 + 5 element slice (one padding element) of gradients and state
    for rank in range(3):
        held = local_state(impl="zero2", units=[shapes], rank=rank, world=3, bucket_cap_mb=cap_mb)
        assert (held.param_elements, held.grad_elements, held.optim_elements) == (41, 14, 14)
    assert local_state(impl="zero2", units=[shapes], rank=0, world=3).grad_elements == 14  # 25 MiB: one bucket
    # two micro-batches: two reduce-scatters of the 42 padded elements, then one all-gather, all in bf16
    traffic = comm_volume.training_traffic(strategy="zero2", impl="zero2", units=[shapes], world=3, accum_steps=2,
                                           gather_bytes=2, reduce_bytes=2, bucket_cap_mb=cap_mb)
    assert traffic.msg_elements == 3 * 42 and traffic.bytes_sent_per_rank == pytest.approx(2 / 3 * 42 * (2 * 2 + 2))


@pytest.mark.no_process
def test_zero1_with_overlap_partitions_by_ddp_buckets_round_robin():
    shapes = [(5, 3), (7,), (4, 4), (3,)]
    # fp32 gradients, DDP limits [40, 64] bytes: (3, 16 elements = 76 B) closes the first, (7, 15 = 88 B) the second
    assert overlap_partition(shapes, 2, [40, 64]) == [[3, 2], [1, 0]]
    assert overlap_partition(shapes, 3, [40, 64]) == [[3, 2], [1, 0], []]
    optim = [local_state(impl="zero1", units=[shapes], rank=r, world=2, ddp_bucket_limits=[40, 64]).optim_elements
             for r in range(2)]
    assert optim == [19, 22]


@pytest.fixture
def one_rank_group():
    """A gloo process group of one rank in this process: Zero2AdamW's collectives, without a launch."""
    if dist.is_initialized():
        pytest.skip("a process group already exists in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.mark.no_process
def test_partitioned_zero2_steps_as_master_weight_adamw_and_holds_the_papers_bytes(one_rank_group):
    model, reference = (build_model(EVEN, seed=0).to(torch.bfloat16) for _ in range(2))
    optimizer = Zero2AdamW(model, lr=1e-3, bucket_cap_mb=ZERO2_CAP_MB)
    expected = MasterWeightAdamW(reference.parameters(), lr=1e-3)
    assert len(optimizer.buckets) == 3
    for step in range(2):
        for net, opt in ((model, optimizer), (reference, expected)):
            opt.zero_grad(set_to_none=True)
            for micro in range(2):  # accumulated: ZeRO-2 reduces each micro-batch into its gradient shards
                inputs, targets = make_batch(EVEN, micro_batch=2, seed=0, step=2 * step + micro, rank=0)
                (batch_loss(net(inputs), targets) / 2).backward()
            opt.step()
        assert all(p.grad is None for p in model.parameters())  # only the shards are kept
        for ours, theirs in zip(model.parameters(), reference.parameters()):
            assert torch.equal(ours, theirs)
    psi = count_params(EVEN)
    state = count(model, optimizer)
    assert (state.param_bytes, state.grad_bytes, state.optim_bytes) == (2 * psi, 2 * psi, 12 * psi)
    predicted = local_state(impl="zero2", units=[[tuple(p.shape) for p in model.parameters()]], rank=0, world=1,
                            bucket_cap_mb=ZERO2_CAP_MB)
    assert predicted.bytes(MIXED) == 16 * psi


def _spec(configs, **overrides) -> TrainSpec:
    fields = {"bench": "strategy", "configs": tuple(configs), "shape": EVEN, "micro_batch": 1, "steps": 10,
              "warmup_steps": 2, "profile_steps": 0, "seed": 0, "lr": 1e-3, "backend": "gloo", "device": "cpu",
              "nproc": 2, **overrides}
    return TrainSpec(**fields)


@pytest.mark.no_process
def test_zero2_under_master_weights_is_the_partitioned_one_and_overlap_is_refused_where_torch_cannot_run_it():
    configs = plan.strategy_configs(strategies=("zero2",), impl="fsdp2", shard_group=None, bucket_cap_mb=None,
                                    accum_steps=(1,), world=2, precisions=("fp32", "bf16"),
                                    master_weights=(False, True))
    assert [(c.impl, c.mixed_precision, c.master_weights) for c in configs] == [
        ("fsdp2", "fp32", None), ("fsdp2", "bf16", None), ("zero2", "bf16", True)]
    validate(_spec(configs))
    with pytest.raises(CommbenchError, match="gloo cannot run zero2 on CUDA tensors: they need reduce_scatter"):
        validate(_spec(configs[2:], device="cuda"))
    with pytest.raises(CommbenchError, match="--master-weights true"):
        validate(_spec([TrainConfig(strategy="zero2", impl="zero2", mixed_precision="bf16")]))
    zero1 = plan.strategy_configs(strategies=("zero1",), impl="fsdp2", shard_group=None, bucket_cap_mb=None,
                                  accum_steps=(1,), world=2, precisions=("bf16",), master_weights=(False,),
                                  overlap_with_ddp=(False, True))
    assert [c.overlap_with_ddp for c in zero1] == [False, True]
    overlap = zero1[1]
    # torch 2.13's hook_with_zero_step raises RuntimeError on gloo: refused before launch instead
    with pytest.raises(CommbenchError, match="needs --backend nccl"):
        validate(_spec([overlap], warmup_steps=3))
    with pytest.raises(CommbenchError, match="--warmup-steps 3 or more"):
        validate(_spec([overlap], backend="nccl", device="cuda"))
    with pytest.raises(CommbenchError, match="no functional form"):
        validate(_spec([TrainConfig(strategy="zero1", impl="zero1", mixed_precision="bf16", master_weights=True,
                                    overlap_with_ddp=True)], backend="nccl", device="cuda", warmup_steps=3))
    validate(_spec([overlap], backend="nccl", device="cuda", warmup_steps=3))


@pytest.mark.parametrize("args, fragment", [
    (["--strategy", "ddp", "--overlap-with-ddp", "true"], "--overlap-with-ddp applies to zero1 only"),
    (["--strategy", "zero1", "--overlap-with-ddp", "true"], "--overlap-with-ddp true needs --backend nccl"),
    (["--strategy", "zero3", "--bucket-cap-mb", "1"], "--bucket-cap-mb 1 applies to ddp, zero1 and zero2"),
])
@pytest.mark.no_process
def test_zero_options_that_cannot_run_are_refused_in_one_line(tmp_path, args, fragment):
    result = invoke(["zero", *args, "--backend", "gloo", "--device", "cpu", "--out", str(tmp_path / "out")])
    assert_refused(result, fragment=fragment)


@pytest.mark.distributed
def test_mixed_precision_zero_rows_equal_the_papers_formulas_to_the_byte(run_commbench):
    shapes = [tuple(p.shape) for p in build_model(EVEN, seed=0).parameters()]
    sizes = [sum(torch.Size(shapes[i]).numel() for i in part) for part in greedy_partition(shapes, 2)]
    assert sizes[0] == sizes[1], "the model no longer splits evenly: pick another EVEN shape"
    buckets = zero2_buckets(shapes, 2, ZERO2_CAP_MB)
    assert len(buckets) == 3 and all(2 * b.shard == b.elements for b in buckets), "ZeRO-2 would pad: pick another"
    run = run_commbench("zero", "--strategy", "ddp,zero1,zero2,zero3", "--mixed-precision", "bf16", "--master-weights",
                        "true", "--bucket-cap-mb", str(ZERO2_CAP_MB), "--layers", "2", "--hidden", "64", "--seq-len",
                        "16", "--micro-batch", "1", "--steps", "6", "--profile-steps", "1", "--isolation", "reset")
    assert run.returncode == 0, run.stderr[-3000:]
    rows = {row["strategy"]: row for row in load_run(run.run_dir).results.to_dict("records")}
    psi, n = rows["ddp"]["params"], 2
    assert psi == count_params(EVEN)
    for row in rows.values():
        assert row["n_wrong"] == 0 and row["model_state_exact_ranks"] == n
        assert row["model_state_bytes"] == row["model_state_bytes_predicted"] == row["model_state_bytes_formula"]
    # the seeds' mixed-Adam rows (P2 G2 O12): DDP 16Ψ, ZeRO-1 4Ψ + 12Ψ/N, ZeRO-3 16Ψ/N
    assert rows["ddp"]["model_state_bytes"] == 16 * psi
    assert rows["zero1"]["model_state_bytes"] == 4 * psi + 12 * psi // n
    assert (rows["zero1"]["model_param_bytes"], rows["zero1"]["model_grad_bytes"]) == (2 * psi, 2 * psi)
    assert rows["zero1"]["model_optim_bytes"] == 12 * psi // n
    # the paper's ZeRO-2 (training/zero2.py): whole bf16 parameters, bf16 gradient shards, master and moments sharded
    zero2 = rows["zero2"]
    assert (zero2["impl"], zero2["model_state_formula"]) == ("zero2", "ZeRO-2")
    assert zero2["model_state_bytes"] == 2 * psi + 14 * psi // n
    assert (zero2["model_param_bytes"], zero2["model_grad_bytes"], zero2["model_optim_bytes"]) == (
        2 * psi, 2 * psi // n, 12 * psi // n)
    # one reduce-scatter and one all-gather of each (unpadded) bucket, as the trace counts them
    assert zero2["comm_msg_elems"] == zero2["comm_msg_elems_predicted"] == 2 * psi
    assert zero2["compute_baseline"] == "unsharded local copy"
    # the same arithmetic as DDP with MasterWeightAdamW: at 2 ranks each gradient is (a/2 + b/2) rounded once in both,
    # so after every warm-up and timed step the loss is the same number
    assert zero2["loss_last"] == rows["ddp"]["loss_last"]
    # FSDP2's bf16 policy: fp32 shards (the master copy), fp32 gradients and moments: 4 + 4 + 8 = 16 per element
    assert rows["zero3"]["model_state_bytes"] == 16 * psi // n
    assert rows["zero1"]["master_weights"] is True or str(rows["zero1"]["master_weights"]) == "True"
