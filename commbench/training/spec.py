"""What a training sweep runs: the model, the step settings, and the resolved list of configurations (one row each)."""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal, TypeVar, get_args

from commbench.bench_kind import Spec
from commbench.errors import CommbenchError
from commbench.measure.stats import MIN_SAMPLES_FOR_CI
from commbench.models.strategies import FSDP_IMPLS as FSDP_IMPLS  # re-exported with FsdpImpl: precision.py reads it
from commbench.models.strategies import IMPLS, Impl, StrategyKey
from commbench.models.strategies import FsdpImpl as FsdpImpl
from commbench.names import CUDA, DDP_DEFAULT_FIRST_MB, GLOO, GLOO_CUDA_COLLECTIVES
from commbench.training.accum_sync import AccumSync
from commbench.training.checkpointing import ActivationCheckpointing
from commbench.training.ddp_hooks import CommHook

Isolation = Literal["reset", "process"]
"""--isolation: one launch with memory reset between configurations, or a launch per configuration."""
ISOLATIONS: tuple[Isolation, ...] = get_args(Isolation)
ModelKind = Literal["transformer", "mlp"]
MODEL_KINDS: tuple[ModelKind, ...] = get_args(ModelKind)
Precision = Literal["fp32", "tf32", "bf16"]
"""--mixed-precision: fp32 throughout; tf32 (fp32 tensors, TensorFloat-32 matrix multiplications: CUDA only); bf16
(how models are trained on GPUs: bfloat16 compute, fp32 parameters, optimizer state and gradient reduction). How each
implementation applies bf16 is commbench/training/precision.py."""
PRECISIONS: tuple[Precision, ...] = get_args(Precision)
ReduceDtype = Literal["fp32", "bf16"]
"""--reduce-dtype (FSDP): what gradients are reduce-scattered (and HSDP all-reduced) in."""
REDUCE_DTYPES: tuple[ReduceDtype, ...] = get_args(ReduceDtype)
Fsdp2Backward = Literal["default", "1", "2"]
"""FSDP2's --backward-prefetch: its own (one unit ahead), or 1 or 2 blocks ahead."""
Fsdp1Backward = Literal["pre", "post", "none"]
"""FSDP1's --backward-prefetch: BACKWARD_PRE, BACKWARD_POST or none."""
BackwardPrefetch = Literal[Fsdp2Backward, Fsdp1Backward]
FSDP2_BACKWARD: tuple[Fsdp2Backward, ...] = get_args(Fsdp2Backward)
FSDP1_BACKWARD: tuple[Fsdp1Backward, ...] = get_args(Fsdp1Backward)
Wrap = Literal["block", "model"]
"""--wrap: one FSDP unit per block, or one for the whole model."""
WRAPS: tuple[Wrap, ...] = get_args(Wrap)
_FSDP_COLLECTIVES = ("all_gather", "reduce_scatter", "all_reduce")
"""all_gather_into_tensor and reduce_scatter_tensor in a shard group; all_reduce across HSDP's replicas."""
IMPL_COLLECTIVES: dict[Impl, tuple[str, ...]] = {
    "ddp": ("all_reduce", "broadcast"), "zero1": ("all_reduce", "broadcast"), "zero2": ("reduce_scatter", "all_gather"),
    "fsdp2": _FSDP_COLLECTIVES, "fsdp1": _FSDP_COLLECTIVES}
"""The collectives each implementation runs on the model's tensors, which the backend must run on the device (ZeRO-1's
ZeroRedundancyOptimizer broadcasts each rank's updated parameters over DDP's all-reduced gradients; the partitioned
ZeRO-2 reduce-scatters gradient buckets and all-gathers the updated parameters)."""
assert tuple(IMPL_COLLECTIVES) == IMPLS, "one entry per implementation, in Impl's order"


@dataclass(frozen=True, kw_only=True)
class ModelShape:
    kind: ModelKind = "transformer"
    """transformer (attention + MLP blocks) or mlp (MLP blocks only)."""
    layers: int = 4
    hidden: int = 256
    heads: int = 4
    """Attention heads (transformer); hidden must divide by it."""
    seq_len: int = 128
    """Tokens per sample: tokens/s = samples/s × seq_len."""
    ffn_mult: int = 4
    vocab: int = 4096
    """Transformer: tokens of the embedding and of the LM head's logits (mlp models have neither)."""


def _setting(short: str | None = None, default: Any = None) -> Any:
    """A configuration setting; short: its name in labels (default: the field name). Returns a dataclass field, which
    stands as the field's default and so is typed as the field (Any), as dataclasses.field itself is."""
    return field(default=default, metadata={"short": short})


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """One configuration: a strategy, how it is implemented, and its settings (None = not applicable). Every setting
    is also a results column of the same name and part of the configuration's label."""

    strategy: StrategyKey
    """ddp, zero1, zero2, zero3 or hsdp."""
    impl: Impl
    """ddp (DistributedDataParallel), zero1 (ZeroRedundancyOptimizer over DDP), zero2 (the ZeRO paper's ZeRO-2 under
    master weights, training/zero2.py), fsdp2 (fully_shard) or fsdp1."""
    accum_steps: int = _setting("accum", default=1)
    bucket_cap_mb: float | None = _setting("bucket_mb")
    first_bucket_mb: float | None = _setting("first_bucket_mb")
    """DDP: the first bucket's cap in MiB (torch's bucket_cap_mb_list [first, cap]); None = as large as the cap. DDP's
    own default is bucket_mb=25 first_bucket_mb=1, built by passing no bucket argument (training/ddp_buckets.py)."""
    gradient_as_bucket_view: bool | None = _setting("bucket_view")
    static_graph: bool | None = _setting()
    comm_hook: CommHook | None = _setting()
    reshard_after_forward: bool | int | None = _setting("reshard")
    """FSDP2: True, False or a smaller mesh size to reshard to; FSDP1: True = FULL_SHARD, False = SHARD_GRAD_OP."""
    forward_prefetch: int | None = _setting("fwd_prefetch")
    """FSDP2: blocks gathered ahead in forward; FSDP1: 0 or 1 (its forward_prefetch flag)."""
    backward_prefetch: BackwardPrefetch | None = _setting("bwd_prefetch")
    """FSDP2: default, 1 or 2 blocks ahead; FSDP1: pre, post or none."""
    limit_all_gathers: bool | None = _setting("limit_ag")
    wrap: Wrap | None = _setting()
    """block (one FSDP unit per block) or model (one unit for the whole model)."""
    mixed_precision: Precision | None = _setting("precision")
    """fp32, tf32 or bf16 (PRECISIONS), for every implementation; None reads as fp32."""
    master_weights: bool | None = _setting("master")
    """DDP, ZeRO-1 and ZeRO-2 under bf16: bf16 parameters and gradients, fp32 master copy and Adam moments in the
    optimizer (the ZeRO paper's mixed-precision Adam, training/master_weights.py; ZeRO-2 then runs as the paper's,
    impl zero2); None or False: fp32 parameters."""
    shard_group: int | None = _setting()
    """HSDP: ranks per shard group (the mesh is replicas × shard_group)."""
    compile: bool | None = _setting()
    """DDP: the DDP module run under torch.compile (TorchDynamo's DDPOptimizer splits the graph at bucket edges)."""
    overlap_with_ddp: bool | None = _setting("overlap_ddp")
    """ZeRO-1: ZeroRedundancyOptimizer(overlap_with_ddp=True), each partition's step run from DDP's comm hook as its
    bucket is reduced."""
    reduce_dtype: ReduceDtype | None = _setting("reduce")
    """FSDP: the dtype gradients are reduced in (fp32 or bf16); None reads as fp32."""
    cpu_offload: bool | None = _setting("offload")
    """FSDP: sharded parameters, gradients and optimizer state kept in host memory (CPUOffloadPolicy / CPUOffload)."""
    activation_checkpointing: ActivationCheckpointing | None = _setting("ac")
    """FSDP: none, or full (every block's activations recomputed in backward, torchtitan's "full")."""
    blocks_per_unit: int | None = _setting("unit_blocks")
    """FSDP2: consecutive blocks per fully_shard unit (one all-gather and one reduce-scatter for each group)."""
    accum_sync: AccumSync | None = _setting()
    """FSDP under gradient accumulation: which micro-batches reduce gradients (training/step.py names the values)."""

    def settings(self) -> dict[str, object]:
        """The settings that apply to this configuration, in field order."""
        return {name: getattr(self, name) for name in SETTINGS if getattr(self, name) is not None}

    def label(self) -> str:
        return config_label(self.strategy, self.impl, self.settings())


SETTINGS = {f.name: f.metadata["short"] or f.name for f in fields(TrainConfig) if "short" in f.metadata}
"""Every setting of a configuration (field name → its name in labels), in field order."""
SETTING_COLUMNS = tuple(name for name in SETTINGS if name != "accum_steps")
"""The settings as results columns of the same names (accum_steps stands with the batch columns)."""


BUCKET_DEFAULT = "default"
"""--bucket-cap-mb's name for DDP's own buckets: no bucket argument passed (a 1 MiB first bucket, then 25 MiB)."""


def parse_bucket_cap(value: str | float) -> float | str:
    """A --bucket-cap-mb value: default, or a cap in MiB above 0."""
    if str(value).strip().lower() == BUCKET_DEFAULT:
        return BUCKET_DEFAULT
    try:
        size = float(value)
    except ValueError:
        raise CommbenchError(f"--bucket-cap-mb {value!r} is not a number of MiB or default; e.g. --bucket-cap-mb "
                             "default,5,25") from None
    if not size > 0 or size == float("inf"):
        raise CommbenchError(f"--bucket-cap-mb {value} must be above 0 MiB (or default)")
    return size


Choice = TypeVar("Choice", bound=str)


def refuse_unknown(option: str, values: Iterable[object], allowed: tuple[Choice, ...]) -> tuple[Choice, ...]:
    """One line naming the first value of an axis that is not among `allowed`, and the choices; else the values, as
    the allowed choices they are (typed as `allowed`'s Literal)."""
    known: list[Choice] = []
    for value in values:
        if value not in allowed:
            raise CommbenchError(f"unknown {option} {value!r}; choose from {', '.join(allowed)}")
        known.append(allowed[allowed.index(value)])
    return tuple(known)


def default_precision(device: str) -> Precision:
    """What a sweep runs when --mixed-precision is not given: bf16 on GPUs, as models are trained there (fp32 without
    TF32 leaves the tensor cores idle and makes communication a far smaller share of the step than in training);
    fp32 on CPU, where bf16 is fast only with AVX-512 BF16 or AMX and the correctness references are fp32."""
    return "bf16" if device == CUDA else "fp32"


def config_label(strategy: str, impl: str, settings: Mapping[str, object]) -> str:
    """A configuration's name: strategy (and implementation when it differs) and name=value per given setting, e.g.
    "hsdp/fsdp2 accum=1 reshard=true wrap=block shard_group=2"."""
    parts = [strategy if strategy == impl else f"{strategy}/{impl}"]
    parts += [f"{SETTINGS[name]}={setting_text(value)}" for name, value in settings.items()]
    return " ".join(parts)


def setting_text(value: object) -> str:
    """A setting as labels write it, whether it comes from a TrainConfig or back from results.csv."""
    if type(value).__name__ in ("bool", "bool_") or str(value) in ("True", "False"):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


@dataclass(frozen=True, kw_only=True)
class TrainSpec(Spec):
    """A training sweep, fully resolved: the same on every rank."""

    bench: str
    configs: tuple[TrainConfig, ...]
    shape: ModelShape
    micro_batch: int
    steps: int
    """Measured optimizer steps per configuration (and again under no_sync for DDP-based ones)."""
    warmup_steps: int
    profile_steps: int
    """Optimizer steps recorded with torch.profiler (0 = no trace-based communication figures)."""
    seed: int
    lr: float
    isolation: Isolation = "reset"
    """reset: one launch, memory freed and peak counters reset between configurations; process: one launch each."""
    memory_budget_bytes: float | None = None
    """Peak memory a configuration may use to count as fitting; None = the device's (GPU memory, or RAM / ranks)."""
    timeout_s: float = 300.0
    """Seconds without a finished configuration before the launch counts as hung: --timeout, plus
    COMPILATIONS_PER_CONFIG x COMPILE_ALLOWANCE_S when a configuration compiles (timeout_for)."""
    gpu_sample_interval_s: float = 0.05
    """NVML sampling interval while a configuration's steps are timed (GPU runs)."""

    @property
    def records_traces(self) -> bool:
        return self.profile_steps > 0

    @classmethod
    def _fields_from_json(cls, data: dict[str, Any]) -> dict[str, Any]:
        return {**data, "configs": tuple(TrainConfig(**config) for config in data["configs"]),
                "shape": ModelShape(**data["shape"])}

    @property
    def points(self) -> list["ConfigPoint"]:
        return [ConfigPoint(index, config) for index, config in enumerate(self.configs)]


@dataclass(frozen=True)
class ConfigPoint:
    """A configuration's place in the sweep (what the progress bar shows)."""

    index: int
    config: TrainConfig

    def label(self) -> str:
        return self.config.label()


MIN_STEPS = 2
"""--steps' floor: a quick look (a smoke run) with a median of two steps; below MIN_SAMPLES_FOR_CI (6) no 95 % CI of
the median exists, so the table ranks nothing beyond the point figures and says so (few_steps_note)."""


def few_steps_note(steps: int) -> str | None:
    """The note a run with too few steps for a CI gets, printed with its table; None from MIN_SAMPLES_FOR_CI up."""
    if steps >= MIN_SAMPLES_FOR_CI:
        return None
    return (f"--steps {steps}: no 95 % CI of the median step time is possible below {MIN_SAMPLES_FOR_CI} steps, so the "
            "CI reads n/a and nothing is ranked beyond the point figures (a quick look, not a comparison)")


def validate(spec: TrainSpec) -> None:
    """Refuse anything that cannot run, naming the fix; called before any process is launched."""
    _validate_counts(spec)
    _validate_limits(spec)
    for config in spec.configs:
        _validate_config(spec, config)
    _validate_ddp(spec)
    _validate_zero(spec)
    _validate_fsdp(spec)
    _validate_backend(spec)


def _validate_counts(spec: TrainSpec) -> None:
    """Configurations, steps and the model's sizes: enough of each to run."""
    if not spec.configs:
        raise CommbenchError("the sweep has no configuration; give at least one value per axis")
    if spec.steps < MIN_STEPS:
        raise CommbenchError(f"--steps {spec.steps} is too few: a step time and a paired exposed figure need at "
                             f"least {MIN_STEPS} steps; use --steps {MIN_STEPS} for a quick look, "
                             f"{MIN_SAMPLES_FOR_CI} or more for a 95 % CI of the median step time")
    if spec.warmup_steps < 2:
        raise CommbenchError(f"--warmup-steps {spec.warmup_steps} is too few: DDP rebuilds its buckets at step 2; "
                             "use 2 or more")
    for name, value in (("--micro-batch", spec.micro_batch), ("--seq-len", spec.shape.seq_len),
                        ("--layers", spec.shape.layers), ("--hidden", spec.shape.hidden),
                        ("--vocab", spec.shape.vocab)):
        if value < 1:
            raise CommbenchError(f"{name} {value} must be 1 or more")


def _validate_limits(spec: TrainSpec) -> None:
    """The sweep's other settings: profiling, learning rate, isolation, memory budget, timeout, heads."""
    if spec.profile_steps < 0:
        raise CommbenchError(f"--profile-steps {spec.profile_steps} is negative; use 0 (no trace) or more")
    if spec.lr <= 0:
        raise CommbenchError(f"--lr {spec.lr:g} must be above 0")
    if spec.isolation not in ISOLATIONS:
        raise CommbenchError(f"unknown --isolation {spec.isolation!r}; choose from {', '.join(ISOLATIONS)}")
    if spec.memory_budget_bytes is not None and spec.memory_budget_bytes <= 0:
        raise CommbenchError("--memory-budget must be above 0 bytes, e.g. 80GB (1e9 B), 80GiB or 80G (2^30 B)")
    if spec.timeout_s <= 0:
        raise CommbenchError(f"--timeout {spec.timeout_s:g} must be above 0 seconds")
    if spec.shape.hidden % spec.shape.heads:
        raise CommbenchError(f"--hidden {spec.shape.hidden} must divide by --heads {spec.shape.heads}")


def _validate_config(spec: TrainSpec, config: TrainConfig) -> None:
    """One configuration's settings that apply to every implementation: accumulation, shard group, precision."""
    if config.accum_steps < 1:
        raise CommbenchError(f"--accum-steps {config.accum_steps} must be 1 or more micro-batches per step")
    if config.shard_group is not None and (config.shard_group < 1 or spec.nproc % config.shard_group):
        raise CommbenchError(f"--shard-group {config.shard_group} must divide the {spec.nproc} ranks "
                             "(HSDP is replicas × shard group); e.g. --shard-group 2 with --nproc 4")
    if config.mixed_precision not in (None, *PRECISIONS):
        raise CommbenchError(f"unknown --mixed-precision {config.mixed_precision!r}; choose from "
                             f"{', '.join(PRECISIONS)}")
    if config.mixed_precision == "tf32" and spec.device != CUDA:
        raise CommbenchError(f"--mixed-precision tf32 sets how NVIDIA GPUs multiply fp32 matrices; on --device "
                             f"{spec.device} use fp32 or bf16")
    if config.master_weights and (config.impl not in ("ddp", "zero1", "zero2")
                                  or config.mixed_precision != "bf16"):
        raise CommbenchError("--master-weights true keeps bf16 parameters with fp32 master copies for ddp, zero1 "
                             "and zero2 under --mixed-precision bf16 (FSDP's bf16 policy keeps fp32 shards "
                             "already); add --mixed-precision bf16 or drop --master-weights")
    if config.strategy == "hsdp" and config.shard_group in (None, spec.nproc):
        raise CommbenchError(f"hsdp needs at least two replicas: give --shard-group N with N < {spec.nproc} "
                             "dividing the rank count (with 2 ranks, use zero3 instead)")


def _validate_backend(spec: TrainSpec) -> None:
    """What gloo cannot run: FSDP's collectives on CUDA tensors, PowerSGD's out-of-order all-reduces."""
    if spec.backend == GLOO and spec.device == CUDA:
        _refuse_gloo_cuda(spec)
    if spec.backend == GLOO and any(config.comm_hook == "powersgd" for config in spec.configs):
        # PowerSGD issues its later all-reduces from the collective futures' callbacks, which gloo runs on its own
        # threads: with two or more buckets the ranks issue them in different orders and gloo aborts on a size
        # mismatch (torch 2.13, seen on a 2-rank CPU run)
        raise CommbenchError("--comm-hook powersgd needs --backend nccl: on gloo its all-reduces start from "
                             "callbacks in no fixed order across ranks, and ranks with several buckets mismatch; "
                             "use none, bf16 or fp16 on gloo")


def _refuse_gloo_cuda(spec: TrainSpec) -> None:
    """gloo runs only all_reduce and broadcast on CUDA tensors: DDP and ZeRO-1 run, FSDP (ZeRO-2/3, HSDP) and the
    partitioned ZeRO-2 cannot."""
    refused: dict[str, list[str]] = {}
    for config in spec.configs:
        missing = [name for name in IMPL_COLLECTIVES[config.impl] if name not in GLOO_CUDA_COLLECTIVES]
        if missing:
            refused.setdefault(config_label(config.strategy, config.impl, {}), missing)
    if refused:
        needs = " and ".join(next(iter(refused.values())))
        hint = ", or --strategy ddp,zero1" if spec.bench == "strategy" else ""
        raise CommbenchError(f"gloo cannot run {', '.join(refused)} on CUDA tensors: they need {needs}, and gloo "
                             f"runs only {' and '.join(GLOO_CUDA_COLLECTIVES)} on CUDA; use --backend nccl or "
                             f"--device cpu{hint}")


COMPILE_ALLOWANCE_S = 300.0
"""What one cold torch.compile of a configuration's model may take on top of its steps: TorchDynamo traces it, and
inductor builds forward and backward kernels for every piece DDP's buckets split it into (Triton on GPUs, C++ on CPU),
with nothing in a fresh pod's or node's compile cache. Tens of seconds for the default models, minutes for larger ones
or a slow compiler host; 300 s, the base --timeout itself, so a compile never takes more of the watchdog's time than
the steps are given."""
COMPILATIONS_PER_CONFIG = 2
"""A compiled DDP configuration compiles twice before its first row: the DDP model, and the compute baseline's copy
of it without DDP (training/compute_baseline.py), which is a different graph (one piece, no bucket split)."""


def timeout_for(base_s: float, configs: tuple[TrainConfig, ...]) -> float:
    """The seconds a training sweep's launch may go without a finished configuration: the base (--timeout), plus
    COMPILATIONS_PER_CONFIG compile allowances where any configuration compiles (the watchdog's timeout is one figure
    per launch, so one compiled configuration raises it for all)."""
    if any(config.compile for config in configs):
        return base_s + COMPILATIONS_PER_CONFIG * COMPILE_ALLOWANCE_S
    return base_s


COMPILE_FIRST_PIECE_MB = DDP_DEFAULT_FIRST_MB
"""TorchDynamo's DDPOptimizer's first piece of a compiled DDP model: torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
(DDP's own first bucket, 1 MiB; the tests check it is torch's), named in names.py because this module does not load
torch."""


def _validate_ddp(spec: TrainSpec) -> None:
    """DDP's own settings (compile) that this build or machine cannot run."""
    compiled = [config for config in spec.configs if config.compile]
    if not compiled:
        return
    if any(config.impl != "ddp" for config in compiled):
        raise CommbenchError("compile runs the DDP module under torch.compile: it applies to commbench ddp only")
    import os
    import shutil

    # inductor builds CPU kernels with a C++ compiler ($CXX, else g++); GPU kernels with Triton, which CUDA builds of
    # torch bring with them (and a GPU job may be checked on a login node without it, so it is not looked for here)
    compiler = os.environ.get("CXX", "g++")
    if spec.device != CUDA and shutil.which(compiler) is None:
        raise CommbenchError(f"--compile true on CPU needs a C++ compiler (inductor builds its kernels with "
                             f"{compiler}, from $CXX or g++): install g++ or use --compile false")
    for config in compiled:
        # TorchDynamo's DDPOptimizer splits the graph into a 1 MiB first piece, then pieces of DDP's cap (the largest
        # of bucket_cap_mb_list; 25 MiB when none is given), and stops with an AssertionError when that cap is below
        # its first piece (torch 2.13)
        if config.bucket_cap_mb is None:
            continue
        cap = max(config.bucket_cap_mb, config.first_bucket_mb or 0)
        if cap < COMPILE_FIRST_PIECE_MB:
            raise CommbenchError(f"--compile true needs bucket caps of {COMPILE_FIRST_PIECE_MB:g} MiB or more "
                                 f"(TorchDynamo splits compiled DDP with a {COMPILE_FIRST_PIECE_MB:g} MiB first piece "
                                 f"and fails on a {cap:g} MiB cap); give --bucket-cap-mb default or caps of 1 or more, "
                                 "or use --compile false")


def _validate_zero(spec: TrainSpec) -> None:
    """ZeRO's own settings (overlap_with_ddp, the partitioned ZeRO-2) that this build or machine cannot run."""
    for config in spec.configs:
        if config.impl == "zero2" and not (config.master_weights and config.mixed_precision == "bf16"):
            raise CommbenchError("the partitioned ZeRO-2 (impl zero2) runs the ZeRO paper's mixed precision only: "
                                 "give --mixed-precision bf16 --master-weights true, or --master-weights false for "
                                 "FSDP's zero2")
        if not config.overlap_with_ddp:
            continue
        if config.impl != "zero1":
            raise CommbenchError("--overlap-with-ddp applies to zero1 only (ZeroRedundancyOptimizer over DDP); add "
                                 "--strategy zero1 or drop --overlap-with-ddp")
        if spec.backend == GLOO:
            # torch 2.13's hook_with_zero_step raises RuntimeError on gloo ("may meet hangs", pytorch issue 62300)
            raise CommbenchError("--overlap-with-ddp true needs --backend nccl: torch refuses "
                                 "ZeroRedundancyOptimizer's overlap with DDP on gloo, where it may hang; use "
                                 "--overlap-with-ddp false on gloo")
        if config.master_weights:
            raise CommbenchError("--overlap-with-ddp true steps torch's functional AdamW inside DDP's comm hook, and "
                                 "--master-weights true's optimizer has no functional form; drop one of the two")
        if spec.warmup_steps < 3:
            raise CommbenchError(f"--overlap-with-ddp true needs --warmup-steps 3 or more (got {spec.warmup_steps}): "
                                 "ZeroRedundancyOptimizer learns DDP's buckets after their rebuild at step 2 and takes "
                                 "its first step, with its setup, in step 3, which must not be timed")


def _validate_fsdp(spec: TrainSpec) -> None:
    """FSDP's own settings (reduce dtype, CPU offload, activation checkpointing, blocks per unit, accumulation sync)
    that this build or machine cannot run."""
    if spec.device != CUDA and any(config.cpu_offload for config in spec.configs):
        # FSDP2's CPUOffloadPolicy asks for an accelerator even when the ranks compute on the CPU (torch 2.13)
        raise CommbenchError("--cpu-offload true moves FSDP's shards from GPU memory into host memory; on --device "
                             f"{spec.device} they are in host memory already: drop it, or run on GPUs")
