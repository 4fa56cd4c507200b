"""What each backend can run, and the torch objects behind the dtype and reduction names (commbench/names.py)."""

import torch
import torch.distributed as dist

from commbench import names
from commbench.names import CUDA, GLOO, GLOO_CUDA_COLLECTIVES, NCCL

DTYPES = {name: getattr(torch, name) for name in names.DTYPES}
REDUCE_OPS = {
    "sum": dist.ReduceOp.SUM,
    "max": dist.ReduceOp.MAX,
    "min": dist.ReduceOp.MIN,
    "avg": dist.ReduceOp.AVG,
}
_NCCL_AVG_AND_BF16 = (2, 10)  # ncclAvg and ncclBfloat16 appeared in NCCL 2.10


def unsupported_reason(*, backend: str, device: str, collective: str, dtype: str, op: str, impl: str = "builtin",
                       nccl_version: tuple[int, ...] | None = None) -> str | None:
    """Why this backend cannot run this combination, or None when it can."""
    if backend == GLOO and device == CUDA and impl == "ring":
        return "gloo cannot send/recv CUDA tensors, which the ring needs; use --impl builtin or --device cpu"
    if backend == GLOO and device == CUDA and collective not in GLOO_CUDA_COLLECTIVES:
        return (f"gloo cannot run {collective} on CUDA tensors (only {', '.join(GLOO_CUDA_COLLECTIVES)}); "
                "use --backend nccl or --device cpu")
    if backend == GLOO and op == "avg" and not DTYPES[dtype].is_floating_point:
        return f"gloo cannot average {dtype} (it refuses AVG on integers); use --op sum or a floating dtype"
    if backend == NCCL and nccl_version is not None and nccl_version < _NCCL_AVG_AND_BF16:
        if op == "avg" or dtype == "bfloat16":
            found = ".".join(map(str, nccl_version))
            return f"NCCL {found} has no {'avg' if op == 'avg' else 'bfloat16'} (needs 2.10+); use sum / float16"
    return None
