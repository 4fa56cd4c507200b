"""The ZeRO paper's mixed-precision rows, run: bf16 parameters and gradients, fp32 master copies and Adam moments
(training/master_weights.py), counted from each rank's tensors against the seeds' mixed-Adam formulas."""

import pytest
import torch

from commbench.errors import CommbenchError
from commbench.models import memory
from commbench.models.shard_layout import greedy_partition
from commbench.runs import load_run
from commbench.training import plan
from commbench.training.master_weights import MasterWeightAdamW
from commbench.training.model_state import count
from commbench.training.spec import ModelShape
from commbench.training.synthetic import batch_loss, build_model, count_params, make_batch

MIXED = memory.PRESETS["mixed-adam"]
# 2 blocks of hidden 64: ZeroRedundancyOptimizer's greedy partition is exactly even at 2 ranks (checked below), so
# ZeRO-1's exact layout and the paper's 12Ψ/N agree to the byte
EVEN = ModelShape(kind="transformer", layers=2, hidden=64, heads=4, seq_len=16)


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


@pytest.mark.distributed
def test_mixed_precision_zero_rows_equal_the_papers_formulas_to_the_byte(run_commbench):
    shapes = [tuple(p.shape) for p in build_model(EVEN, seed=0).parameters()]
    sizes = [sum(torch.Size(shapes[i]).numel() for i in part) for part in greedy_partition(shapes, 2)]
    assert sizes[0] == sizes[1], "the model no longer splits evenly: pick another EVEN shape"
    run = run_commbench("zero", "--strategy", "ddp,zero1,zero3", "--mixed-precision", "bf16", "--master-weights",
                        "true", "--layers", "2", "--hidden", "64", "--seq-len", "16", "--micro-batch", "1",
                        "--steps", "6", "--profile-steps", "0", "--isolation", "reset", timeout=400)
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
    # FSDP2's bf16 policy: fp32 shards (the master copy), fp32 gradients and moments: 4 + 4 + 8 = 16 per element
    assert rows["zero3"]["model_state_bytes"] == 16 * psi // n
    assert rows["zero1"]["master_weights"] is True or str(rows["zero1"]["master_weights"]) == "True"
