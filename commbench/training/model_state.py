"""Model-state bytes held by this rank, counted from its local tensors (what the ZeRO formulas predict)."""

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ModelStateBytes:
    param_bytes: int
    grad_bytes: int
    optim_bytes: int  # optimizer tensors the size of parameters (Adam m and v, master copies)
    optim_scalar_bytes: int  # per-tensor scalars such as Adam's step counter: not in the ZeRO formulas
    host_bytes: int = 0
    """Of the parameters, gradients and optimizer tensors above, the bytes in host memory: all of them on a CPU
    run; on a GPU run what CPU offload moved there."""

    @property
    def total_bytes(self) -> int:
        return self.param_bytes + self.grad_bytes + self.optim_bytes + self.optim_scalar_bytes


def local_part(tensor: torch.Tensor) -> torch.Tensor:
    """The part of a (possibly sharded, DTensor) tensor stored on this rank."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def _bytes(tensor: torch.Tensor) -> int:
    local = local_part(tensor)
    return local.numel() * local.element_size()


def _host_bytes(tensor: torch.Tensor) -> int:
    return _bytes(tensor) if local_part(tensor).device.type == "cpu" else 0


def count(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> ModelStateBytes:
    parameters = list(model.parameters())
    param_bytes = sum(_bytes(p) for p in parameters)
    grad_bytes = sum(_bytes(p.grad) for p in parameters if p.grad is not None)
    # the partitioned ZeRO-2 (training/zero2.py) frees the model's gradients and keeps only its reduced shards
    shards = list(getattr(optimizer, "gradient_shards", ()))
    grad_bytes += sum(_bytes(shard) for shard in shards)
    host_bytes = sum(_host_bytes(t) for p in parameters for t in (p, p.grad) if t is not None)
    host_bytes += sum(_host_bytes(shard) for shard in shards)
    optim_bytes = optim_scalar_bytes = 0
    if optimizer is not None:
        # ZeroRedundancyOptimizer keeps this rank's shard of the state in its local optimizer
        local_optimizer = getattr(optimizer, "optim", optimizer)
        for state in local_optimizer.state.values():
            for value in state.values():
                if isinstance(value, torch.Tensor):
                    if local_part(value).dim() == 0:
                        optim_scalar_bytes += _bytes(value)
                    else:
                        optim_bytes += _bytes(value)
                        host_bytes += _host_bytes(value)
    return ModelStateBytes(param_bytes, grad_bytes, optim_bytes, optim_scalar_bytes, host_bytes)
