"""`commbench ddp`, `commbench fsdp` and `commbench zero`: training-step sweeps over parallelism settings."""


import click

from commbench import launch
from commbench.backends import resolve_target
from commbench.cli.options import split_commas, target_options
from commbench.cli.run_job import BenchJob, bench_command
from commbench.errors import CommbenchError
from commbench.units import parse_count, parse_memory
from commbench.session import Job
from commbench.training import plan
from commbench.training.spec import ISOLATIONS, TrainSpec, validate
from commbench.training.synthetic import KINDS, ModelShape, shape_for_params
from commbench.training.table import format_training_table
from commbench.training.worker import run_training

# Defaults sized to finish a DDP sweep in about two minutes on a 2-core CPU, and to give a GPU real work.
CPU_DEFAULTS = {"params": "5M", "seq_len": 64, "micro_batch": 2, "layers": 4}
GPU_DEFAULTS = {"params": "350M", "seq_len": 1024, "micro_batch": 8, "layers": 24}


def _numbers(option: str, values: tuple[str, ...], convert) -> tuple:
    try:
        return tuple(convert(value) for value in values)
    except ValueError:
        raise CommbenchError(f"{option} takes numbers, got {', '.join(values)}") from None


def training_options(function):
    """Model, step and run options shared by the three training sweeps."""
    options = [
        click.option("--model", "model_kind", type=click.Choice(KINDS), default="transformer", show_default=True,
                     help="transformer (attention + MLP blocks) or mlp (MLP blocks)."),
        click.option("--params", default=None, help="Model size, e.g. 125M; the hidden size is chosen to match "
                     f"[default: {CPU_DEFAULTS['params']} on CPU, {GPU_DEFAULTS['params']} on GPU]."),
        click.option("--layers", type=int, default=None, help="Blocks [default: 4 on CPU, 24 on GPU]."),
        click.option("--hidden", type=int, default=None, help="Hidden size (instead of --params)."),
        click.option("--heads", type=int, default=4, show_default=True, help="Attention heads."),
        click.option("--seq-len", type=int, default=None, help="Tokens per sample [default: 64 CPU, 1024 GPU]."),
        click.option("--micro-batch", type=int, default=None, help="Samples per rank per micro-batch "
                     "[default: 2 CPU, 8 GPU]."),
        click.option("--accum-steps", "accum_steps", multiple=True, callback=split_commas,
                     help="Micro-batches per optimizer step (gradient sync on the last only), e.g. 1,4 [default: 1]."),
        click.option("--steps", type=int, default=10, show_default=True, help="Measured optimizer steps."),
        click.option("--warmup-steps", type=int, default=2, show_default=True,
                     help="Untimed steps first (DDP rebuilds its buckets at step 2)."),
        click.option("--profile-steps", type=int, default=3, show_default=True,
                     help="Steps recorded with torch.profiler for comm/exposed/overlap (0 = none)."),
        click.option("--seed", type=int, default=0, show_default=True, help="Weights and data seed."),
        click.option("--lr", type=float, default=1e-4, show_default=True, help="AdamW learning rate."),
        click.option("--isolation", type=click.Choice(("auto", *ISOLATIONS)), default="auto", show_default=True,
                     help="reset: one launch, memory released and peak counters reset between configurations; "
                          "process: one launch per configuration; auto: process on CPU when commbench launches the "
                          "ranks (a process's RSS does not reset exactly), else reset (a GPU allocator's peak does)."),
        click.option("--memory-budget", default=None,
                     help="Peak memory per rank that counts as fitting, e.g. 80GB [default: GPU memory, or RAM / "
                          "ranks]."),
        click.option("--timeout", type=float, default=300.0, show_default=True,
                     help="Seconds without a finished configuration before the sweep is ended as failed."),
    ]
    for option in reversed(options):
        function = option(function)
    return target_options(function)


def _training_job(bench: str, build_configs, options: dict) -> BenchJob:
    """Resolve the target and model and build the configurations."""
    world_in_job = launch.world_size_in_job()
    target = resolve_target(backend=options["backend"], device=options["device"], nproc=options["nproc"],
                            world_size_in_job=world_in_job)
    defaults = GPU_DEFAULTS if target.device == "cuda" else CPU_DEFAULTS
    seq_len = options["seq_len"] or defaults["seq_len"]
    layers = options["layers"] or defaults["layers"]
    if options["hidden"]:
        shape = ModelShape(kind=options["model_kind"], layers=layers, hidden=options["hidden"],
                           heads=options["heads"], seq_len=seq_len)
    else:
        params = parse_count(options["params"] or defaults["params"], option="--params")
        shape = shape_for_params(params, kind=options["model_kind"], layers=layers, heads=options["heads"],
                                 seq_len=seq_len)
    accum = _numbers("--accum-steps", options["accum_steps"] or ("1",), int)
    budget = parse_memory(options["memory_budget"], option="--memory-budget") if options["memory_budget"] else None
    isolation = options["isolation"]
    if isolation == "process" and world_in_job is not None:
        raise CommbenchError("--isolation process needs commbench to launch the ranks; inside torchrun/srun use "
                             "--isolation reset")
    if isolation == "auto":
        isolation = "process" if target.device == "cpu" and world_in_job is None else "reset"
    spec = TrainSpec(bench=bench, configs=build_configs(accum, target.nproc), shape=shape,
                     micro_batch=options["micro_batch"] or defaults["micro_batch"], steps=options["steps"],
                     warmup_steps=options["warmup_steps"], profile_steps=options["profile_steps"],
                     seed=options["seed"], lr=options["lr"], backend=target.backend, device=target.device,
                     nproc=target.nproc, isolation=isolation, memory_budget_bytes=budget,
                     timeout_s=options["timeout"])
    validate(spec)
    job = Job(spec=spec, points=spec.points, worker_module="commbench.training.worker", run_ranks=run_training,
              process_per_point=spec.isolation == "process")
    return BenchJob(job, render=format_training_table,
                    wrong_message="{n} rank(s) failed the check (replicas disagree or a loss is not finite)")


@click.command()
@click.option("--bucket-cap-mb", multiple=True, callback=split_commas,
              help="DDP bucket sizes in MiB [default: 1,5,10,25,50,100].")
@click.option("--gradient-as-bucket-view", "bucket_views", multiple=True, callback=split_commas,
              help="true and/or false [default: false].")
@click.option("--static-graph", "static_graphs", multiple=True, callback=split_commas,
              help="true and/or false [default: false].")
@click.option("--comm-hook", "comm_hooks", multiple=True, callback=split_commas,
              help="none, bf16, fp16 (gradients compressed for the all-reduce) [default: none].")
@training_options
@bench_command
def ddp(bucket_cap_mb, bucket_views, static_graphs, comm_hooks, **options) -> BenchJob:
    """DDP step time, exposed communication and memory over bucket sizes and DDP options.

    Exit codes: 0 all configurations correct, 1 a check failed, 2 bad input, 3 the run failed.
    """
    def configs(accum, world):
        return plan.ddp_configs(
            bucket_cap_mb=_numbers("--bucket-cap-mb", bucket_cap_mb or ("1", "5", "10", "25", "50", "100"), float),
            gradient_as_bucket_view=tuple(plan.parse_bool("--gradient-as-bucket-view", v)
                                          for v in bucket_views or ("false",)),
            static_graph=tuple(plan.parse_bool("--static-graph", v) for v in static_graphs or ("false",)),
            comm_hooks=comm_hooks or ("none",), accum_steps=accum)
    return _training_job("ddp", configs, options)


@click.command()
@click.option("--impl", "impls", multiple=True, callback=split_commas,
              help="fsdp2 (fully_shard) and/or fsdp1 (FullyShardedDataParallel) [default: fsdp2].")
@click.option("--reshard-after-forward", "reshards", multiple=True, callback=split_commas,
              help="true (ZeRO-3), false (ZeRO-2) or, FSDP2 only, a rank count [default: true,false].")
@click.option("--forward-prefetch", "forward", multiple=True, callback=split_commas,
              help="FSDP2: blocks gathered ahead in forward (0, 1, 2); FSDP1: 0 or 1 [default: 0,1].")
@click.option("--backward-prefetch", "backward", multiple=True, callback=split_commas,
              help="FSDP2: default, 1, 2 blocks ahead; FSDP1: pre, post, none [default: default,1 / pre].")
@click.option("--limit-all-gathers", "limits", multiple=True, callback=split_commas,
              help="FSDP1: true and/or false [default: true].")
@click.option("--wrap", "wraps", multiple=True, callback=split_commas,
              help="block (one FSDP unit per block) and/or model (one unit) [default: block].")
@click.option("--mixed-precision", "precisions", multiple=True, callback=split_commas,
              help="fp32 and/or bf16 (bf16 compute and all-gathers, fp32 reduction) [default: fp32].")
@training_options
@bench_command
def fsdp(impls, reshards, forward, backward, limits, wraps, precisions, **options) -> BenchJob:
    """FSDP step time, exposed communication and memory over resharding, prefetching, wrapping and precision.

    Exit codes: 0 all configurations correct, 1 a check failed, 2 bad input, 3 the run failed.
    """
    def configs(accum, world):
        return plan.fsdp_configs(
            impls=impls or ("fsdp2",),
            reshard_after_forward=tuple(plan.parse_reshard(v) for v in reshards or ("true", "false")),
            forward_prefetch=_numbers("--forward-prefetch", forward or ("0", "1"), int),
            backward_prefetch=backward or ("default", "1", "pre"),
            limit_all_gathers=tuple(plan.parse_bool("--limit-all-gathers", v) for v in limits or ("true",)),
            wraps=wraps or ("block",), precisions=precisions or ("fp32",), accum_steps=accum, world=world)
    return _training_job("fsdp", configs, options)


@click.command()
@click.option("--strategy", "strategies", multiple=True, callback=split_commas,
              help="ddp, zero1, zero2, zero3, hsdp [default: all that the rank count allows; hsdp needs 4+].")
@click.option("--impl", default="fsdp2", show_default=True,
              help="What runs zero2/zero3/hsdp: fsdp2 (fully_shard) or fsdp1 (SHARD_GRAD_OP / FULL_SHARD / "
                   "HYBRID_SHARD on a 2-D mesh).")
@click.option("--shard-group", type=int, default=None,
              help="HSDP: ranks per shard group [default: 2].")
@click.option("--bucket-cap-mb", type=float, default=None, help="DDP bucket size for ddp and zero1 [default: 25].")
@training_options
@bench_command
def zero(strategies, impl, shard_group, bucket_cap_mb, **options) -> BenchJob:
    """Sharding strategies side by side: DDP, ZeRO-1/2/3 and HSDP, with model state measured against the formulas.

    Exit codes: 0 all configurations correct, 1 a check failed, 2 bad input, 3 the run failed.
    """
    def configs(accum, world):
        chosen = strategies or plan.default_strategies(world)
        return plan.strategy_configs(strategies=chosen, impl=impl, accum_steps=accum, bucket_cap_mb=bucket_cap_mb,
                                     shard_group=shard_group or (2 if "hsdp" in chosen else None), world=world)
    return _training_job("strategy", configs, options)
