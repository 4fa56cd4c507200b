"""Model FLOPs per token, the throughput figures built on them (tokens/s per rank, achieved TFLOPS per rank) and MFU.

MFU (model FLOPs utilisation, PaLM, Chowdhery et al. 2022, appendix B) = the model FLOPs one rank completes per
second ÷ its device's peak FLOPs at the precision in use. Model FLOPs are the PaLM/Chinchilla count for one token,
forward and backward:

    6 × N  +  12 × layers × hidden × seq_len

N is the parameters that multiply activations (every parameter but an embedding table, whose lookup does no
arithmetic; an LM head counts), 6 = 2 (forward multiply-add) + 4 (backward, gradients of inputs and weights); the
second term is attention's QKᵀ and softmax·V products, 2 × 2 × seq_len × hidden per layer forward, ×3 with backward,
counted for the full sequence as PaLM does (no halving for the causal mask). An MLP model has no attention term.
Recomputation (activation checkpointing) is not model FLOPs: MFU does not count it, by design.

The peaks are NVIDIA's datasheet figures for dense matrices (the datasheets print 2:4-sparse figures, twice these,
for the tensor-core rows). On CPU, and on a GPU missing from the table, MFU is absent with the reason: a made-up
peak would give a percentage nobody can check.
"""

import re
from dataclasses import dataclass

from commbench.training.spec import ModelShape

TFLOPS = 1e12


@dataclass(frozen=True)
class GpuPeak:
    model: str
    pattern: str
    """A regular expression matched against the name torch gives the device (torch.cuda.get_device_name)."""
    tflops: dict  # precision (fp32, tf32, bf16) → dense peak TFLOPS
    source: str


PEAKS = (
    GpuPeak("A100", r"\bA100\b", {"bf16": 312.0, "tf32": 156.0, "fp32": 19.5},
            "NVIDIA A100 Tensor Core GPU datasheet (SXM4 and PCIe, 40 and 80 GB: the same peaks)"),
    # H100 PCIe and NVL have lower clocks and peaks, and names of their own ("NVIDIA H100 PCIe", "NVIDIA H100 NVL")
    GpuPeak("H100 SXM", r"\bH100\b(?!.*(PCIe|NVL))", {"bf16": 989.5, "tf32": 494.5, "fp32": 67.0},
            "NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column"),
    GpuPeak("H200", r"\bH200\b(?!.*NVL)", {"bf16": 989.5, "tf32": 494.5, "fp32": 67.0},
            "NVIDIA H200 Tensor Core GPU datasheet, H200 SXM column"),
    GpuPeak("B200", r"\bB200\b", {"bf16": 2250.0, "tf32": 1100.0, "fp32": 75.0},
            "NVIDIA HGX B200 specifications, individual B200 GPU (1,000 W)"),
)


def model_flops_per_token(*, params: int, embedding_params: int = 0, layers: int, hidden: int, seq_len: int,
                          attention: bool) -> int:
    """Forward + backward FLOPs of one token: 6 × (params − embedding_params) + 12 × layers × hidden × seq_len
    (the attention term only where the model has attention)."""
    return 6 * (params - embedding_params) + (12 * layers * hidden * seq_len if attention else 0)


def peak_for(device_name: str | None, precision: str | None) -> tuple[float | None, str]:
    """(dense peak TFLOPS of this device at this precision, what it is) or (None, why there is none)."""
    precision = precision or "fp32"
    if not device_name:
        return None, "no peak: the device's name is unknown"
    for peak in PEAKS:
        if re.search(peak.pattern, device_name):
            if precision not in peak.tflops:
                return None, f"no peak: {peak.model} has no {precision} figure in the table"
            return peak.tflops[precision], f"{peak.model} dense {precision} peak, {peak.source}"
    known = ", ".join(peak.model for peak in PEAKS)
    return None, f"no peak for {device_name!r}: MFU is computed for {known} only (commbench/training/flops.py)"


def rate_columns(*, tokens_per_s: float, world: int, flops_per_token: int, device_type: str,
                 device_name: str | None, precision: str | None) -> dict:
    """The rate columns of a training row. tokens_per_s is global (all ranks); every figure here is per rank, so
    that ranks of different counts compare. MFU is absent (None) with mfu_note saying why on CPU or an unknown GPU."""
    per_rank = tokens_per_s / world
    achieved_tflops = per_rank * flops_per_token / TFLOPS
    if device_type != "cuda":
        peak, note = None, f"no MFU on {device_type}: the table holds GPU peaks only"
    else:
        peak, note = peak_for(device_name, precision)
    return {"tokens_per_s_per_rank": per_rank, "model_flops_per_token": flops_per_token,
            "model_tflops_per_rank": achieved_tflops, "peak_tflops": peak,
            "mfu_pct": None if peak is None else 100 * achieved_tflops / peak, "mfu_note": note}


def synthetic_flops_per_token(shape: ModelShape) -> int:
    """Model FLOPs per token of the synthetic model of this shape, counted from the model itself (built on the meta
    device: shapes, no memory), so the count follows whatever the model holds: N is every parameter outside its
    embedding tables (blocks, final norm, LM head)."""
    import torch
    from torch import nn

    from commbench.training.synthetic import SyntheticModel

    with torch.device("meta"):
        model = SyntheticModel(shape)
    # a weight tied between an embedding and an LM head counts once, for the head's matmul
    multiplying = {id(parameter): parameter.numel() for module in model.modules()
                   if not isinstance(module, nn.Embedding) for parameter in module.parameters(recurse=False)}
    return model_flops_per_token(params=sum(multiplying.values()), layers=shape.layers, hidden=shape.hidden,
                                 seq_len=shape.seq_len, attention=shape.kind == "transformer")
