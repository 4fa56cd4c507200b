"""Which FSDP2 `fully_shard` units a model gets, each unit's reshard_after_forward, and whom each unit prefetches:
torchtitan's layout, as a pure function of the configuration (apply_fsdp2 in training/wrappers.py applies it).

Units, in forward order: the embedding (when the model has one), each block (or each run of --blocks-per-unit
consecutive blocks: one fully_shard over the list, one all-gather and one reduce-scatter for the run), and the root,
which keeps what no unit below it holds (the final norm and the LM head). Resharding after forward:
  - the root is given no reshard_after_forward: FSDP2's default keeps the root gathered from forward into backward,
    since backward starts with it (the LM head) at once;
  - the last block is not resharded either (torchtitan: backward needs it right after the root, so resharding it
    would only gather it again at once);
  - the embedding and every other block take the configuration's setting (true, false or a rank count).
With one unit for the whole model (--wrap model) that unit is the root and takes the configuration's setting, or
resharding true and false would be one configuration.

Explicit prefetch (FSDP2's set_modules_to_forward_prefetch / set_modules_to_backward_prefetch) follows the order the
units run in, the root included: forward root → embedding → blocks, backward root → last block … first block →
embedding; each unit names the next `depth` units of its pass. Backward depth 1 names the unit FSDP2's implicit
backward prefetch already gathers next (the reverse post-forward order), so it is the same configuration as the default.
"""

from dataclasses import dataclass

ROOT = "root"
EMBEDDING = "embedding"


@dataclass(frozen=True)
class UnitPlan:
    name: str
    """root, embedding or block<i>."""
    reshard_after_forward: bool | int | None
    """What fully_shard is given; None = FSDP2's default (the root stays gathered after forward)."""
    forward_prefetch: tuple[str, ...] = ()
    """Units this one gathers ahead in forward (set_modules_to_forward_prefetch); empty: none set."""
    backward_prefetch: tuple[str, ...] | None = None
    """Units this one gathers ahead in backward (set_modules_to_backward_prefetch); None: FSDP2's implicit one."""


def block_name(index: int) -> str:
    return f"block{index}"


def block_groups(blocks: int, blocks_per_unit: int = 1) -> list[tuple[int, ...]]:
    """The blocks of each unit, in order: consecutive runs of blocks_per_unit (the last run may be shorter)."""
    return [tuple(range(start, min(start + blocks_per_unit, blocks))) for start in range(0, blocks, blocks_per_unit)]


def group_name(group: tuple[int, ...]) -> str:
    """A unit of blocks: block<i> for one, blocks<first>-<last> for several."""
    return block_name(group[0]) if len(group) == 1 else f"blocks{group[0]}-{group[-1]}"


def fsdp2_units(*, blocks: int, has_embedding: bool, reshard_after_forward: bool | int | None,
                forward_prefetch: int = 0,
                backward_prefetch: int | None = None, per_block: bool = True, blocks_per_unit: int = 1
                ) -> list[UnitPlan]:
    """The units in the order fully_shard is applied (children first, the root last); with blocks_per_unit above 1
    each unit holds that many consecutive blocks (block_groups), and "the last block" is the last such unit."""
    if not per_block:
        return [UnitPlan(ROOT, reshard_after_forward)]
    groups = [group_name(group) for group in block_groups(blocks, blocks_per_unit)]
    children = ([EMBEDDING] if has_embedding else []) + groups
    forward_order = [ROOT, *children]
    backward_order = [ROOT, *reversed(children)]

    def ahead(order: list[str], name: str, depth: int) -> tuple[str, ...]:
        position = order.index(name)
        return tuple(order[position + 1:position + 1 + depth])

    plans = []
    for name in [*children, ROOT]:
        reshard: bool | int | None
        if name == ROOT:
            reshard = None
        elif name == groups[-1]:
            reshard = False
        else:
            reshard = reshard_after_forward
        plans.append(UnitPlan(name, reshard,
                              forward_prefetch=ahead(forward_order, name, forward_prefetch),
                              backward_prefetch=None if backward_prefetch is None
                              else ahead(backward_order, name, backward_prefetch)))
    return plans
