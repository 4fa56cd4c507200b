"""Bench kind `ddp` (`commbench ddp`): DDP step time, exposed communication and memory over bucket sizes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from commbench.bench_kind import Plot
from commbench.benches.options import option
from commbench.benches.training import MODEL_STATE_PLOT, SELFTEST_TRAINING, TrainingKind, TrainingOptions
from commbench.names import DDP_DEFAULT_CAP_MB, DDP_DEFAULT_FIRST_MB
from commbench.training.ddp_hooks import COMM_HOOKS, CommHook
from commbench.training.spec import parse_bucket_cap

if TYPE_CHECKING:
    from commbench.training.spec import ModelShape, Precision, TrainConfig


@dataclass(frozen=True, kw_only=True)
class DdpOptions(TrainingOptions):
    bucket_cap_mb: tuple[float | str, ...] = option(
        "--bucket-cap-mb", many=True, parse=parse_bucket_cap,
        help=f"DDP bucket caps in MiB, and/or default (DDP's own buckets: nothing passed, a {DDP_DEFAULT_FIRST_MB:g} "
             f"MiB first bucket then {DDP_DEFAULT_CAP_MB:g} MiB; any explicit cap makes the first bucket as large as "
             "the rest). Caps that give this model the same buckets run once [default: default, and 1/16, 1/4 and all "
             "of the model's gradient bytes].")
    first_bucket_mb: tuple[float, ...] = option(
        "--first-bucket-mb", type=float, many=True, above_zero=True, unit="MiB",
        help="First-bucket caps in MiB (the gradients backward produces first), passed as torch's bucket_cap_mb_list "
             f"[first, cap] [default: as large as the cap; {DDP_DEFAULT_FIRST_MB:g} MiB for default].")
    gradient_as_bucket_view: tuple[bool, ...] = option("--gradient-as-bucket-view", type=bool, many=True,
                                                       help="true and/or false [default: false].")
    static_graph: tuple[bool, ...] = option("--static-graph", type=bool, many=True,
                                            help="true and/or false [default: false]. With --accum-steps above 1 "
                                                 "the first step syncs every micro-batch (a static graph is "
                                                 "recorded on a synced iteration).")
    compile: tuple[bool, ...] = option("--compile", type=bool, many=True,
                                       help="true and/or false [default: false]. true runs the DDP module under "
                                            "torch.compile (TorchDynamo splits the graph at bucket edges so the "
                                            "all-reduces still overlap backward); the first warm-up step compiles, "
                                            "which takes a minute or more on CPU. Needs bucket caps of 1 MiB or more.")
    comm_hooks: tuple[CommHook, ...] = option("--comm-hook", many=True, choices=COMM_HOOKS,
                                         help="none; bf16, fp16 (gradients compressed for the all-reduce: half the "
                                              "bytes); powersgd (rank-1 PowerSGD with error feedback, compressing "
                                              "from step 3; NCCL only) [default: none].")


class DdpKind(TrainingKind[DdpOptions]):
    """DDP step time, exposed communication and memory over bucket sizes and DDP options.

    Exit codes: 0 all configurations correct, 1 a check failed, 2 bad input, 3 the run failed.
    """

    name = command = "ddp"
    title = "DDP sweep (commbench ddp)"
    options = DdpOptions
    plots = (Plot("ddp_buckets", "DDP: step time by bucket size, exposed communication stacked"), MODEL_STATE_PLOT)
    selftest_values = {**SELFTEST_TRAINING, "bucket_cap_mb": (1,)}
    """Several buckets of the tiny model."""

    def configs_for_model(self, options: DdpOptions, accum_steps: tuple[int, ...], world: int,
                          precisions: tuple[Precision, ...], shape: ModelShape
                          ) -> tuple[tuple[TrainConfig, ...], tuple[str, ...]]:
        """Bucket caps relative to the model's gradient bytes by default; caps that give this model the same buckets
        are one configuration, run once (with a note naming them)."""
        from commbench.training import ddp_buckets, plan

        caps = options.bucket_cap_mb or plan.ddp_default_caps(sum(ddp_buckets.gradient_bytes_in_ready_order(shape)))
        configs = plan.ddp_configs(bucket_cap_mb=caps, first_bucket_mb=options.first_bucket_mb or (None,),
                                   gradient_as_bucket_view=options.gradient_as_bucket_view or (False,),
                                   static_graph=options.static_graph or (False,),
                                   compile=options.compile or (False,),
                                   comm_hooks=options.comm_hooks or ("none",), precisions=precisions,
                                   accum_steps=accum_steps)
        return ddp_buckets.merge_same_buckets(configs, shape)

    def configs(self, options: DdpOptions, accum_steps: tuple[int, ...], world: int,
                precisions: tuple[Precision, ...]) -> tuple[TrainConfig, ...]:
        raise NotImplementedError("DDP's configurations depend on the model: configs_for_model()")


KIND = DdpKind()
