"""What an FSDP configuration's micro-batches before the last do with their gradients under accumulation
(--accum-sync); training/step.py applies it, models/comm_volume.py predicts its messages. No torch at import."""

from typing import Literal, get_args

AccumSync = Literal["last", "every", "last-gathered", "replicas-last"]
"""--accum-sync: what the micro-batches before the last of an accumulated step do with their gradients (FSDP).
  last           no reduction (FSDP2 set_requires_gradient_sync(False), FSDP1 no_sync): unsharded gradients accumulate
                 until the last micro-batch reduce-scatters them (the default: the least communication);
  every          reduce-scatter every micro-batch: sharded gradients accumulate (less memory, accum × the reductions);
  last-gathered  as last, and FSDP2 keeps the parameters gathered after backward (set_reshard_after_backward(False)),
                 so the next micro-batch's forward gathers nothing (more memory, fewer all-gathers);
  replicas-last  HSDP: reduce-scatter inside the shard group every micro-batch, all-reduce across the replicas on the
                 last only (FSDP2 set_requires_all_reduce(False)).
FSDP2_ACCUM_SYNCS and HSDP_ACCUM_SYNCS need FSDP2's setters (and a shard group); FSDP1 runs last and every."""
ACCUM_SYNCS: tuple[AccumSync, ...] = get_args(AccumSync)
FSDP2_ACCUM_SYNCS: tuple[AccumSync, ...] = ("last-gathered", "replicas-last")
HSDP_ACCUM_SYNCS: tuple[AccumSync, ...] = ("replicas-last",)
