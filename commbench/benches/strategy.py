"""Bench kind `strategy` (`commbench zero`): DDP, ZeRO-1/2/3 and HSDP side by side, with the model state each rank
holds measured against the formulas."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from commbench.benches.options import option
from commbench.benches.training import SELFTEST_TRAINING, SHARDING_PLOTS, TrainingKind, TrainingOptions
from commbench.errors import CommbenchError
from commbench.names import DDP_DEFAULT_CAP_MB

if TYPE_CHECKING:
    from commbench.training.spec import Precision, TrainConfig


@dataclass(frozen=True, kw_only=True)
class StrategyOptions(TrainingOptions):
    strategies: tuple[str, ...] = option("--strategy", many=True,
                                         help="ddp, zero1, zero2, zero3, hsdp [default: all that the rank count "
                                              "allows; hsdp needs 4+].")
    impl: str = option("--impl", default="fsdp2", show_default=True,
                       help="What runs zero2/zero3/hsdp: fsdp2 (fully_shard) or fsdp1 (SHARD_GRAD_OP / FULL_SHARD / "
                            "HYBRID_SHARD on a 2-D mesh).")
    shard_group: int | None = option("--shard-group", type=int, lowest=1,
                                     help="HSDP: ranks per shard group [default: 2].")
    bucket_cap_mb: float | None = option("--bucket-cap-mb", type=float, above_zero=True, unit="MiB",
                                         help="Bucket size: DDP's for ddp and zero1, the gradient buckets' of zero2 "
                                              f"with --master-weights true [default: {DDP_DEFAULT_CAP_MB:g}].")
    master_weights: tuple[bool, ...] = option("--master-weights", type=bool, many=True,
                                              help="ddp, zero1 and zero2 under --mixed-precision bf16: true keeps "
                                                   "bf16 parameters and gradients with fp32 master copies and Adam "
                                                   "moments in the optimizer (the ZeRO paper's mixed-precision rows: "
                                                   "ZeRO-1 4Ψ + 12Ψ/N; zero2 runs as the paper's ZeRO-2, 2Ψ + 14Ψ/N, "
                                                   "not on FSDP), false fp32 parameters under autocast "
                                                   "[default: false].")
    overlap_with_ddp: tuple[bool, ...] = option("--overlap-with-ddp", type=bool, many=True,
                                                help="zero1: true steps ZeroRedundancyOptimizer from DDP's comm hook "
                                                     "as the gradients are reduced (overlap_with_ddp; NCCL only, "
                                                     "--warmup-steps 3+) [default: false].")


class StrategyKind(TrainingKind[StrategyOptions]):
    """Sharding strategies side by side: DDP, ZeRO-1/2/3 and HSDP, with model state measured against the formulas.

    Exit codes: 0 all configurations correct, 1 a check failed, 2 bad input, 3 the run failed.
    """

    name, command = "strategy", "zero"
    title = "strategy sweep (commbench zero)"
    options = StrategyOptions
    plots = SHARDING_PLOTS
    selftest_values = {**SELFTEST_TRAINING, "strategies": ("zero1", "zero2")}
    """ZeRO-1 (ZeroRedundancyOptimizer) next to ZeRO-2."""

    def configs(self, options: StrategyOptions, accum_steps: tuple[int, ...], world: int,
                precisions: tuple[Precision, ...]) -> tuple[TrainConfig, ...]:
        from commbench.training import plan

        chosen = options.strategies or plan.default_strategies(world)
        _refuse_ignored(options, chosen)
        return plan.strategy_configs(strategies=chosen, impl=options.impl, accum_steps=accum_steps,
                                     bucket_cap_mb=options.bucket_cap_mb,
                                     shard_group=options.shard_group or (2 if "hsdp" in chosen else None),
                                     world=world, precisions=precisions,
                                     master_weights=options.master_weights or (None,),
                                     overlap_with_ddp=options.overlap_with_ddp or (None,))


def _refuse_ignored(options: StrategyOptions, chosen: tuple[str, ...]) -> None:
    """An option no chosen strategy reads would be silently dropped: a sweep that seems to vary it but does not."""
    listed = ", ".join(chosen)
    if options.shard_group is not None and "hsdp" not in chosen:
        raise CommbenchError(f"--shard-group {options.shard_group} applies to hsdp only, and this sweep runs {listed}; "
                             "add --strategy hsdp (4+ ranks) or drop --shard-group")
    partitioned_zero2 = "zero2" in chosen and True in options.master_weights
    if options.bucket_cap_mb is not None and not ({"ddp", "zero1"} & set(chosen) or partitioned_zero2):
        raise CommbenchError(f"--bucket-cap-mb {options.bucket_cap_mb:g} applies to ddp, zero1 and zero2 with "
                             f"--master-weights true only, and this sweep runs {listed}; add --strategy ddp or zero1, "
                             "or drop --bucket-cap-mb")
    if options.overlap_with_ddp and "zero1" not in chosen:
        raise CommbenchError(f"--overlap-with-ddp applies to zero1 only, and this sweep runs {listed}; add --strategy "
                             "zero1 or drop --overlap-with-ddp")


KIND = StrategyKind()
