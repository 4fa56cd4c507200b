"""The configurations of each training sweep: the cross product of its axes, minus the combinations that an
implementation cannot express (which are named, never silently run as something else)."""

import itertools

from commbench.errors import CommbenchError
from commbench.models.strategies import KEYS, WITHOUT_SHARD_GROUP
from commbench.training.spec import PRECISIONS, TrainConfig
from commbench.training.wrappers import DDP_COMM_HOOKS

STRATEGIES = KEYS
FSDP_IMPLS = ("fsdp2", "fsdp1")
FSDP2_BACKWARD = ("default", "1", "2")
FSDP1_BACKWARD = ("pre", "post", "none")
WRAPS = ("block", "model")


def parse_bool(option: str, value: str) -> bool:
    lowered = value.lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise CommbenchError(f"{option} {value!r} is not true or false")


def parse_reshard(value: str) -> bool | int:
    """true, false, or a number of ranks to reshard to after forward (FSDP2's int form)."""
    try:
        return parse_bool("--reshard-after-forward", value)
    except CommbenchError:
        pass
    try:
        number = int(value)
    except ValueError:
        raise CommbenchError(f"--reshard-after-forward {value!r} is not true, false or a rank count") from None
    if number < 2:
        raise CommbenchError(f"--reshard-after-forward {number} must be 2 or more ranks (or true/false)")
    return number


def _choices(option: str, values, allowed) -> None:
    for value in values:
        if value not in allowed:
            raise CommbenchError(f"unknown {option} {value!r}; choose from {', '.join(allowed)}")


def ddp_configs(*, bucket_cap_mb, gradient_as_bucket_view, static_graph, comm_hooks, accum_steps,
                precisions=("fp32",)) -> tuple[TrainConfig, ...]:
    _choices("--comm-hook", comm_hooks, DDP_COMM_HOOKS)
    _choices("--mixed-precision", precisions, PRECISIONS)
    for size in bucket_cap_mb:
        if size <= 0:
            raise CommbenchError(f"--bucket-cap-mb {size:g} must be above 0 MiB")
    return tuple(TrainConfig(strategy="ddp", impl="ddp", accum_steps=accum, bucket_cap_mb=size,
                             gradient_as_bucket_view=view, static_graph=static, comm_hook=hook,
                             mixed_precision=precision)
                 for size, view, static, hook, precision, accum in itertools.product(
                     bucket_cap_mb, gradient_as_bucket_view, static_graph, comm_hooks, precisions, accum_steps))


def fsdp_configs(*, impls, reshard_after_forward, forward_prefetch, backward_prefetch, limit_all_gathers, wraps,
                 precisions, accum_steps, world: int) -> tuple[TrainConfig, ...]:
    """FSDP2 takes the numeric prefetch depths, FSDP1 its pre/post/none and a 0/1 forward flag; each implementation
    runs the values that apply to it (an axis with none for it runs at its default)."""
    _choices("--impl", impls, FSDP_IMPLS)
    _choices("--backward-prefetch", backward_prefetch, FSDP2_BACKWARD + FSDP1_BACKWARD)
    _choices("--wrap", wraps, WRAPS)
    _choices("--mixed-precision", precisions, PRECISIONS)
    for depth in forward_prefetch:
        if depth < 0:
            raise CommbenchError(f"--forward-prefetch {depth} is negative; use 0, 1 or 2 blocks ahead")
    for reshard in reshard_after_forward:
        if not isinstance(reshard, bool) and (world % reshard or reshard >= world):
            raise CommbenchError(f"--reshard-after-forward {reshard} must divide the {world} ranks and be fewer; "
                                 "use true or false")
    configs = []
    for impl in impls:
        if impl == "fsdp2":
            backward = [b for b in backward_prefetch if b in FSDP2_BACKWARD] or ["default"]
            forward, limits = list(forward_prefetch), [None]
            reshards = list(reshard_after_forward)
        else:
            backward = [b for b in backward_prefetch if b in FSDP1_BACKWARD] or ["pre"]
            forward = [d for d in forward_prefetch if d <= 1]
            if not forward:
                raise CommbenchError("FSDP1's forward prefetch is on (1) or off (0); give --forward-prefetch 0 or 1")
            limits = list(limit_all_gathers)
            reshards = [r for r in reshard_after_forward if isinstance(r, bool)]
            if not reshards:
                raise CommbenchError("FSDP1 reshards after forward or not (FULL_SHARD / SHARD_GRAD_OP): give "
                                     "--reshard-after-forward true or false")
        for reshard, fwd, bwd, limit, wrap, precision, accum in itertools.product(
                reshards, forward, backward, limits, wraps, precisions, accum_steps):
            if wrap == "model" and (fwd or bwd not in ("default", "pre")):
                continue  # one unit has no other unit to prefetch
            strategy = "zero3" if reshard is not False else "zero2"
            configs.append(TrainConfig(strategy=strategy, impl=impl, accum_steps=accum, reshard_after_forward=reshard,
                                       forward_prefetch=fwd, backward_prefetch=bwd, limit_all_gathers=limit,
                                       wrap=wrap, mixed_precision=precision))
    if not configs:
        raise CommbenchError("no FSDP configuration is left: with --wrap model there is nothing to prefetch; "
                             "add --forward-prefetch 0 and --backward-prefetch default")
    return tuple(configs)


def strategy_configs(*, strategies, impl: str, shard_group: int | None, bucket_cap_mb: float | None, accum_steps,
                     world: int, precisions=("fp32",)) -> tuple[TrainConfig, ...]:
    _choices("--strategy", strategies, STRATEGIES)
    _choices("--impl", (impl,), FSDP_IMPLS)
    _choices("--mixed-precision", precisions, PRECISIONS)
    configs = []
    for strategy, precision, accum in itertools.product(strategies, precisions, accum_steps):
        if strategy in ("ddp", "zero1"):
            configs.append(TrainConfig(strategy=strategy, impl=strategy, accum_steps=accum,
                                       bucket_cap_mb=bucket_cap_mb, mixed_precision=precision))
            continue
        configs.append(TrainConfig(strategy=strategy, impl=impl, accum_steps=accum,
                                   reshard_after_forward=strategy != "zero2", wrap="block",
                                   mixed_precision=precision, shard_group=shard_group if strategy == "hsdp" else None))
    return tuple(configs)


def default_strategies(world: int) -> tuple[str, ...]:
    """HSDP needs at least two replicas of a shard group of at least two: four ranks or more."""
    return STRATEGIES if world >= 4 and world % 2 == 0 else WITHOUT_SHARD_GROUP
