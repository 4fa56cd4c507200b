"""The configurations of each training sweep: the cross product of its axes, minus the combinations that an
implementation cannot express (which are named, never silently run as something else)."""

import itertools
from collections.abc import Sequence
from typing import Any

from commbench.errors import CommbenchError
from commbench.models.strategies import FSDP_IMPLS, KEYS, WITHOUT_SHARD_GROUP, FsdpImpl, StrategyKey
from commbench.training.fsdp_knobs import FsdpExtras, with_extras
from commbench.training.spec import (
    BUCKET_DEFAULT,
    FSDP1_BACKWARD,
    FSDP2_BACKWARD,
    PRECISIONS,
    WRAPS,
    BackwardPrefetch,
    Precision,
    TrainConfig,
    Wrap,
    parse_bucket_cap,
    refuse_unknown,
)
from commbench.training.wrappers import DDP_COMM_HOOKS

STRATEGIES: tuple[StrategyKey, ...] = KEYS


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


def ddp_default_caps(gradient_bytes: int) -> tuple[float | str, ...]:
    """The default sweep's --bucket-cap-mb: DDP's own buckets, then caps at fractions of the model's gradient bytes
    (training/bucket_caps.py), so the rows show different bucket counts whatever the model's size."""
    from commbench.training.bucket_caps import default_caps_mb

    return (BUCKET_DEFAULT, *default_caps_mb(gradient_bytes))


def ddp_configs(*, bucket_cap_mb: Sequence[str | float], gradient_as_bucket_view: Sequence[bool],
                static_graph: Sequence[bool], comm_hooks: Sequence[str], accum_steps: Sequence[int],
                precisions: Sequence[str] = ("fp32",), first_bucket_mb: Sequence[float | None] = (None,),
                compile: Sequence[bool] = (False,)) -> tuple[TrainConfig, ...]:
    """bucket_cap_mb: sizes in MiB or "default" (DDP's own: recorded as its 25 MiB cap and 1 MiB first bucket, and
    built by passing nothing); first_bucket_mb: the first bucket's cap, None = as large as the cap; compile: the DDP
    module run eagerly (False) and/or under torch.compile (True)."""
    import torch

    from commbench.training.ddp_buckets import FIRST_BUCKET_ARGUMENT, TORCH_CAP_MB, TORCH_FIRST_MB

    hooks = refuse_unknown("--comm-hook", comm_hooks, DDP_COMM_HOOKS)
    chosen_precisions = refuse_unknown("--mixed-precision", precisions, PRECISIONS)
    caps = [parse_bucket_cap(size) for size in bucket_cap_mb]
    for first in first_bucket_mb:
        if first is not None and not first > 0:
            raise CommbenchError(f"--first-bucket-mb {first:g} must be above 0 MiB")
        if first is not None and not FIRST_BUCKET_ARGUMENT:
            raise CommbenchError(f"--first-bucket-mb needs DistributedDataParallel's bucket_cap_mb_list (torch 2.13 "
                                 f"has it), which torch {torch.__version__} lacks; leave --first-bucket-mb out")
    buckets: list[tuple[float, float | None]] = []
    for cap, first in itertools.product(caps, first_bucket_mb):
        if isinstance(cap, str):  # BUCKET_DEFAULT, parse_bucket_cap's one word: DDP's own buckets
            buckets.append((TORCH_CAP_MB, TORCH_FIRST_MB if first is None else first))
        else:
            buckets.append((cap, first))
    return tuple(TrainConfig(strategy="ddp", impl="ddp", accum_steps=accum, bucket_cap_mb=cap, first_bucket_mb=first,
                             gradient_as_bucket_view=view, static_graph=static, comm_hook=hook,
                             mixed_precision=precision, compile=compiled)
                 for (cap, first), view, static, hook, precision, compiled, accum in itertools.product(
                     dict.fromkeys(buckets), gradient_as_bucket_view, static_graph, hooks, chosen_precisions,
                     compile, accum_steps))


def effective_backward_prefetch(impl: FsdpImpl, reshard: bool | int, value: BackwardPrefetch
                                ) -> tuple[BackwardPrefetch, str | None]:
    """The --backward-prefetch value a configuration really runs, and why it differs from `value` (None: it does not).
    Two requests that run the same are one configuration, so the sweep measures it once."""
    default: BackwardPrefetch = "default" if impl == "fsdp2" else "pre"
    if reshard is False and value != default:
        return default, (f"{impl} --backward-prefetch {value} with --reshard-after-forward false runs as {default}: "
                         "the parameters stay gathered from forward, so backward gathers nothing to prefetch")
    if impl == "fsdp2" and value == "1":
        return default, ("fsdp2 --backward-prefetch 1 runs as default: FSDP2's implicit backward prefetch already "
                         "gathers the next unit, one ahead")
    return value, None


def fsdp_plan(*, impls: Sequence[str], reshard_after_forward: Sequence[bool | int], forward_prefetch: Sequence[int],
              backward_prefetch: Sequence[str], limit_all_gathers: Sequence[bool | None], wraps: Sequence[str],
              precisions: Sequence[str], accum_steps: Sequence[int], world: int, extras: FsdpExtras | None = None,
              blocks: int | None = None) -> tuple[tuple[TrainConfig, ...], tuple[str, ...]]:
    """fsdp_configs' configurations, and a note for each requested value that runs as another one (merged into it)
    or does not apply to a configuration (left out of it). blocks: the model's, where known (--blocks-per-unit)."""
    notes: dict[str, None] = {}  # ordered, each once
    configs = _fsdp_configs(impls=impls, reshard_after_forward=reshard_after_forward, forward_prefetch=forward_prefetch,
                            backward_prefetch=backward_prefetch, limit_all_gathers=limit_all_gathers, wraps=wraps,
                            precisions=precisions, accum_steps=accum_steps, world=world, notes=notes)
    configs = with_extras(configs, extras or FsdpExtras(), world=world, blocks=blocks, notes=notes)
    return configs, tuple(notes)


def fsdp_configs(**axes: Any) -> tuple[TrainConfig, ...]:
    """FSDP2 takes the numeric prefetch depths, FSDP1 its pre/post/none and a 0/1 forward flag; each implementation
    runs the values that apply to it (an axis with none for it runs at its default). Values that run as the same
    configuration are merged into one (fsdp_plan says which)."""
    return fsdp_plan(**axes)[0]


def _fsdp_configs(*, impls: Sequence[str], reshard_after_forward: Sequence[bool | int],
                  forward_prefetch: Sequence[int], backward_prefetch: Sequence[str],
                  limit_all_gathers: Sequence[bool | None], wraps: Sequence[str], precisions: Sequence[str],
                  accum_steps: Sequence[int], world: int, notes: dict[str, None]) -> tuple[TrainConfig, ...]:
    """The cross product of the FSDP axes, each implementation over the values that apply to it."""
    chosen_impls = refuse_unknown("--impl", impls, FSDP_IMPLS)
    backwards = refuse_unknown("--backward-prefetch", backward_prefetch, FSDP2_BACKWARD + FSDP1_BACKWARD)
    chosen_wraps = refuse_unknown("--wrap", wraps, WRAPS)
    chosen_precisions = refuse_unknown("--mixed-precision", precisions, PRECISIONS)
    _refuse_prefetch_and_reshard(forward_prefetch, reshard_after_forward, world)
    configs: list[TrainConfig] = []
    for impl in chosen_impls:
        reshards, forward, backward, limits = _impl_axes(impl, reshard_after_forward, forward_prefetch, backwards,
                                                         limit_all_gathers)
        for reshard, fwd, requested, limit, wrap, precision, accum in itertools.product(
                reshards, forward, backward, limits, chosen_wraps, chosen_precisions, accum_steps):
            config = _fsdp_config(impl=impl, reshard=reshard, fwd=fwd, requested=requested, limit=limit, wrap=wrap,
                                  precision=precision, accum=accum, notes=notes)
            if config is not None and config not in configs:
                configs.append(config)
    if not configs:
        raise CommbenchError("no FSDP configuration is left: with --wrap model there is nothing to prefetch; "
                             "add --forward-prefetch 0 and --backward-prefetch default")
    return tuple(configs)


def _refuse_prefetch_and_reshard(forward_prefetch: Sequence[int], reshard_after_forward: Sequence[bool | int],
                                 world: int) -> None:
    """Forward prefetch depths below 0, and reshard-to sizes that are not a divisor of the ranks below their count."""
    for depth in forward_prefetch:
        if depth < 0:
            raise CommbenchError(f"--forward-prefetch {depth} is negative; use 0, 1 or 2 blocks ahead")
    for reshard in reshard_after_forward:
        if not isinstance(reshard, bool) and (world % reshard or reshard >= world):
            raise CommbenchError(f"--reshard-after-forward {reshard} must divide the {world} ranks and be fewer; "
                                 "use true or false")


def _impl_axes(impl: FsdpImpl, reshard_after_forward: Sequence[bool | int], forward_prefetch: Sequence[int],
               backward_prefetch: Sequence[BackwardPrefetch], limit_all_gathers: Sequence[bool | None]
               ) -> tuple[list[bool | int], list[int], list[BackwardPrefetch], list[bool | None]]:
    """The reshard, forward prefetch, backward prefetch and limit-all-gathers values that apply to one
    implementation; an axis with none for it runs at its default."""
    backward: list[BackwardPrefetch]
    if impl == "fsdp2":
        backward = [b for b in backward_prefetch if b in FSDP2_BACKWARD] or ["default"]
        return list(reshard_after_forward), list(forward_prefetch), backward, [None]
    backward = [b for b in backward_prefetch if b in FSDP1_BACKWARD] or ["pre"]
    forward = [d for d in forward_prefetch if d <= 1]
    if not forward:
        raise CommbenchError("FSDP1's forward prefetch is on (1) or off (0); give --forward-prefetch 0 or 1")
    reshards: list[bool | int] = [r for r in reshard_after_forward if isinstance(r, bool)]
    if not reshards:
        raise CommbenchError("FSDP1 reshards after forward or not (FULL_SHARD / SHARD_GRAD_OP): give "
                             "--reshard-after-forward true or false")
    return reshards, forward, backward, list(limit_all_gathers)


def _fsdp_config(*, impl: FsdpImpl, reshard: bool | int, fwd: int, requested: BackwardPrefetch, limit: bool | None,
                 wrap: Wrap, precision: Precision, accum: int, notes: dict[str, None]) -> TrainConfig | None:
    """One point of the cross product as the configuration it runs (None: one unit has no other unit to prefetch);
    a requested backward prefetch that runs as another gets a note."""
    bwd, why = effective_backward_prefetch(impl, reshard, requested)
    if wrap == "model" and (fwd or bwd not in ("default", "pre")):
        return None
    if why:
        notes[why] = None
    return TrainConfig(strategy="zero3" if reshard is not False else "zero2", impl=impl, accum_steps=accum,
                       reshard_after_forward=reshard, forward_prefetch=fwd, backward_prefetch=bwd,
                       limit_all_gathers=limit, wrap=wrap, mixed_precision=precision)


def strategy_configs(*, strategies: Sequence[str], impl: str, shard_group: int | None, bucket_cap_mb: float | None,
                     accum_steps: Sequence[int], world: int, precisions: Sequence[str] = ("fp32",),
                     master_weights: Sequence[bool | None] = (None,), overlap_with_ddp: Sequence[bool | None] = (None,)
                     ) -> tuple[TrainConfig, ...]:
    """master_weights (ddp, zero1 and zero2 under bf16 only): True keeps bf16 parameters with fp32 master copies in
    the optimizer (the ZeRO paper's mixed-precision rows; zero2 then runs as the paper's, impl zero2, with
    bucket_cap_mb its buckets' cap), False fp32 parameters under autocast (zero2 on FSDP). overlap_with_ddp: zero1's
    ZeroRedundancyOptimizer stepped from DDP's comm hook, or not."""
    chosen = refuse_unknown("--strategy", strategies, STRATEGIES)
    (fsdp_impl,) = refuse_unknown("--impl", (impl,), FSDP_IMPLS)
    chosen_precisions = refuse_unknown("--mixed-precision", precisions, PRECISIONS)
    _refuse_unused_master_weights(strategies, precisions, master_weights)
    configs = []
    for strategy, precision, accum in itertools.product(chosen, chosen_precisions, accum_steps):
        masters = master_weights if precision == "bf16" else (None,)
        if strategy == "ddp" or strategy == "zero1":  # two comparisons: mypy narrows the Literal for impl
            for master, overlap in itertools.product(masters, overlap_with_ddp if strategy == "zero1" else (None,)):
                configs.append(TrainConfig(strategy=strategy, impl=strategy, accum_steps=accum,
                                           bucket_cap_mb=bucket_cap_mb, mixed_precision=precision,
                                           master_weights=master, overlap_with_ddp=overlap))
            continue
        fsdp = TrainConfig(strategy=strategy, impl=fsdp_impl, accum_steps=accum,
                           reshard_after_forward=strategy != "zero2", wrap="block", mixed_precision=precision,
                           shard_group=shard_group if strategy == "hsdp" else None)
        for master in masters if strategy == "zero2" else (None,):
            configs.append(TrainConfig(strategy="zero2", impl="zero2", accum_steps=accum, bucket_cap_mb=bucket_cap_mb,
                                       mixed_precision=precision, master_weights=True) if master else fsdp)
    return tuple(configs)


def _refuse_unused_master_weights(strategies: Sequence[str], precisions: Sequence[str],
                                  master_weights: Sequence[bool | None]) -> None:
    """--master-weights changes ddp, zero1 and zero2 under bf16 only: anywhere else it would be silently dropped."""
    if master_weights == (None,):
        return
    if "bf16" not in precisions or not {"ddp", "zero1", "zero2"} & set(strategies):
        raise CommbenchError("--master-weights applies to ddp, zero1 and zero2 under --mixed-precision bf16 (FSDP's "
                             "bf16 policy keeps fp32 shards as its master copy already); add --mixed-precision bf16 "
                             "and --strategy zero1 (or ddp, zero2), or drop --master-weights")


def default_strategies(world: int) -> tuple[StrategyKey, ...]:
    """HSDP needs at least two replicas of a shard group of at least two: four ranks or more."""
    return STRATEGIES if world >= 4 and world % 2 == 0 else WITHOUT_SHARD_GROUP
