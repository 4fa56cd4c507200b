"""One optimizer step over `accum_steps` micro-batches; which of them reduce gradients is the configuration's
accum_sync (ACCUM_SYNCS), by default the last only."""

import contextlib
import itertools
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Protocol

import torch

from commbench.training.batches import BatchPool
from commbench.training.precision import compute as precision_context
from commbench.training.synthetic import batch_loss

Model = Callable[[torch.Tensor], torch.Tensor]
"""What a step runs forward: a module (DDP, FSDP, plain) or what torch.compile made of one."""


class Stepper(Protocol):
    """What a step updates the parameters with: a torch optimizer, or the compute baseline's shard step."""

    def zero_grad(self, set_to_none: bool = True) -> None: ...

    def step(self) -> object: ...


@contextlib.contextmanager
def _fsdp2_off(model: object, *setters: str) -> Iterator[None]:
    """FSDP2's setters (set_requires_gradient_sync, ...) turned off for one micro-batch, then on again."""
    for setter in setters:
        getattr(model, setter)(False)
    try:
        yield
    finally:
        for setter in setters:
            getattr(model, setter)(True)


@contextlib.contextmanager
def gradient_sync(model: object, enabled: bool, accum_sync: str | None = None) -> Iterator[None]:
    """DDP and FSDP1 skip the sync inside no_sync(); FSDP2 modules through set_requires_gradient_sync (and, for
    accum_sync last-gathered and replicas-last, set_reshard_after_backward / set_requires_all_reduce)."""
    if enabled or accum_sync == "every":
        yield
    elif accum_sync == "last-gathered":
        with _fsdp2_off(model, "set_requires_gradient_sync", "set_reshard_after_backward"):
            yield
    elif accum_sync == "replicas-last":
        with _fsdp2_off(model, "set_requires_all_reduce"):
            yield
    elif hasattr(model, "set_requires_gradient_sync"):
        with _fsdp2_off(model, "set_requires_gradient_sync"):
            yield
    elif hasattr(model, "no_sync"):
        with model.no_sync():
            yield
    else:
        yield


def train_step(model: Model, optimizer: Stepper, micro_batches: Sequence[tuple[torch.Tensor, torch.Tensor]], *,
               sync: bool = True, compute: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext,
               accum_sync: str | None = None) -> float:
    """One optimizer step over `micro_batches` ((inputs, targets) already on the device: nothing is drawn or copied
    here, since this is what the sweeps time). Returns the mean loss over the micro-batches of this rank. sync False
    skips the gradient sync on every micro-batch (DDP's no_sync baseline: the same step without its gradient
    communication). compute() is the context forward and loss run in (autocast for bf16 DDP/ZeRO-1). accum_sync:
    what the micro-batches before the last do (training/accum_sync.py; None = last)."""
    optimizer.zero_grad(set_to_none=True)
    accum_steps = len(micro_batches)
    total: torch.Tensor | None = None  # summed on the device: no host sync per micro-batch
    for micro, (inputs, targets) in enumerate(micro_batches):
        last = micro == accum_steps - 1
        with gradient_sync(model, enabled=sync and last, accum_sync=accum_sync if sync and not last else None):
            with compute():
                loss = batch_loss(model(inputs), targets) / accum_steps
            loss.backward()
        total = loss.detach().float() if total is None else total + loss.detach().float()
    optimizer.step()
    assert total is not None  # at least one micro-batch (accum_steps is validated to be 1 or more)
    return float(total)


def step_function(model: Model, optimizer: Stepper, pool: BatchPool, *, accum_steps: int, precision: str | None,
                  impl: str, device: torch.device, accum_sync: str | None = None) -> Callable[..., float]:
    """What the sweep times: step(sync=True) runs the next optimizer step on the pool's micro-batches (optimizer
    step k takes the micro-batches k × accum_steps ...), at the configuration's precision."""
    steps = itertools.count()

    def step(sync: bool = True) -> float:
        return train_step(model, optimizer, pool.for_step(next(steps), accum_steps), sync=sync,
                          compute=lambda: precision_context(precision, impl, device.type), accum_sync=accum_sync)

    return step
