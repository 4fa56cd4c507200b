"""DDP's gradient buckets: the arguments a configuration's bucket settings give DistributedDataParallel, and the buckets
DDP forms from them at its rebuild (step 2), predicted before launch from the model's parameter shapes.

torch 2.13 forms buckets greedily over the gradients in the order they become ready in backward (about the reverse of
the parameter order): a bucket takes whole tensors and closes once it holds its limit or more. The limits are
[first bucket, cap, cap, ...]: with no bucket argument at all the first bucket is 1 MiB and the rest 25 MiB, but any
bucket_cap_mb makes the first bucket as large as the rest. A first bucket of another size is torch's
bucket_cap_mb_list [first, cap] (its last limit holds for every later bucket).

The prediction is what lets a sweep choose bucket sizes relative to the model's gradient bytes and run every distinct
bucket layout once: two caps that give the same buckets are one configuration under two names.
"""

import inspect
import math
from collections.abc import Iterable

import torch
import torch.distributed as dist
from torch.nn.parallel import distributed as torch_ddp

from commbench.models.shard_layout import ready_order_buckets
from commbench.training.bucket_caps import DDP_DEFAULT_CAP_MB, MIB
from commbench.training.spec import ModelShape, TrainConfig

_DDP_PARAMETERS = inspect.signature(torch_ddp.DistributedDataParallel.__init__).parameters
TORCH_CAP_MB = float(getattr(torch_ddp, "_DEFAULT_BUCKET_CAP_MB", None) or DDP_DEFAULT_CAP_MB)
"""DDP's bucket cap when no bucket argument is given: 25 MiB, named _DEFAULT_BUCKET_CAP_MB in torch 2.13 and written
inside DistributedDataParallel.__init__ in torch 2.11 (which has no such name; seen on a GPU node)."""
FIRST_BUCKET_ARGUMENT = "bucket_cap_mb_list" in _DDP_PARAMETERS
"""Whether this torch's DDP takes a first bucket of its own size (bucket_cap_mb_list: torch 2.13 has it, 2.11 not)."""
TORCH_FIRST_MB = dist._DEFAULT_FIRST_BUCKET_BYTES / MIB
"""DDP's first bucket when no bucket argument is given (1 MiB in torch 2.13)."""


def is_torch_default(cap_mb: float | None, first_mb: float | None) -> bool:
    """Whether these settings are DDP's own buckets (nothing given, or exactly its 25 MiB cap and 1 MiB first)."""
    return (cap_mb is None and first_mb is None) or (cap_mb == TORCH_CAP_MB and first_mb == TORCH_FIRST_MB)


def ddp_bucket_arguments(cap_mb: float | None, first_mb: float | None) -> dict:
    """DistributedDataParallel's keyword arguments for these settings. DDP's default is built by passing nothing: any
    bucket_cap_mb, even 25, loses the small first bucket."""
    if is_torch_default(cap_mb, first_mb):
        return {}
    if first_mb is None:
        return {"bucket_cap_mb": cap_mb}
    return {"bucket_cap_mb_list": [first_mb, TORCH_CAP_MB if cap_mb is None else cap_mb]}


def rebuild_limits(cap_mb: float | None, first_mb: float | None) -> list[int]:
    """The bucket limits in bytes DDP uses at its rebuild: the first bucket's, then the one every later bucket gets."""
    if is_torch_default(cap_mb, first_mb):
        return [dist._DEFAULT_FIRST_BUCKET_BYTES, int(TORCH_CAP_MB * MIB)]
    cap = int((TORCH_CAP_MB if cap_mb is None else cap_mb) * MIB)
    return [cap] if first_mb is None else [int(first_mb * MIB), cap]


def group(tensor_bytes: list[int], limits: list[int]) -> list[list[int]]:
    """The tensors (their indices) of each bucket, as torch's compute_bucket_assignment_by_size forms them over
    tensors in this order (the rule models/shard_layout.py shares with the partitioned ZeRO-2's buckets)."""
    return ready_order_buckets(tensor_bytes, limits)


def assign(tensor_bytes: list[int], limits: list[int]) -> tuple[int, ...]:
    """Bucket sizes in bytes, as torch's compute_bucket_assignment_by_size forms them over tensors in this order."""
    return tuple(sum(tensor_bytes[index] for index in bucket) for bucket in group(tensor_bytes, limits))


def gradient_shapes_in_ready_order(shape: ModelShape) -> list[tuple[int, ...]]:
    """Each parameter's gradient shape in the order backward produces them (the reverse of the parameter order),
    from the model built on the meta device: shapes only, nothing allocated."""
    from commbench.training.synthetic import SyntheticModel

    with torch.device("meta"):
        model = SyntheticModel(shape)
    return [tuple(p.shape) for p in reversed(list(model.parameters())) if p.requires_grad]


def gradient_bytes_in_ready_order(shape: ModelShape, element_bytes: int = 4) -> list[int]:
    """Each parameter's gradient bytes in that order (element_bytes: 4 for fp32 gradients, 2 for bf16 ones)."""
    return [math.prod(size) * element_bytes for size in gradient_shapes_in_ready_order(shape)]


def predicted_buckets(shape: ModelShape, cap_mb: float | None, first_mb: float | None) -> tuple[int, ...]:
    return assign(gradient_bytes_in_ready_order(shape), rebuild_limits(cap_mb, first_mb))


def predicted_bucket_shapes(shape: ModelShape, cap_mb: float | None, first_mb: float | None, *, element_bytes: int = 4
                            ) -> list[list[tuple[int, ...]]]:
    """The gradient shapes in each of DDP's buckets after its rebuild, first bucket first (what a comm hook that
    looks inside a bucket, as PowerSGD does, works on)."""
    shapes = gradient_shapes_in_ready_order(shape)
    limits = rebuild_limits(cap_mb, first_mb)
    return [[shapes[index] for index in bucket]
            for bucket in group([math.prod(size) * element_bytes for size in shapes], limits)]


def merge_same_buckets(configs: Iterable[TrainConfig], shape: ModelShape
                       ) -> tuple[tuple[TrainConfig, ...], tuple[str, ...]]:
    """The configurations with one row per distinct bucket layout: of the DDP configurations that differ only in
    their bucket settings and give the same buckets for this model, the first is kept. Returns them and one note per
    merge naming the merged caps and why."""
    seen: dict[tuple, tuple[float | None, float | None]] = {}
    merged: dict[tuple, dict[tuple[float | None, float | None], None]] = {}
    kept: list[TrainConfig] = []
    notes: list[str] = []
    sizes_of: dict[tuple[float | None, float | None], tuple[int, ...]] = {}
    for config in configs:
        if config.impl != "ddp":
            kept.append(config)
            continue
        settings = (config.bucket_cap_mb, config.first_bucket_mb)
        if settings not in sizes_of:
            sizes_of[settings] = predicted_buckets(shape, *settings)
        rest = {name: value for name, value in vars(config).items() if name not in ("bucket_cap_mb", "first_bucket_mb")}
        key = (tuple(sorted(rest.items())), sizes_of[settings])
        if key in seen:
            merged.setdefault((seen[key], sizes_of[settings]), {}).setdefault(settings)
            continue
        seen[key] = settings
        kept.append(config)
    for (first, sizes), others in merged.items():
        names = [bucket_text(*first)] + [bucket_text(*other) for other in others]
        if len(dict.fromkeys(names)) > 1:
            notes.append(f"DDP buckets {', '.join(dict.fromkeys(names))} give the same buckets for this model "
                         f"({_layout_text(sizes)} of its {sum(sizes) / MIB:.2f} MiB of gradients): "
                         f"one configuration, run once as {names[0]}")
    return tuple(kept), tuple(dict.fromkeys(notes))


def bucket_text(cap_mb: float | None, first_mb: float | None) -> str:
    if is_torch_default(cap_mb, first_mb):
        return f"default (torch's {TORCH_FIRST_MB:g} MiB first bucket, {TORCH_CAP_MB:g} MiB cap)"
    text = f"{TORCH_CAP_MB if cap_mb is None else cap_mb:g} MiB"
    return text if first_mb is None else f"{text} with a {first_mb:g} MiB first bucket"


def _layout_text(sizes: tuple[int, ...]) -> str:
    if len(sizes) == 1:
        return "one bucket"
    return f"{len(sizes)} buckets of {' + '.join(f'{size / MIB:.2f}' for size in sizes)} MiB"
