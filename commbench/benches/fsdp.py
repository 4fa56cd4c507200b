"""Bench kind `fsdp` (`commbench fsdp`): FSDP step time, exposed communication and memory over resharding,
prefetching, wrapping and precision."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from commbench.benches.options import option
from commbench.benches.training import SELFTEST_TRAINING, SHARDING_PLOTS, TrainingKind, TrainingOptions
from commbench.training.accum_sync import ACCUM_SYNCS, AccumSync
from commbench.training.checkpointing import ACTIVATION_CHECKPOINTING, ActivationCheckpointing
from commbench.training.spec import REDUCE_DTYPES, ReduceDtype

if TYPE_CHECKING:
    from commbench.training.spec import ModelShape, Precision, TrainConfig


@dataclass(frozen=True, kw_only=True)
class FsdpOptions(TrainingOptions):
    impls: tuple[str, ...] = option("--impl", many=True,
                                    help="fsdp2 (fully_shard) and/or fsdp1 (FullyShardedDataParallel) "
                                         "[default: fsdp2].")
    reshards: tuple[str, ...] = option("--reshard-after-forward", many=True,
                                       help="true (ZeRO-3), false (ZeRO-2) or, FSDP2 only, a rank count "
                                            "[default: true,false].")
    forward_prefetch: tuple[int, ...] = option("--forward-prefetch", type=int, many=True, lowest=0,
                                               help="FSDP2: blocks gathered ahead in forward (0, 1, 2); FSDP1: 0 or 1 "
                                                    "[default: 0,1].")
    backward_prefetch: tuple[str, ...] = option("--backward-prefetch", many=True,
                                                help="FSDP2: default (its implicit prefetch, one unit ahead; 1 runs "
                                                     "as default), 2 units ahead; FSDP1: pre, post, none; with "
                                                     "--reshard-after-forward false every value runs as the default "
                                                     "[default: default,2 / pre].")
    limit_all_gathers: tuple[bool, ...] = option("--limit-all-gathers", type=bool, many=True,
                                                 help="FSDP1: true and/or false [default: true].")
    wraps: tuple[str, ...] = option("--wrap", many=True,
                                    help="block (one FSDP unit per block) and/or model (one unit) [default: block].")
    reduce_dtypes: tuple[ReduceDtype, ...] = option("--reduce-dtype", many=True, choices=REDUCE_DTYPES,
                                            help="What gradients are reduce-scattered (and HSDP all-reduced) in: "
                                                 "fp32 and/or bf16 (half the bytes) [default: fp32].")
    cpu_offloads: tuple[bool, ...] = option("--cpu-offload", type=bool, many=True,
                                            help="true keeps the shards, their gradients and the optimizer state in "
                                                 "host memory (CPUOffloadPolicy / CPUOffload; GPU runs only), false "
                                                 "on the GPU [default: false].")
    activation_checkpointing: tuple[ActivationCheckpointing, ...] = option(
        "--activation-checkpointing", many=True, choices=ACTIVATION_CHECKPOINTING,
        help="none and/or full (every block recomputed in backward, as torchtitan's full AC; the compute-only "
             "baseline recomputes too) [default: none].")
    blocks_per_unit: tuple[int, ...] = option("--blocks-per-unit", type=int, many=True, lowest=1,
                                              help="FSDP2: consecutive blocks per fully_shard unit (one all-gather "
                                                   "and one reduce-scatter each), e.g. 1,2 [default: 1].")
    accum_syncs: tuple[AccumSync, ...] = option(
        "--accum-sync", many=True, choices=ACCUM_SYNCS,
        help="With --accum-steps 2+, what micro-batches before the last do: last (no reduction until the last), "
             "every (reduce-scatter each), last-gathered (FSDP2: last, and parameters stay gathered between "
             "micro-batches), replicas-last (FSDP2 HSDP: reduce-scatter each, all-reduce across replicas on the "
             "last) [default: last].")
    shard_groups: tuple[int, ...] = option("--shard-group", type=int, many=True, lowest=1,
                                           help="Ranks per shard group: a value below the rank count runs HSDP "
                                                "(replicas × shard group), the rank count fully sharded "
                                                "[default: every rank].")


class FsdpKind(TrainingKind[FsdpOptions]):
    """FSDP step time, exposed communication and memory over resharding, prefetching, wrapping and precision.

    Exit codes: 0 all configurations correct, 1 a check failed, 2 bad input, 3 the run failed.
    """

    name = command = "fsdp"
    title = "FSDP sweep (commbench fsdp)"
    options = FsdpOptions
    plots = SHARDING_PLOTS
    selftest_values = {**SELFTEST_TRAINING, "impls": ("fsdp2",), "reshards": ("true",), "forward_prefetch": (1,),
                       "backward_prefetch": ("1",)}
    """FSDP2 resharding (ZeRO-3) with prefetching."""

    def configs(self, options: FsdpOptions, accum_steps: tuple[int, ...], world: int,
                precisions: tuple[Precision, ...]) -> tuple[TrainConfig, ...]:
        return self._plan(options, accum_steps, world, precisions, blocks=None)[0]

    def configs_for_model(self, options: FsdpOptions, accum_steps: tuple[int, ...], world: int,
                          precisions: tuple[Precision, ...], shape: ModelShape
                          ) -> tuple[tuple[TrainConfig, ...], tuple[str, ...]]:
        return self._plan(options, accum_steps, world, precisions, blocks=shape.layers)

    def _plan(self, options: FsdpOptions, accum_steps: tuple[int, ...], world: int,
              precisions: tuple[Precision, ...], *, blocks: int | None
              ) -> tuple[tuple[TrainConfig, ...], tuple[str, ...]]:
        """The configurations, and a note for each requested value that runs as another (merged into one row);
        blocks: the model's, where known (units of several blocks are checked against it)."""
        from commbench.training import plan
        from commbench.training.fsdp_knobs import FsdpExtras

        extras = FsdpExtras(reduce_dtypes=options.reduce_dtypes or (None,),
                            cpu_offloads=options.cpu_offloads or (None,),
                            activation_checkpointing=options.activation_checkpointing or (None,),
                            blocks_per_unit=options.blocks_per_unit or (None,),
                            accum_syncs=options.accum_syncs or (None,), shard_groups=options.shard_groups or (None,))
        return plan.fsdp_plan(extras=extras, blocks=blocks,
            impls=options.impls or ("fsdp2",),
            reshard_after_forward=tuple(plan.parse_reshard(value) for value in options.reshards or ("true", "false")),
            forward_prefetch=options.forward_prefetch or (0, 1),
            backward_prefetch=options.backward_prefetch or ("default", "2", "pre"),
            limit_all_gathers=options.limit_all_gathers or (True,), wraps=options.wraps or ("block",),
            precisions=precisions, accum_steps=accum_steps, world=world)


KIND = FsdpKind()
