"""The data-parallel sharding strategies: one table that the memory and traffic models and the training sweeps share.

Code names a strategy by its key (ddp, zero1, zero2, zero3, hsdp, as on the command line); tables, JSON and the
`model_state_formula` column print its name as the ZeRO paper and PyTorch write it.
"""

from dataclasses import dataclass
from typing import Literal, get_args

StrategyKey = Literal["ddp", "zero1", "zero2", "zero3", "hsdp"]
"""A strategy's key, as the command line, results and code name it (STRATEGIES holds each one's facts)."""
KEYS: tuple[StrategyKey, ...] = get_args(StrategyKey)
FsdpImpl = Literal["fsdp2", "fsdp1"]
"""FSDP's implementations: fully_shard (FSDP2) and FullyShardedDataParallel (FSDP1)."""
FSDP_IMPLS: tuple[FsdpImpl, ...] = get_args(FsdpImpl)
Impl = Literal["ddp", "zero1", "zero2", FsdpImpl]
"""How a strategy is implemented (a training configuration's impl): DDP, ZeroRedundancyOptimizer over DDP, the ZeRO
paper's partitioned ZeRO-2 (training/zero2.py), or FSDP; training/spec.py's IMPL_COLLECTIVES says what each runs."""
IMPLS: tuple[Impl, ...] = get_args(Impl)


@dataclass(frozen=True)
class Strategy:
    key: StrategyKey
    name: str
    shards_params: bool
    shards_grads: bool
    shards_optim: bool
    ring_phases: int
    """Ring reduce-scatters or all-gathers of the whole model per step (an all-reduce is two): DDP all-reduces the
    gradients; ZeRO-1/2 reduce-scatter gradients and all-gather parameters; ZeRO-3 gathers the parameters again for
    backward. HSDP does ZeRO-3's three inside its shard group (its all-reduce across replicas comes on top)."""
    needs_shard_group: bool = False
    """HSDP replicates shard groups, so it exists only once a shard-group size is given."""

    @property
    def sharded(self) -> tuple[bool, bool, bool]:
        """Which of (parameters, gradients, optimizer state) this strategy shards."""
        return self.shards_params, self.shards_grads, self.shards_optim


STRATEGIES: dict[str, Strategy] = {strategy.key: strategy for strategy in (
    Strategy("ddp", "DDP", False, False, False, ring_phases=2),
    Strategy("zero1", "ZeRO-1", False, False, True, ring_phases=2),
    Strategy("zero2", "ZeRO-2", False, True, True, ring_phases=2),
    Strategy("zero3", "ZeRO-3/FSDP", True, True, True, ring_phases=3),
    Strategy("hsdp", "HSDP", True, True, True, ring_phases=3, needs_shard_group=True),
)}
assert tuple(STRATEGIES) == KEYS, "one Strategy per key, in StrategyKey's order"
WITHOUT_SHARD_GROUP: tuple[StrategyKey, ...] = tuple(key for key in KEYS if not STRATEGIES[key].needs_shard_group)


def display_name(key: str) -> str:
    """DDP, ZeRO-1, ZeRO-2, ZeRO-3/FSDP, HSDP: what tables and stored results show for a key."""
    return STRATEGIES[key].name
