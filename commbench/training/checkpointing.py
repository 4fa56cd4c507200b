"""Activation checkpointing of the synthetic model's blocks, applied as torchtitan applies it ("full": each block
wrapped by torch's checkpoint_wrapper, so backward recomputes its activations instead of keeping them), before FSDP
shards the model. The compute-only baseline (training/compute_baseline.py) applies the same to its local copy, so the
recomputation counts as compute, never as exposed communication.

No torch at import: the command line lists the modes without loading it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, cast, get_args

if TYPE_CHECKING:
    from torch import nn

ActivationCheckpointing = Literal["none", "full"]
"""--activation-checkpointing: none (activations kept from forward to backward) or full (every block recomputed)."""
ACTIVATION_CHECKPOINTING: tuple[ActivationCheckpointing, ...] = get_args(ActivationCheckpointing)


def apply_activation_checkpointing(model: nn.Module, mode: str | None) -> nn.Module:
    """Wrap each of model.blocks for `mode` (None or none: leave the model as it is); returns the model."""
    if mode in (None, "none"):
        return model
    if mode != "full":
        raise ValueError(f"unknown activation checkpointing {mode!r}")
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    blocks = cast("nn.ModuleList", model.blocks)  # the synthetic models' (training/synthetic.py), a ModuleList
    for index, block in enumerate(blocks):
        blocks[index] = checkpoint_wrapper(block)  # non-reentrant: FSDP's hooks run inside the recompute
    return model
