"""Resettable peak memory of this rank: the CUDA allocator's on a GPU, the process's peak RSS (VmHWM) on CPU.

torch.cuda.max_memory_allocated() silently returns 0 without CUDA, so CPU runs read Linux's VmHWM instead, which
writing "5" to /proc/self/clear_refs resets to the current RSS (it includes torch's own ~0.5 GiB baseline).
"""

from pathlib import Path

import torch


def reset(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:  # not Linux, or not allowed: the peak then counts from process start
        pass


def peak(device: torch.device) -> dict:
    """Peak bytes since the last reset: allocated and reserved on CUDA, resident set size on CPU."""
    if device.type == "cuda":
        return {"peak_mem_bytes": torch.cuda.max_memory_allocated(device),
                "peak_mem_reserved_bytes": torch.cuda.max_memory_reserved(device)}
    return {"peak_mem_bytes": _vm_hwm_bytes(), "peak_mem_reserved_bytes": None}


def _vm_hwm_bytes() -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None
