"""How a configuration's --mixed-precision reaches the step, applied exactly once per implementation.

bf16 is applied the way each implementation is trained with it (the torchtitan split): FSDP1 and FSDP2 cast the
parameters themselves (MixedPrecision / MixedPrecisionPolicy: bf16 compute and all-gathers, fp32 gradient reduction),
so their step runs without autocast; autocast on top would cast a second time for nothing. DDP and ZeRO-1 keep fp32
parameters and run forward and loss under torch.autocast(bfloat16); their gradients, and so their all-reduce and
ZeRO-1's parameter broadcast, stay fp32. tf32 keeps fp32 tensors and lets CUDA multiply fp32 matrices in
TensorFloat-32; every configuration sets it anew, since it is process-wide and one launch runs many configurations.
"""

import contextlib

import torch

from commbench.names import DTYPE_BYTES
from commbench.training.spec import FSDP_IMPLS


def _resolved(precision: str | None) -> str:
    return precision or "fp32"  # a configuration without the setting ran fp32


def fsdp_bf16(precision: str | None, impl: str) -> bool:
    """Whether FSDP's own mixed-precision policy casts to bf16 (FSDP implementations only)."""
    return _resolved(precision) == "bf16" and impl in FSDP_IMPLS


def fsdp_dtypes(precision: str | None, impl: str, reduce_dtype: str | None = None
                ) -> tuple[torch.dtype | None, torch.dtype | None]:
    """FSDP's (param_dtype, reduce_dtype): what its policy computes and gathers in, and what it reduces gradients in
    (None: the parameters' own dtype, fp32). bf16 computes in bf16 and reduces in fp32 unless --reduce-dtype bf16."""
    param_dtype = torch.bfloat16 if fsdp_bf16(precision, impl) else None
    reduce = torch.bfloat16 if reduce_dtype == "bf16" else (torch.float32 if param_dtype is not None else None)
    return param_dtype, reduce


def autocast_dtype(precision: str | None, impl: str) -> torch.dtype | None:
    """The dtype the step's forward and loss run under torch.autocast, or None for no autocast."""
    return torch.bfloat16 if _resolved(precision) == "bf16" and impl not in FSDP_IMPLS else None


def element_bytes(sixteen_bit: bool) -> int:
    """Bytes per element of a training tensor (parameters, gradients, what a comm hook sends): 2 for bf16 (and fp16,
    as wide), 4 for fp32, as names.DTYPE_BYTES gives them."""
    return DTYPE_BYTES["bfloat16" if sixteen_bit else "float32"]


def gathered_bytes(precision: str | None, impl: str) -> int:
    """Bytes per element of what FSDP all-gathers and ZeRO-1 broadcasts: the parameters, bf16 only under FSDP's
    policy (autocast casts a copy for compute; the parameters, and so the broadcast, stay fp32)."""
    return element_bytes(fsdp_bf16(precision, impl))


def matmul_precision(precision: str | None) -> str:
    """torch.set_float32_matmul_precision's value: high lets CUDA use TF32 for fp32 matmuls, highest does not."""
    return "high" if _resolved(precision) == "tf32" else "highest"


def apply_matmul_precision(precision: str | None) -> None:
    torch.set_float32_matmul_precision(matmul_precision(precision))


def compute(precision: str | None, impl: str, device_type: str) -> contextlib.AbstractContextManager[object]:
    """The context a micro-batch's forward and loss run in."""
    dtype = autocast_dtype(precision, impl)
    return torch.autocast(device_type, dtype=dtype) if dtype is not None else contextlib.nullcontext()
