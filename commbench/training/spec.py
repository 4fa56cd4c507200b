"""What a training sweep runs: the model, the step settings, and the resolved list of configurations (one row each)."""

import json
from dataclasses import asdict, dataclass, fields

from commbench.errors import CommbenchError
from commbench.stats import MIN_SAMPLES_FOR_CI
from commbench.training.synthetic import ModelShape

BENCHES = ("ddp", "fsdp", "strategy")
ISOLATIONS = ("reset", "process")


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """One configuration: a strategy, how it is implemented, and its settings (None = not applicable)."""

    strategy: str
    """ddp, zero1, zero2, zero3 or hsdp."""
    impl: str
    """ddp (DistributedDataParallel), zero1 (ZeroRedundancyOptimizer over DDP), fsdp2 (fully_shard) or fsdp1."""
    accum_steps: int = 1
    bucket_cap_mb: float | None = None
    gradient_as_bucket_view: bool | None = None
    static_graph: bool | None = None
    comm_hook: str | None = None
    reshard_after_forward: bool | int | None = None
    """FSDP2: True, False or a smaller mesh size to reshard to; FSDP1: True = FULL_SHARD, False = SHARD_GRAD_OP."""
    forward_prefetch: int | None = None
    """FSDP2: blocks gathered ahead in forward; FSDP1: 0 or 1 (its forward_prefetch flag)."""
    backward_prefetch: str | None = None
    """FSDP2: default, 1 or 2 blocks ahead; FSDP1: pre, post or none."""
    limit_all_gathers: bool | None = None
    wrap: str | None = None
    """block (one FSDP unit per block) or model (one unit for the whole model)."""
    mixed_precision: str | None = None
    """fp32, or bf16 (bf16 compute and all-gathers, fp32 gradient reduction)."""
    shard_group: int | None = None
    """HSDP: ranks per shard group (the mesh is replicas × shard_group)."""

    def settings(self) -> dict:
        """The settings that apply to this configuration, in field order."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    def label(self) -> str:
        parts = [self.strategy if self.strategy == self.impl else f"{self.strategy}/{self.impl}"]
        for name, value in self.settings().items():
            if name not in ("strategy", "impl"):
                parts.append(f"{_SHORT.get(name, name)}={_text(value)}")
        return " ".join(parts)


_SHORT = {"accum_steps": "accum", "bucket_cap_mb": "bucket_mb", "gradient_as_bucket_view": "bucket_view",
          "reshard_after_forward": "reshard", "forward_prefetch": "fwd_prefetch", "backward_prefetch": "bwd_prefetch",
          "limit_all_gathers": "limit_ag", "mixed_precision": "precision"}


def _text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True, kw_only=True)
class TrainSpec:
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
    backend: str
    device: str
    nproc: int
    isolation: str = "reset"
    """reset: one launch, memory freed and peak counters reset between configurations; process: one launch each."""
    memory_budget_bytes: float | None = None
    """Peak memory a configuration may use to count as fitting; None = the device's (GPU memory, or RAM / ranks)."""
    timeout_s: float = 300.0

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> "TrainSpec":
        data = json.loads(text)
        data["configs"] = tuple(TrainConfig(**config) for config in data["configs"])
        data["shape"] = ModelShape(**data["shape"])
        return cls(**data)

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


def validate(spec: TrainSpec) -> None:
    """Refuse anything that cannot run, naming the fix; called before any process is launched."""
    if not spec.configs:
        raise CommbenchError("the sweep has no configuration; give at least one value per axis")
    if spec.steps < MIN_SAMPLES_FOR_CI:
        raise CommbenchError(f"--steps {spec.steps} is too few: a 95 % CI of the median step time needs at least "
                             f"{MIN_SAMPLES_FOR_CI}; use --steps {MIN_SAMPLES_FOR_CI} or more")
    if spec.warmup_steps < 2:
        raise CommbenchError(f"--warmup-steps {spec.warmup_steps} is too few: DDP rebuilds its buckets at step 2; "
                             "use 2 or more")
    for name, value in (("--micro-batch", spec.micro_batch), ("--seq-len", spec.shape.seq_len),
                        ("--layers", spec.shape.layers), ("--hidden", spec.shape.hidden)):
        if value < 1:
            raise CommbenchError(f"{name} {value} must be 1 or more")
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
    for config in spec.configs:
        if config.accum_steps < 1:
            raise CommbenchError(f"--accum-steps {config.accum_steps} must be 1 or more micro-batches per step")
        if config.shard_group is not None and (config.shard_group < 1 or spec.nproc % config.shard_group):
            raise CommbenchError(f"--shard-group {config.shard_group} must divide the {spec.nproc} ranks "
                                 "(HSDP is replicas × shard group); e.g. --shard-group 2 with --nproc 4")
        if config.strategy == "hsdp" and config.shard_group in (None, spec.nproc):
            raise CommbenchError(f"hsdp needs at least two replicas: give --shard-group N with N < {spec.nproc} "
                                 "dividing the rank count (with 2 ranks, use zero3 instead)")
