"""One optimizer step over `accum_steps` micro-batches; the gradient sync is skipped on all but the last."""

import contextlib
import itertools
from typing import Callable

import torch

from commbench.training.batches import BatchPool
from commbench.training.precision import compute as precision_context
from commbench.training.synthetic import batch_loss


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


def train_step(model, optimizer, micro_batches, *, sync: bool = True,
               compute=contextlib.nullcontext) -> float:
    """One optimizer step over `micro_batches` ((inputs, targets) already on the device: nothing is drawn or copied
    here, since this is what the sweeps time). Returns the mean loss over the micro-batches of this rank. sync False
    skips the gradient sync on every micro-batch (DDP's no_sync baseline: the same step without its gradient
    communication). compute() is the context forward and loss run in (autocast for bf16 DDP/ZeRO-1)."""
    optimizer.zero_grad(set_to_none=True)
    accum_steps = len(micro_batches)
    total = None  # summed on the device: no host sync per micro-batch
    for micro, (inputs, targets) in enumerate(micro_batches):
        with gradient_sync(model, enabled=sync and micro == accum_steps - 1):
            with compute():
                loss = batch_loss(model(inputs), targets) / accum_steps
            loss.backward()
        total = loss.detach().float() if total is None else total + loss.detach().float()
    optimizer.step()
    return float(total)


def step_function(model, optimizer, pool: BatchPool, *, accum_steps: int, precision: str | None, impl: str,
                  device: torch.device) -> Callable[..., float]:
    """What the sweep times: step(sync=True) runs the next optimizer step on the pool's micro-batches (optimizer
    step k takes the micro-batches k × accum_steps ...), at the configuration's precision."""
    steps = itertools.count()

    def step(sync: bool = True) -> float:
        return train_step(model, optimizer, pool.for_step(next(steps), accum_steps), sync=sync,
                          compute=lambda: precision_context(precision, impl, device.type))

    return step
