"""Model-state memory per rank for DDP, ZeRO-1/2/3 (FSDP) and HSDP (Rajbhandari et al. 2020).

Ψ parameters, N data-parallel ranks, bytes per parameter P (parameters), G (gradients), O (optimizer state):
  DDP (P+G+O)Ψ · ZeRO-1 (P+G)Ψ + OΨ/N · ZeRO-2 PΨ + (G+O)Ψ/N · ZeRO-3/FSDP (P+G+O)Ψ/N · HSDP: ZeRO-3 over the shard
  group. Activations, all-gather buffers, communication workspaces and fragmentation are not included.
"""

import math
from dataclasses import dataclass
from fractions import Fraction

from commbench.errors import CommbenchError
from commbench.models.strategies import STRATEGIES, WITHOUT_SHARD_GROUP


@dataclass(frozen=True)
class StateBytes:
    """Bytes per parameter of each kind of model state."""

    param: float
    grad: float
    optim: float
    assumes: str = "custom bytes per parameter"

    def describe(self) -> str:
        return f"P={self.param:g} G={self.grad:g} O={self.optim:g} bytes/parameter ({self.assumes})"


PRESETS = {
    "mixed-adam": StateBytes(2, 2, 12, "16-bit params and grads; Adam with fp32 master copy, m, v"),
    "fp32-adam": StateBytes(4, 4, 8, "fp32 params and grads; Adam m, v in fp32"),
    "bf16-fp32grad-adam": StateBytes(2, 4, 12, "bf16 params, fp32 grads; Adam with fp32 master copy, m, v"),
}


@dataclass(frozen=True)
class StatePerRank:
    strategy: str  # key: ddp, zero1, zero2, zero3, hsdp
    shards: int  # how many ranks share each sharded state
    param_bytes: float
    grad_bytes: float
    optim_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.param_bytes + self.grad_bytes + self.optim_bytes


def state_per_rank(strategy: str, *, params: float, ranks: int, state: StateBytes,
                   shard_group: int | None = None) -> StatePerRank:
    if ranks < 1:
        raise CommbenchError(f"--ranks {ranks} must be 1 or more")
    shards = ranks
    if STRATEGIES[strategy].needs_shard_group:
        if not shard_group or shard_group < 1 or ranks % shard_group:
            raise CommbenchError(f"--shard-group {shard_group} must divide --ranks {ranks} (HSDP replicates "
                                 "shard groups)")
        shards = shard_group
    param_sharded, grad_sharded, optim_sharded = STRATEGIES[strategy].sharded
    part = lambda bytes_per_param, sharded: bytes_per_param * params / (shards if sharded else 1)  # noqa: E731
    return StatePerRank(strategy, shards, part(state.param, param_sharded), part(state.grad, grad_sharded),
                        part(state.optim, optim_sharded))


def min_ranks_to_fit(strategy: str, *, params: float, state: StateBytes, capacity_bytes: float) -> int | None:
    """The fewest ranks (shard-group size for HSDP) whose model state per rank fits in capacity; None if no count
    does (the unsharded part alone is too big)."""
    param_sharded, grad_sharded, optim_sharded = STRATEGIES[strategy].sharded
    psi = Fraction(params)
    fixed = sum(Fraction(b) * psi for b, s in ((state.param, param_sharded), (state.grad, grad_sharded),
                                                (state.optim, optim_sharded)) if not s)
    shardable = sum(Fraction(b) * psi for b, s in ((state.param, param_sharded), (state.grad, grad_sharded),
                                                    (state.optim, optim_sharded)) if s)
    capacity = Fraction(capacity_bytes)
    if fixed > capacity or (fixed == capacity and shardable > 0):
        return None
    if shardable == 0:
        return 1
    return max(1, math.ceil(shardable / (capacity - fixed)))


def table(*, params: float, ranks: int, state: StateBytes, shard_group: int | None = None) -> list[StatePerRank]:
    strategies = WITHOUT_SHARD_GROUP if shard_group is None else tuple(STRATEGIES)
    return [state_per_rank(strategy, params=params, ranks=ranks, state=state, shard_group=shard_group)
            for strategy in strategies]
