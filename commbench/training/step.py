"""One optimizer step over `accum_steps` micro-batches; the gradient sync is skipped on all but the last."""

import contextlib

import torch
import torch.nn.functional as F

from commbench.training.synthetic import ModelShape, make_batch


@contextlib.contextmanager
def gradient_sync(model, enabled: bool):
    """DDP and FSDP1 skip the sync inside no_sync(); FSDP2 modules through set_requires_gradient_sync."""
    if enabled:
        yield
    elif hasattr(model, "set_requires_gradient_sync"):
        model.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)
    elif hasattr(model, "no_sync"):
        with model.no_sync():
            yield
    else:
        yield


def train_step(model, optimizer, *, shape: ModelShape, micro_batch: int, accum_steps: int, seed: int, step: int,
               rank: int, device: torch.device, sync: bool = True) -> float:
    """Returns the mean loss over the micro-batches of this rank. sync False skips the gradient sync on every
    micro-batch (DDP's no_sync baseline: the same step without its gradient communication)."""
    optimizer.zero_grad(set_to_none=True)
    total = torch.zeros((), device=device)  # summed on the device: no host sync per micro-batch
    for micro in range(accum_steps):
        inputs, targets = make_batch(shape, micro_batch=micro_batch, seed=seed, step=step * accum_steps + micro,
                                     rank=rank, device=device)
        with gradient_sync(model, enabled=sync and micro == accum_steps - 1):
            loss = F.mse_loss(model(inputs), targets) / accum_steps
            loss.backward()
        total += loss.detach()
    optimizer.step()
    return float(total)
