"""What each backend supports, and how `auto` resolves to a backend, a device and a rank count."""

from dataclasses import dataclass

import torch
import torch.distributed as dist

from commbench.errors import CommbenchError

DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "int32": torch.int32,
}
REDUCE_OPS = {
    "sum": dist.ReduceOp.SUM,
    "max": dist.ReduceOp.MAX,
    "min": dist.ReduceOp.MIN,
    "avg": dist.ReduceOp.AVG,
}
# gloo runs only these collectives on CUDA tensors (PyTorch's backend table; ../notes/gpu-single-h200.md).
_GLOO_CUDA_COLLECTIVES = {"all_reduce", "broadcast"}


def unsupported_reason(*, backend: str, device: str, collective: str, dtype: str, op: str) -> str | None:
    """Why this backend cannot run this combination, or None when it can."""
    if backend == "gloo" and device == "cuda" and collective not in _GLOO_CUDA_COLLECTIVES:
        return (f"gloo cannot run {collective} on CUDA tensors (only {', '.join(sorted(_GLOO_CUDA_COLLECTIVES))}); "
                "use --backend nccl or --device cpu")
    if backend == "gloo" and op == "avg" and not DTYPES[dtype].is_floating_point:
        return f"gloo cannot average {dtype} (it refuses AVG on integers); use --op sum or a floating dtype"
    return None


@dataclass(frozen=True, kw_only=True)
class Target:
    """Where a sweep runs: the resolved backend, device type and number of ranks."""

    backend: str
    device: str
    nproc: int


def visible_gpu_count() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def resolve_target(*, backend: str, device: str, nproc: int | None, world_size_in_job: int | None) -> Target:
    """Turn `auto` choices into concrete ones and refuse impossible combinations before anything launches.

    world_size_in_job is WORLD_SIZE when commbench already runs inside torchrun or srun; the rank count is then fixed.
    """
    gpus = visible_gpu_count()
    if device == "auto":
        device = "cuda" if gpus else "cpu"
    if device == "cuda" and not gpus:
        raise CommbenchError("--device cuda asked for, but no CUDA GPU is visible; use --device cpu (gloo)")
    if backend == "auto":
        backend = "nccl" if device == "cuda" else "gloo"
    if backend == "nccl":
        if device != "cuda":
            raise CommbenchError("NCCL runs on CUDA tensors only; use --backend gloo with --device cpu")
        if not dist.is_nccl_available():
            raise CommbenchError("this torch build has no NCCL; use --backend gloo")
    if not dist.is_available() or (backend == "gloo" and not dist.is_gloo_available()):
        raise CommbenchError(f"this torch build has no {backend} backend; run `commbench env` to see what it has")

    if world_size_in_job is not None:
        if nproc is not None and nproc != world_size_in_job:
            raise CommbenchError(f"--nproc {nproc} conflicts with WORLD_SIZE={world_size_in_job} of the job commbench "
                                 "runs in; drop --nproc inside torchrun/srun")
        nproc = world_size_in_job
    elif nproc is None:
        nproc = gpus if device == "cuda" else 2
    if nproc < 1:
        raise CommbenchError(f"--nproc {nproc} is not a rank count; use 1 or more")
    if backend == "nccl" and world_size_in_job is None and nproc > gpus:
        raise CommbenchError(f"--nproc {nproc} exceeds the {gpus} visible GPU(s): NCCL needs one GPU per rank; "
                             f"use --nproc {gpus} or fewer, or --backend gloo")
    return Target(backend=backend, device=device, nproc=nproc)
