"""The timed training step trains on micro-batches drawn on the device before timing: it draws and copies nothing."""

import math

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from commbench.training.batches import POOL_SIZE, BatchPool, pool_entry
from commbench.training.spec import ModelShape
from commbench.training.step import step_function
from commbench.training.synthetic import build_model, make_batch

SHAPE = ModelShape(kind="transformer", layers=2, hidden=64, heads=4, seq_len=8)
MICRO_BATCH = 2
# every way torch draws random tensors; make_batch's randint records as aten::randint and aten::random_
RANDOM_OPS = {"aten::randn", "aten::normal_", "aten::rand", "aten::uniform_", "aten::randint", "aten::random_"}


def _made(device: torch.device, *, accum_steps: int = 2, precision: str = "fp32", impl: str = "ddp"):
    """A model, its pool and the step the sweep times, built as training/measure.py builds them."""
    model = build_model(SHAPE, seed=0, device=device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    pool = BatchPool(SHAPE, micro_batch=MICRO_BATCH, seed=0, rank=0, device=device)
    step = step_function(model, optimizer, pool, accum_steps=accum_steps, precision=precision, impl=impl,
                         device=device)
    return model, pool, step


def _entries_seen(model, pool: BatchPool) -> list[int]:
    """Records, per forward call, which pool entry the input tensor is (-1: a tensor not from the pool)."""
    seen = []

    def record(module, args):
        seen.append(next((entry for entry, (inputs, _) in enumerate(pool.batches) if args[0] is inputs), -1))

    model.register_forward_pre_hook(record)
    return seen


def _drawn_ops(step, steps: int) -> list[str]:
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        for _ in range(steps):
            step()
    return [event.name for event in profiler.events() if event.name in RANDOM_OPS]


@pytest.mark.no_process
def test_the_timed_step_draws_no_random_numbers_and_trains_on_the_pools_tensors():
    model, pool, step = _made(torch.device("cpu"))
    seen = _entries_seen(model, pool)
    assert _drawn_ops(step, steps=3) == []
    # micro-batch k (step × accum + micro) trains on entry k mod POOL_SIZE, the very tensor drawn before timing
    assert seen == [pool_entry(k) for k in range(3 * 2)] == [0, 1, 2, 3, 0, 1]


@pytest.mark.no_process
def test_the_pool_is_a_pure_function_of_seed_rank_and_micro_batch_and_stays_small():
    pool = BatchPool(SHAPE, micro_batch=MICRO_BATCH, seed=5, rank=1, device="cpu")
    again = BatchPool(SHAPE, micro_batch=MICRO_BATCH, seed=5, rank=1, device="cpu")
    other_rank = BatchPool(SHAPE, micro_batch=MICRO_BATCH, seed=5, rank=0, device="cpu")
    for step in range(3):
        for micro, (inputs, targets) in enumerate(pool.for_step(step, accum_steps=3)):
            expected = make_batch(SHAPE, micro_batch=MICRO_BATCH, seed=5, step=pool_entry(step * 3 + micro), rank=1)
            assert torch.equal(inputs, expected[0]) and torch.equal(targets, expected[1])
    assert all(torch.equal(a, b) for first, second in zip(pool.batches, again.batches) for a, b in zip(first, second))
    assert not torch.equal(pool.batches[0][0], other_rank.batches[0][0])
    # POOL_SIZE micro-batches of inputs and targets (int64 token ids), however many steps run
    assert len(pool.batches) == POOL_SIZE
    assert pool.nbytes == POOL_SIZE * 2 * MICRO_BATCH * SHAPE.seq_len * 8


@pytest.mark.no_process
def test_steps_on_the_pool_train():
    model, _, step = _made(torch.device("cpu"), accum_steps=1)
    before = [parameter.detach().clone() for parameter in model.parameters()]
    losses = [step() for _ in range(3)]
    assert all(math.isfinite(loss) for loss in losses)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: the pool is drawn on the GPU there")
@pytest.mark.no_process
def test_on_a_gpu_the_pool_is_drawn_on_the_gpu_and_the_bf16_step_draws_nothing():
    device = torch.device("cuda", 0)
    model, pool, step = _made(device, precision="bf16")
    assert all(tensor.device == device for batch in pool.batches for tensor in batch)
    seen = _entries_seen(model, pool)
    step()  # the first bf16 step builds autocast's cast cache; the timed steps come after warm-up too
    assert _drawn_ops(step, steps=2) == []
    assert seen == [0, 1, 2, 3, 0, 1]
