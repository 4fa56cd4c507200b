"""One optimizer step over `accum_steps` micro-batches; DDP skips the gradient sync on all but the last."""

import contextlib

import torch
import torch.nn.functional as F

from commbench.training.synthetic import ModelShape, make_batch


def train_step(model, optimizer, *, shape: ModelShape, micro_batch: int, accum_steps: int, seed: int, step: int,
               rank: int, device: torch.device) -> float:
    """Returns the mean loss over the micro-batches of this rank."""
    optimizer.zero_grad(set_to_none=True)
    total = 0.0
    for micro in range(accum_steps):
        inputs, targets = make_batch(shape, micro_batch=micro_batch, seed=seed, step=step * accum_steps + micro,
                                     rank=rank, device=device)
        last = micro == accum_steps - 1
        no_sync = getattr(model, "no_sync", None)
        with contextlib.nullcontext() if last or no_sync is None else no_sync():
            loss = F.mse_loss(model(inputs), targets) / accum_steps
            loss.backward()
        total += float(loss.detach())
    optimizer.step()
    return total
