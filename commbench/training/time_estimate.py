"""How long a training sweep on CPU will compute, said before it starts: `--params 1B` on a laptop otherwise sits at
configuration 1 for an hour with nothing saying so.

The estimate is a lower bound from two counts and one measurement: the model FLOPs of a forward and backward pass
(training/flops.py, per micro-batch on one rank), the passes each configuration runs (measure.py's order), and the rate
this host's matrix multiplications reach just now, timed on the model's own hidden size as the ranks run them (one
thread each, as many at once as there are cores; host_rate). Every rank computes its own passes. Launches,
communication, the profiler and everything outside the matmuls come on top: the run takes longer, never less (within
the rate's noise).
"""

import math
import time
from dataclasses import dataclass

from commbench.training.spec import TrainConfig, TrainSpec

SHOWN_FROM_S = 60.0
"""Estimates below a minute are not said: there the launches and the profiler, which the bound leaves out, are most of
the time, and the run is short anyway."""
_MAX_ROWS, _MAX_HIDDEN = 512, 1024
"""The timed matmul's largest shape: tokens × hidden by hidden × hidden, about 1 GFLOP, a few tens of ms on a laptop
core; larger models multiply larger matrices, which run at least as fast per FLOP."""
_REPEATS = 3


def passes_per_config(spec: TrainSpec, config: TrainConfig) -> int:
    """Forward and backward passes of the whole model each rank runs for a configuration: warm-up, timed, profiled,
    the real steps paired with the compute-only baseline and the baseline's own warm-up and steps, and for DDP one
    untimed and 2 × steps paired no_sync steps; each step as many passes as its accumulation micro-batches."""
    real = spec.warmup_steps + spec.steps + spec.profile_steps + spec.steps
    baseline = spec.warmup_steps + spec.steps
    no_sync = 1 + 2 * spec.steps if config.impl == "ddp" else 0
    return (real + baseline + no_sync) * config.accum_steps


def matmul_flops_per_s(hidden: int, tokens: int, threads: int) -> float:
    """The fp32 FLOP/s of this host's matrix multiplication on `threads` threads, for a tokens × hidden by
    hidden × hidden product (capped at _MAX_ROWS × _MAX_HIDDEN): the fastest of a few repeats, after one untimed."""
    import torch

    rows, inner = max(1, min(tokens, _MAX_ROWS)), max(1, min(hidden, _MAX_HIDDEN))
    left, right = torch.randn(rows, inner), torch.randn(inner, inner)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        torch.mm(left, right)
        best = math.inf
        for _ in range(_REPEATS):
            start = time.perf_counter()
            torch.mm(left, right)
            best = min(best, time.perf_counter() - start)
    finally:
        torch.set_num_threads(before)
    return 2 * rows * inner * inner / max(best, 1e-9)


def host_rate(spec: TrainSpec) -> float:
    """What the run's ranks compute together per second: torchrun gives each of several ranks one thread
    (OMP_NUM_THREADS=1), so that is a one-thread rate times the ranks the cores hold at once; a single rank uses
    every thread torch has."""
    import os

    import torch

    tokens = spec.micro_batch * spec.shape.seq_len
    if spec.nproc == 1:
        return matmul_flops_per_s(spec.shape.hidden, tokens, torch.get_num_threads())
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return matmul_flops_per_s(spec.shape.hidden, tokens, 1) * min(spec.nproc, cores)


@dataclass(frozen=True)
class Estimate:
    seconds: float
    passes: int
    """Forward and backward passes per rank, over all configurations."""
    flops_per_pass: float
    """Model FLOPs of one pass (one micro-batch) on one rank."""
    ranks: int
    rate: float
    """The measured matmul FLOP/s of all ranks together (host_rate)."""
    configs: int


def estimate(spec: TrainSpec, rate: float) -> Estimate:
    """The run's compute at `rate` FLOP/s for all its ranks together."""
    from commbench.training.flops import synthetic_flops_per_token

    per_pass = synthetic_flops_per_token(spec.shape) * spec.micro_batch * spec.shape.seq_len
    passes = sum(passes_per_config(spec, config) for config in spec.configs)
    return Estimate(passes * per_pass * spec.nproc / rate, passes, per_pass, spec.nproc, rate, len(spec.configs))


def duration_text(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def estimate_text(found: Estimate) -> str | None:
    """The line said before a long CPU run starts; None when it is short (SHOWN_FROM_S)."""
    if found.seconds < SHOWN_FROM_S:
        return None
    return (f"this run computes for at least ~{duration_text(found.seconds)} on this CPU: {found.passes} forward and "
            f"backward passes on each of {found.ranks} rank(s) over {found.configs} configuration(s) (warm-up, timed, "
            f"profiled and paired steps), {found.flops_per_pass / 1e9:.3g} GFLOP each, at the "
            f"{found.rate / 1e9:.3g} GFLOP/s the ranks' matmuls reach here (measured just now); launches and "
            "communication come on top. For a quick look: --steps 2 --profile-steps 1, or a smaller --params")


def cpu_run_text(spec: TrainSpec) -> str | None:
    """estimate_text for this spec with this host's rate measured now, on the model's own hidden size."""
    return estimate_text(estimate(spec, host_rate(spec)))
