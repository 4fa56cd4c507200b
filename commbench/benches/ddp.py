"""Bench kind `ddp` (`commbench ddp`): DDP step time, exposed communication and memory over bucket sizes."""

from dataclasses import dataclass

from commbench.bench_kind import Plot
from commbench.benches.options import option
from commbench.benches.training import MODEL_STATE_PLOT, TrainingKind, TrainingOptions

COMM_HOOKS = ("none", "bf16", "fp16")


@dataclass(frozen=True, kw_only=True)
class DdpOptions(TrainingOptions):
    bucket_cap_mb: tuple[float, ...] = option("--bucket-cap-mb", type=float, many=True, above_zero=True,
                                              unit="MiB",
                                              help="DDP bucket sizes in MiB [default: 1,5,10,25,50,100].")
    gradient_as_bucket_view: tuple[bool, ...] = option("--gradient-as-bucket-view", type=bool, many=True,
                                                       help="true and/or false [default: false].")
    static_graph: tuple[bool, ...] = option("--static-graph", type=bool, many=True,
                                            help="true and/or false [default: false].")
    comm_hooks: tuple[str, ...] = option("--comm-hook", many=True, choices=COMM_HOOKS,
                                         help="none, bf16, fp16 (gradients compressed for the all-reduce) "
                                              "[default: none].")


class DdpKind(TrainingKind):
    """DDP step time, exposed communication and memory over bucket sizes and DDP options.

    Exit codes: 0 all configurations correct, 1 a check failed, 2 bad input, 3 the run failed.
    """

    name = command = "ddp"
    title = "DDP sweep (commbench ddp)"
    options = DdpOptions
    plots = (Plot("ddp_buckets", "DDP: step time by bucket size, exposed communication stacked",
                  "commbench.report.training_plots:ddp_buckets"), MODEL_STATE_PLOT)

    def configs(self, options: DdpOptions, accum_steps, world, precisions):
        from commbench.training import plan

        return plan.ddp_configs(bucket_cap_mb=options.bucket_cap_mb or (1.0, 5.0, 10.0, 25.0, 50.0, 100.0),
                                gradient_as_bucket_view=options.gradient_as_bucket_view or (False,),
                                static_graph=options.static_graph or (False,),
                                comm_hooks=options.comm_hooks or ("none",), precisions=precisions,
                                accum_steps=accum_steps)


KIND = DdpKind()
