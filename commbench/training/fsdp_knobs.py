"""The FSDP knobs beyond resharding and prefetch (reduce dtype, CPU offload, activation checkpointing, blocks per
unit, the sync under accumulation, a shard group): which of their values apply to each configuration of an FSDP
sweep, and the notes that say which were merged or left out. No torch at import."""

import dataclasses
import enum
import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, TypeVar

from commbench.errors import CommbenchError
from commbench.training.accum_sync import ACCUM_SYNCS, FSDP2_ACCUM_SYNCS, HSDP_ACCUM_SYNCS, AccumSync
from commbench.training.checkpointing import ACTIVATION_CHECKPOINTING
from commbench.training.spec import REDUCE_DTYPES, TrainConfig, refuse_unknown

Choice = TypeVar("Choice", bound=str)


@dataclass(frozen=True)
class FsdpExtras:
    """The FSDP knobs beyond resharding and prefetch; (None,) = not swept (each configuration at its default)."""

    reduce_dtypes: tuple[str | None, ...] = (None,)
    cpu_offloads: tuple[bool | None, ...] = (None,)
    activation_checkpointing: tuple[str | None, ...] = (None,)
    blocks_per_unit: tuple[int | None, ...] = (None,)
    accum_syncs: tuple[str | None, ...] = (None,)
    shard_groups: tuple[int | None, ...] = (None,)
    """Ranks per shard group; a value below the rank count makes the configuration HSDP."""


def _known_or_none(option: str, values: tuple[str | None, ...], allowed: tuple[Choice, ...]
                   ) -> tuple[Choice | None, ...]:
    """An axis' values, None (not swept) kept and the others refused unless among `allowed`."""
    known = iter(refuse_unknown(option, [value for value in values if value is not None], allowed))
    return tuple(None if value is None else next(known) for value in values)


def with_extras(configs: Iterable[TrainConfig], extras: FsdpExtras, *, world: int, blocks: int | None,
                notes: dict[str, None]) -> tuple[TrainConfig, ...]:
    """Each configuration once per combination of the extra knobs' values that applies to it; a value that does not
    apply (or runs as another) is left out or merged, with a note."""
    reduce_dtypes = _known_or_none("--reduce-dtype", extras.reduce_dtypes, REDUCE_DTYPES)
    checkpointing = _known_or_none("--activation-checkpointing", extras.activation_checkpointing,
                                   ACTIVATION_CHECKPOINTING)
    accum_syncs = _known_or_none("--accum-sync", extras.accum_syncs, ACCUM_SYNCS)
    for count in extras.blocks_per_unit:
        if count is not None and count < 1:
            raise CommbenchError(f"--blocks-per-unit {count} must be 1 or more blocks")
    for group in extras.shard_groups:
        if group is not None and (group < 1 or world % group):
            raise CommbenchError(f"--shard-group {group} must divide the {world} ranks (HSDP is replicas × shard "
                                 "group); e.g. --shard-group 2 with --nproc 4")
    result: list[TrainConfig] = []
    for config in configs:
        for reduce, offload, ac, per_unit, accum_sync, group in itertools.product(
                reduce_dtypes, extras.cpu_offloads, checkpointing, extras.blocks_per_unit, accum_syncs,
                extras.shard_groups):
            per_unit = _blocks_per_unit(config, per_unit, blocks, notes)
            sync = _accum_sync(config, accum_sync, group, world, notes)
            if sync is _LEFT_OUT:
                continue
            if group == world:
                notes[f"--shard-group {group} is every rank: runs as fully sharded (zero2/zero3)"] = None
                group = None
            if group is not None and not isinstance(config.reshard_after_forward, bool):
                notes[f"--reshard-after-forward {config.reshard_after_forward} runs without --shard-group only "
                      "(it names a mesh of its own)"] = None
                continue
            extra = dataclasses.replace(
                config, reduce_dtype=reduce, cpu_offload=offload, activation_checkpointing=ac,
                blocks_per_unit=per_unit, accum_sync=sync, shard_group=group,
                strategy="hsdp" if group is not None else config.strategy)
            if extra not in result:
                result.append(extra)
    if not result:
        raise CommbenchError("no FSDP configuration is left: --accum-sync last-gathered and replicas-last need "
                             "--impl fsdp2 (replicas-last also --shard-group); add --accum-sync last")
    return tuple(result)


class _Left(enum.Enum):
    OUT = "left out"


_LEFT_OUT: Literal[_Left.OUT] = _Left.OUT
"""_accum_sync's answer for a configuration that the value leaves out."""


def _blocks_per_unit(config: TrainConfig, value: int | None, blocks: int | None, notes: dict[str, None]
                     ) -> int | None:
    """The blocks per unit a configuration really runs: None where units are not blocks (one unit for the model)
    or FSDP1 (one module per unit); a count above the model's blocks runs as all of them."""
    if value is None:
        return None
    if config.wrap == "model":
        notes["--blocks-per-unit applies to --wrap block (one unit for the model has no blocks to group)"] = None
        return None
    if config.impl != "fsdp2":
        if value != 1:
            notes[f"--blocks-per-unit {value} is FSDP2's (fully_shard over a list of blocks); fsdp1 runs one block "
                  "per unit"] = None
        return None
    if blocks is not None and value > blocks:
        notes[f"--blocks-per-unit {value} runs as {blocks}: the model has {blocks} blocks"] = None
        return blocks
    return value


def _accum_sync(config: TrainConfig, value: AccumSync | None, group: int | None, world: int, notes: dict[str, None]
                ) -> AccumSync | Literal[_Left.OUT] | None:
    """The accumulation sync a configuration runs: None with one micro-batch per step (nothing to accumulate);
    _LEFT_OUT where the value needs what the configuration lacks (FSDP2, a shard group)."""
    if value is None:
        return None
    if config.accum_steps == 1:
        notes["--accum-sync applies with --accum-steps 2 or more (one micro-batch syncs every step)"] = None
        return None
    if value in FSDP2_ACCUM_SYNCS and config.impl != "fsdp2":
        notes[f"--accum-sync {value} is FSDP2's; fsdp1 runs last and every"] = None
        return _LEFT_OUT
    if value in HSDP_ACCUM_SYNCS and group in (None, world):
        notes[f"--accum-sync {value} applies to HSDP (--shard-group below the rank count)"] = None
        return _LEFT_OUT
    return value
