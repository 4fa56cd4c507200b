"""The ZeRO paper's mixed-precision Adam for DDP and ZeRO-1: bf16 parameters and gradients in the model, an fp32
master copy and fp32 Adam moments in the optimizer (Rajbhandari et al. 2020, §3.1: K = 12 bytes of optimizer state
per parameter, 2 + 2 for the 16-bit parameter and gradient). Under ZeroRedundancyOptimizer each rank keeps master
and moments for its own partition only: ZeRO-1's 4Ψ + 12Ψ/N; under DDP every rank keeps them all: 16Ψ.

FSDP needs none of this: its bf16 policy (MixedPrecisionPolicy / MixedPrecision) keeps the sharded parameters in
fp32, which are the master copy, and casts a bf16 copy for compute; with fp32 gradients and moments that is
4 + 4 + 8 = 16 bytes per sharded element, the paper's ZeRO-3 16Ψ/N.
"""

from collections.abc import Callable, Iterable
from typing import overload

import torch

from commbench.models.memory import PRESETS, StateBytes
from commbench.training.spec import TrainConfig

MASTER_STATE = PRESETS["mixed-adam"]  # P2 G2 O12


def state_bytes_of(config: TrainConfig) -> StateBytes:
    """Bytes per parameter that a configuration holds at rest: the paper's mixed Adam with master weights, else fp32
    parameters, gradients and AdamW moments (FSDP's bf16 policy included: its sharded parameters stay fp32)."""
    return MASTER_STATE if getattr(config, "master_weights", None) else PRESETS["fp32-adam"]


class MasterWeightAdamW(torch.optim.Optimizer):
    """AdamW on fp32 master copies of 16-bit parameters: the gradient is read in fp32, master and moments are
    updated in fp32, and the parameter receives the master rounded to its own dtype. State per parameter: master,
    exp_avg, exp_avg_sq (fp32, the parameter's size) and a step count (a scalar, outside the ZeRO formulas)."""

    def __init__(self, params: Iterable[torch.Tensor], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})

    @overload
    def step(self, closure: None = None) -> None: ...

    @overload
    def step(self, closure: Callable[[], float]) -> float: ...

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for parameter in group["params"]:
                if parameter.grad is None:
                    continue
                state = self.state[parameter]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32, device=parameter.device)
                    state["master"] = parameter.detach().to(torch.float32, copy=True)
                    state["exp_avg"] = torch.zeros_like(state["master"])
                    state["exp_avg_sq"] = torch.zeros_like(state["master"])
                master, exp_avg, exp_avg_sq = state["master"], state["exp_avg"], state["exp_avg_sq"]
                state["step"] += 1
                step = float(state["step"])
                grad = parameter.grad.to(torch.float32)
                master.mul_(1 - group["lr"] * group["weight_decay"])
                exp_avg.lerp_(grad, 1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                denominator = (exp_avg_sq / (1 - beta2 ** step)).sqrt_().add_(group["eps"])
                master.addcdiv_(exp_avg, denominator, value=-group["lr"] / (1 - beta1 ** step))
                parameter.copy_(master)
        return loss
