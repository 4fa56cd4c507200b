"""What each backend supports, and how `auto` resolves to a backend, a device and a rank count."""

import contextlib
import os
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
# gloo runs only these collectives on CUDA tensors (PyTorch's backend table in the torch.distributed documentation).
_GLOO_CUDA_COLLECTIVES = {"all_reduce", "broadcast"}
_NCCL_AVG_AND_BF16 = (2, 10)  # ncclAvg and ncclBfloat16 appeared in NCCL 2.10


def nccl_version() -> tuple[int, ...] | None:
    if not (torch.cuda.is_available() and dist.is_nccl_available()):
        return None
    version = torch.cuda.nccl.version()
    return tuple(version) if isinstance(version, tuple) else None


def unsupported_reason(*, backend: str, device: str, collective: str, dtype: str, op: str, impl: str = "builtin",
                       nccl_version: tuple[int, ...] | None = None) -> str | None:
    """Why this backend cannot run this combination, or None when it can."""
    if backend == "gloo" and device == "cuda" and impl == "ring":
        return "gloo cannot send/recv CUDA tensors, which the ring needs; use --impl builtin or --device cpu"
    if backend == "gloo" and device == "cuda" and collective not in _GLOO_CUDA_COLLECTIVES:
        return (f"gloo cannot run {collective} on CUDA tensors (only {', '.join(sorted(_GLOO_CUDA_COLLECTIVES))}); "
                "use --backend nccl or --device cpu")
    if backend == "gloo" and op == "avg" and not DTYPES[dtype].is_floating_point:
        return f"gloo cannot average {dtype} (it refuses AVG on integers); use --op sum or a floating dtype"
    if backend == "nccl" and nccl_version is not None and nccl_version < _NCCL_AVG_AND_BF16:
        if op == "avg" or dtype == "bfloat16":
            found = ".".join(map(str, nccl_version))
            return f"NCCL {found} has no {'avg' if op == 'avg' else 'bfloat16'} (needs 2.10+); use sum / float16"
    return None


@dataclass(frozen=True, kw_only=True)
class Target:
    """Where a sweep runs: the resolved backend, device type and number of ranks."""

    backend: str
    device: str
    nproc: int


_assumed_gpus: int | None = None  # set inside assumed_job(): the GPUs of a compute node, not this machine's


def visible_gpu_count() -> int:
    if _assumed_gpus is not None:
        return _assumed_gpus
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@contextlib.contextmanager
def assumed_job(*, world: int, ranks_per_node: int, gpus_per_node: int):
    """Resolve options as they will be resolved inside a job on other machines: a Slurm submission validates its
    suite on a login node that may have no GPU (or no NCCL build) for the compute nodes' job of `world` ranks."""
    global _assumed_gpus
    names = ("RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")
    saved = {name: os.environ.get(name) for name in names}
    os.environ.update(RANK="0", WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(ranks_per_node))
    _assumed_gpus = gpus_per_node
    try:
        yield
    finally:
        _assumed_gpus = None
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def resolve_target(*, backend: str, device: str, nproc: int | None, world_size_in_job: int | None,
                   gpus: int | None = None, nccl_available: bool | None = None,
                   local_world_size: int | None = None) -> Target:
    """Turn `auto` choices into concrete ones and refuse impossible combinations before anything launches.

    world_size_in_job is WORLD_SIZE when commbench already runs inside torchrun or srun; the rank count is then fixed
    and local_world_size (LOCAL_WORLD_SIZE) is how many of those ranks share this machine's GPUs. The machine facts
    default to this machine's.
    """
    gpus = visible_gpu_count() if gpus is None else gpus
    if nccl_available is None:  # a compute node with GPUs is assumed to have NCCL
        nccl_available = dist.is_nccl_available() if _assumed_gpus is None else _assumed_gpus > 0
    if device == "auto":
        # gloo asked for by name means CPU tensors; gloo on CUDA tensors must be asked for with --device cuda
        device = "cuda" if gpus and backend != "gloo" else "cpu"
    if device == "cuda" and not gpus:
        raise CommbenchError("--device cuda asked for, but no CUDA GPU is visible; use --device cpu (gloo)")
    if backend == "auto":
        backend = "nccl" if device == "cuda" else "gloo"
    if backend == "nccl":
        if device != "cuda":
            raise CommbenchError("NCCL runs on CUDA tensors only; use --backend gloo with --device cpu")
        if not nccl_available:
            raise CommbenchError("this torch build has no NCCL; use --backend gloo")

    if world_size_in_job is not None:
        if nproc is not None and nproc != world_size_in_job:
            raise CommbenchError(f"--nproc {nproc} conflicts with WORLD_SIZE={world_size_in_job} of the job commbench "
                                 "runs in; drop --nproc inside torchrun/srun")
        nproc = world_size_in_job
        ranks_here = local_world_size if local_world_size is not None else _local_world_size_from_env()
    else:
        nproc = (gpus if device == "cuda" else 2) if nproc is None else nproc
        ranks_here = nproc
    if nproc < 1:
        raise CommbenchError(f"--nproc {nproc} is not a rank count; use 1 or more")
    if backend == "nccl" and ranks_here is not None and ranks_here > gpus:
        raise CommbenchError(f"{ranks_here} ranks on this machine exceed its {gpus} visible GPU(s): NCCL needs one GPU "
                             f"per rank; use --nproc {gpus} or fewer (or fewer ranks per node), or --backend gloo")
    return Target(backend=backend, device=device, nproc=nproc)


def _local_world_size_from_env() -> int | None:
    value = os.environ.get("LOCAL_WORLD_SIZE") or os.environ.get("SLURM_NTASKS_PER_NODE")
    return int(value) if value and value.isdigit() else None
