"""What the training bench kinds (ddp, fsdp, strategy) share: model and step options, their resolution into a
TrainSpec, the result columns (the configuration's settings among them), the rank side, table and metrics."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict, TypeVar

from commbench.bench_kind import Bench, BenchKind, Measured, Metric, Plot, RankRun
from commbench.benches.options import TargetOptions, option
from commbench.errors import CommbenchError, CommbenchWarning
from commbench.machine import resolve_target
from commbench.names import AUTO, CPU, CUDA, Auto
from commbench.schema import common
from commbench.schema import training as col
from commbench.schema.training import (  # the kinds' files, declared in commbench/schema/training.py
    KEY_COLUMNS,
    REQUIRED_COLUMNS,
    RESULT_COLUMNS,
    SAMPLE_COLUMNS,
)
from commbench.training.spec import (
    COMPILATIONS_PER_CONFIG,
    COMPILE_ALLOWANCE_S,
    ISOLATIONS,
    MODEL_KINDS,
    PRECISIONS,
    Isolation,
    ModelKind,
    Precision,
)

if TYPE_CHECKING:
    import pandas as pd

    from commbench.bench_kind import RankContext
    from commbench.machine import Machine
    from commbench.training.measure import LaunchMemory
    from commbench.training.spec import ConfigPoint, ModelShape, TrainConfig, TrainSpec

IsolationChoice = Auto | Isolation
"""What --isolation takes: an isolation, or auto (resolved against the machine in resolve())."""
ISOLATION_CHOICES: tuple[IsolationChoice, ...] = (AUTO, *ISOLATIONS)


class _Defaults(TypedDict):
    params: str
    seq_len: int
    micro_batch: int
    layers: int
    vocab: int


# Defaults sized to finish a DDP sweep in about two minutes on a 2-core CPU, and to give a GPU real work.
# The vocabulary: small on CPU (its embedding and head still the largest units), a Llama-2-sized one on GPU.
DEFAULTS: dict[str, _Defaults] = {
    CPU: {"params": "5M", "seq_len": 64, "micro_batch": 2, "layers": 4, "vocab": 4096},
    CUDA: {"params": "350M", "seq_len": 1024, "micro_batch": 8, "layers": 24, "vocab": 32000}}
MODEL_STATE_PLOT = Plot("model_state", "Model state per rank: measured vs predicted")
STEPS_MEMORY_PLOT = Plot("strategy_steps_memory", "FSDP / strategies: step time, exposed communication, peak memory")
SHARDING_PLOTS = (STEPS_MEMORY_PLOT, MODEL_STATE_PLOT)
"""The figures of the sharding sweeps (fsdp, zero): steps and memory per configuration, model state per rank."""


@dataclass(frozen=True, kw_only=True)
class TrainingOptions(TargetOptions):
    """Model, step and run options shared by the training sweeps."""

    model_kind: ModelKind = option("--model", choices=MODEL_KINDS, default="transformer", show_default=True,
                             help="transformer (attention + MLP blocks) or mlp (MLP blocks).")
    params: str | None = option("--params", help="Model size, e.g. 125M; the hidden size is chosen to match "
                                f"[default: {DEFAULTS[CPU]['params']} on CPU, {DEFAULTS[CUDA]['params']} on GPU].")
    layers: int | None = option("--layers", type=int, lowest=1, help="Blocks [default: 4 on CPU, 24 on GPU].")
    hidden: int | None = option("--hidden", type=int, lowest=1, help="Hidden size (instead of --params).")
    heads: int = option("--heads", type=int, lowest=1, default=4, show_default=True, help="Attention heads.")
    vocab: int | None = option("--vocab", type=int, lowest=1,
                               help="Transformer: tokens of its embedding and LM head (the mlp model has neither) "
                                    f"[default: {DEFAULTS[CPU]['vocab']} on CPU, {DEFAULTS[CUDA]['vocab']} on GPU].")
    seq_len: int | None = option("--seq-len", type=int, lowest=1, help="Tokens per sample [default: 64 CPU, 1024 GPU].")
    micro_batch: int | None = option("--micro-batch", type=int, lowest=1,
                                     help="Samples per rank per micro-batch [default: 2 CPU, 8 GPU].")
    accum_steps: tuple[int, ...] = option("--accum-steps", type=int, many=True, lowest=1,
                                          help="Micro-batches per optimizer step (gradient sync on the last only), "
                                               "e.g. 1,4 [default: 1].")
    steps: int = option("--steps", type=int, default=10, show_default=True,
                        help="Measured optimizer steps: 2 or more (2 with --profile-steps 1 for a quick look); a 95 % "
                             "CI of the median step time, and a ranking beyond the point figures, need 6 or more.")
    warmup_steps: int = option("--warmup-steps", type=int, default=2, show_default=True,
                               help="Untimed steps first (DDP rebuilds its buckets at step 2).")
    profile_steps: int = option("--profile-steps", type=int, lowest=0, default=3, show_default=True,
                                help="Steps recorded with torch.profiler for comm/exposed/overlap (0 = none).")
    precisions: tuple[Precision, ...] = option(
        "--mixed-precision", many=True, choices=PRECISIONS,
        help="fp32, tf32 and/or bf16. bf16: DDP and ZeRO-1 run forward and loss under torch.autocast(bfloat16), FSDP "
             "casts parameters itself (bf16 compute and all-gathers, fp32 gradient reduction); tf32: fp32 with "
             "TensorFloat-32 matmuls (CUDA only) [default: bf16 on GPU, fp32 on CPU].")
    seed: int = option("--seed", type=int, lowest=0, default=0, show_default=True, help="Weights and data seed.")
    lr: float = option("--lr", type=float, above_zero=True, default=1e-4, show_default=True,
                       help="AdamW learning rate.")
    isolation: IsolationChoice = option("--isolation", choices=ISOLATION_CHOICES, default=AUTO, show_default=True,
                            help="reset: one launch, memory released and peak counters reset between "
                                 "configurations; process: one launch per configuration; auto: process on CPU when "
                                 "commbench launches the ranks (a process's RSS does not reset exactly), else reset "
                                 "(a GPU allocator's peak does).")
    memory_budget: str | None = option("--memory-budget",
                                       help="Peak memory per rank that counts as fitting, e.g. 80GB or 80GiB "
                                            "[default: GPU memory, or RAM / ranks].")
    timeout: float = option("--timeout", type=float, above_zero=True, unit="seconds", default=300.0, show_default=True,
                            help="Seconds without a finished configuration before the sweep is ended as failed; "
                                 f"where a configuration compiles (--compile true), {COMPILATIONS_PER_CONFIG} x "
                                 f"{COMPILE_ALLOWANCE_S:g} s more: it compiles the model and its compute baseline "
                                 "before its first row.")


def _say_long_run(spec: TrainSpec) -> None:
    """Before a CPU run that will compute for a minute or more, one line with the estimate and how to make it quick
    (training/time_estimate.py); said as a warning, so it comes before the run, on stderr, and in --json."""
    from commbench.training.time_estimate import cpu_run_text

    text = cpu_run_text(spec)
    if text:
        warnings.warn(text, CommbenchWarning, stacklevel=3)


def _model_shape(options: TrainingOptions, defaults: _Defaults) -> ModelShape:
    """The model the options ask for: by --hidden, else by --params (the hidden size chosen to match)."""
    from commbench.training.synthetic import ModelShape, shape_for_params
    from commbench.units import parse_count

    seq_len = options.seq_len or defaults["seq_len"]
    layers = options.layers or defaults["layers"]
    vocab = options.vocab or defaults["vocab"]
    if options.hidden:
        return ModelShape(kind=options.model_kind, layers=layers, hidden=options.hidden, heads=options.heads,
                          seq_len=seq_len, vocab=vocab)
    params = parse_count(options.params or defaults["params"], option="--params")
    return shape_for_params(params, kind=options.model_kind, layers=layers, heads=options.heads, seq_len=seq_len,
                            vocab=vocab)


def _isolation(asked: IsolationChoice, *, device: str, in_job: bool) -> Isolation:
    """--isolation resolved: auto is a launch per configuration on CPU when commbench launches the ranks (a process's
    RSS does not reset exactly), else reset (a GPU allocator's peak does)."""
    if asked == "process" and in_job:
        raise CommbenchError("--isolation process needs commbench to launch the ranks; inside torchrun/srun use "
                             "--isolation reset")
    if asked == AUTO:
        return "process" if device == CPU and not in_job else "reset"
    return asked


SELFTEST_TRAINING: Mapping[str, object] = {
    "model_kind": "transformer", "params": "1M", "layers": 2, "seq_len": 16, "micro_batch": 1, "steps": 6,
    "warmup_steps": 2, "profile_steps": 1, "isolation": "reset"}
"""`commbench selftest`'s training runs: a tiny model, few steps, one launch per sweep, so the training path runs end
to end in seconds; each kind adds one or two configurations of its own."""


TrainingOptionsT = TypeVar("TrainingOptionsT", bound=TrainingOptions)
"""A training kind's options dataclass."""


class TrainingKind(BenchKind["TrainSpec", "ConfigPoint", TrainingOptionsT, "LaunchMemory"]):
    """A training-step sweep; a subclass names its options and turns them into configurations (configs())."""

    point_noun = "configuration"
    rank_imports = ("torch._dynamo",)  # DistributedDataParallel's and FSDP's constructors import it
    result_columns = RESULT_COLUMNS
    required_columns = REQUIRED_COLUMNS
    sample_columns = SAMPLE_COLUMNS
    sample_keys = KEY_COLUMNS
    identity = (common.BENCH, col.CONFIG)
    comparability = (common.SCHEMA_VERSION, common.BACKEND, common.DEVICE, common.WORLD_SIZE, col.PARAMS,
                     col.MICRO_BATCH, col.SEQ_LEN)
    metrics = (Metric("step_time", col.STEP_TIME_MS_P50, False, col.STEP_TIME_MS, 3.0),
               Metric("peak_mem", col.PEAK_MEM_BYTES, False, None, 2.0))
    wrong_message = ("{n} configuration(s) failed the check on some rank (replicas disagree or a loss is not finite; "
                     "#wrong counts the ranks); results are not valid")

    def selftest_verdict(self, rows: pd.DataFrame) -> tuple[bool, str]:
        times = rows[col.STEP_TIME_MS_P50]
        if not (times > 0).all():
            return False, "a step time of 0 or empty"
        configs = ", ".join(str(config) for config in rows[col.CONFIG])
        span = f"{times.min():.1f}" if len(times) == 1 else f"{times.min():.1f}–{times.max():.1f}"
        return True, (f"{len(rows)} configuration(s) ({configs}), {int(rows[col.STEPS].iloc[0])} steps, "
                      f"step {span} ms p50, 0 wrong")

    def n_wrong(self, results: pd.DataFrame | None) -> int:
        """Configurations that failed: a row's n_wrong counts its failed ranks, and a sum over rows would count
        ranks of different configurations together (12 "ranks" of a 2-rank run)."""
        if results is None or results.empty:
            return 0
        return int((results[common.N_WRONG].fillna(0) > 0).sum())

    def configs(self, options: TrainingOptionsT, accum_steps: tuple[int, ...], world: int,
                precisions: tuple[Precision, ...]) -> tuple[TrainConfig, ...]:
        """The configurations (TrainConfig) the options ask for, refusing any that cannot run; precisions are
        --mixed-precision's values, or the device's default."""
        raise NotImplementedError

    def configs_for_model(self, options: TrainingOptionsT, accum_steps: tuple[int, ...], world: int,
                          precisions: tuple[Precision, ...], shape: ModelShape
                          ) -> tuple[tuple[TrainConfig, ...], tuple[str, ...]]:
        """The configurations for this model, and a note for each that the model made the same as another (merged);
        by default configs(), which the model does not change."""
        return self.configs(options, accum_steps, world, precisions), ()

    def resolve(self, options: TrainingOptionsT, machine: Machine
                ) -> Bench[TrainSpec, ConfigPoint, TrainingOptionsT, LaunchMemory]:
        from commbench.training.spec import TrainSpec, default_precision, few_steps_note, timeout_for, validate
        from commbench.units import parse_memory

        target = resolve_target(machine, backend=options.backend, device=options.device, nproc=options.nproc,
                                oversubscribe=options.oversubscribe, bind_cores=options.bind_cores)
        defaults = DEFAULTS[target.device]
        shape = _model_shape(options, defaults)
        budget = parse_memory(options.memory_budget, option="--memory-budget") if options.memory_budget else None
        isolation = _isolation(options.isolation, device=target.device, in_job=machine.in_job)
        precisions = options.precisions or (default_precision(target.device),)
        configs, notes = self.configs_for_model(options, options.accum_steps or (1,), target.nproc, precisions, shape)
        spec = TrainSpec(bench=self.name, configs=configs,
                         shape=shape, micro_batch=options.micro_batch or defaults["micro_batch"], steps=options.steps,
                         warmup_steps=options.warmup_steps, profile_steps=options.profile_steps, seed=options.seed,
                         lr=options.lr, backend=target.backend, device=target.device, nproc=target.nproc,
                         isolation=isolation, memory_budget_bytes=budget,
                         timeout_s=timeout_for(options.timeout, configs))
        validate(spec)
        few = few_steps_note(spec.steps)
        if spec.device == CPU and (not machine.in_job or machine.rank == 0):
            _say_long_run(spec)
        return Bench(self, spec, spec.points, notes=(*notes, *([few] if few else [])),
                     process_per_point=spec.isolation == "process", cores=target.cores)

    def spec_from_json(self, text: str) -> TrainSpec:
        from commbench.training.spec import TrainSpec

        return TrainSpec.from_json(text)

    def points(self, spec: TrainSpec, world: int) -> list[ConfigPoint]:
        return spec.points

    def run_meta(self, spec: TrainSpec) -> dict[str, object]:
        from commbench.training.batches import POOL_SIZE

        return {"isolation": spec.isolation, "batch_pool_micro_batches": POOL_SIZE,
                "mixed_precision": sorted({config.mixed_precision or "fp32" for config in spec.configs})}

    def prepare(self, spec: TrainSpec, ctx: RankContext) -> LaunchMemory:
        from commbench.training.measure import prepare

        return prepare(spec, ctx)

    def measure(self, spec: TrainSpec, point: ConfigPoint, run: RankRun[LaunchMemory]) -> Measured:
        from commbench.training.measure import measure_config

        return measure_config(spec, point, run)

    def table(self, results: pd.DataFrame, verbose: bool = False) -> str:
        """A row per configuration with one exposed-communication figure; --verbose adds the trace's and no_sync's."""
        from commbench.training.table import format_training_table

        return format_training_table(results, verbose=verbose)

    def key_numbers(self, results: pd.DataFrame) -> pd.DataFrame:
        from commbench.training.table import key_numbers

        return key_numbers(results)

    def row_label(self, row: pd.Series) -> str:
        return f"{row[common.BENCH]}: {row[col.CONFIG]}"

    def samples_of(self, samples: pd.DataFrame, row: pd.Series) -> pd.Series:
        """The timed steps with gradient sync (not the paired no_sync steps) of this configuration."""
        return (samples[col.CONFIG_INDEX] == row[col.CONFIG_INDEX]) & (samples[col.PHASE] == "sync")
