"""What each backend can run, and the torch objects behind the dtype and reduction names (commbench/names.py).

Planning a sweep (sizes, layouts, what a backend refuses) needs only the names and element sizes (names.py), so
this module imports torch only when a torch object is asked for (DTYPES, REDUCE_OPS): the launching process never
loads torch.
"""

import functools
from typing import TYPE_CHECKING, TypedDict

from commbench import names
from commbench.names import CUDA, FLOATING_DTYPES, FP8_DTYPES, GLOO, GLOO_CUDA_COLLECTIVES, NCCL, TORCH_SPELLING

if TYPE_CHECKING:
    import torch
    import torch.distributed as dist

    # served by __getattr__ below on first use; declared here so that importers see their types
    DTYPES: dict[str, torch.dtype]
    REDUCE_OPS: dict[str, dist.ReduceOp.RedOpType]


class _TorchObjects(TypedDict):
    DTYPES: "dict[str, torch.dtype]"
    REDUCE_OPS: "dict[str, dist.ReduceOp.RedOpType]"


def __getattr__(name: str) -> "dict[str, torch.dtype] | dict[str, dist.ReduceOp.RedOpType]":
    """DTYPES (name → torch.dtype) and REDUCE_OPS (name → dist.ReduceOp), built on first use (PEP 562)."""
    if name == "DTYPES":
        return _torch_objects()["DTYPES"]
    if name == "REDUCE_OPS":
        return _torch_objects()["REDUCE_OPS"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def _torch_objects() -> _TorchObjects:
    import torch
    import torch.distributed as dist

    return {"DTYPES": {dtype: getattr(torch, TORCH_SPELLING.get(dtype, dtype)) for dtype in names.DTYPES},
            "REDUCE_OPS": {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "max": dist.ReduceOp.MAX,
                           "min": dist.ReduceOp.MIN, "avg": dist.ReduceOp.AVG}}
_NCCL_AVG_AND_BF16 = (2, 10)  # ncclAvg and ncclBfloat16 appeared in NCCL 2.10
_NCCL_FP8 = (2, 24)  # ncclFloat8e4m3 and ncclFloat8e5m2 appeared in NCCL 2.24 (torch maps fp8 to them from there)


_FP8_CAPABILITY = (9, 0)  # NCCL's fp8 types need SM 90 (Hopper) or newer; nccl-tests leaves them out below it


def unsupported_reason(*, backend: str, device: str, collective: str, dtype: str, op: str, impl: str = "builtin",
                       nccl_version: tuple[int, ...] | None = None,
                       gpu_capability: tuple[int, ...] | None = None) -> str | None:
    """Why this backend cannot run this combination, or None when it can."""
    if dtype in names.UNREDUCED_DTYPES:
        return (f"--dtype {dtype}: torch's NCCL and gloo backends have no {dtype} collectives (neither one's type "
                f"table has it); use {names.UNREDUCED_DTYPES[dtype]}")
    if backend == GLOO and device == CUDA and impl == "ring":
        return "gloo cannot send/recv CUDA tensors, which the ring needs; use --impl builtin or --device cpu"
    if backend == GLOO and device == CUDA and collective not in GLOO_CUDA_COLLECTIVES:
        return (f"gloo cannot run {collective} on CUDA tensors (only {', '.join(GLOO_CUDA_COLLECTIVES)}); "
                "use --backend nccl or --device cpu")
    if backend == GLOO and dtype in FP8_DTYPES:
        return (f"gloo has no {dtype} (torch's gloo backend refuses fp8 tensors); fp8 runs on NCCL 2.24+: use "
                "--backend nccl on GPUs, or another --dtype")
    if backend == NCCL and dtype in FP8_DTYPES and nccl_version is not None and nccl_version < _NCCL_FP8:
        found = ".".join(map(str, nccl_version))
        return f"NCCL {found} has no {dtype} (NCCL 2.24 added fp8); use bfloat16 or float16"
    if dtype in FP8_DTYPES and gpu_capability is not None and tuple(gpu_capability) < _FP8_CAPABILITY:
        found = ".".join(map(str, gpu_capability))
        return (f"{dtype} needs GPUs of compute capability 9.0 (Hopper) or newer, and these are {found}; use bfloat16 "
                "or float16")
    if backend == GLOO and op == "avg" and dtype not in FLOATING_DTYPES:
        return f"gloo cannot average {dtype} (it refuses AVG on integers); use --op sum or a floating dtype"
    if backend == NCCL and nccl_version is not None and nccl_version < _NCCL_AVG_AND_BF16:
        if op == "avg" or dtype == "bfloat16":
            found = ".".join(map(str, nccl_version))
            return f"NCCL {found} has no {'avg' if op == 'avg' else 'bfloat16'} (needs 2.10+); use sum / float16"
    return None
