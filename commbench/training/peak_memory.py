"""Resettable peak memory of this rank: the CUDA allocator's on a GPU, the process's peak RSS (VmHWM) on CPU.

torch.cuda.max_memory_allocated() silently returns 0 without CUDA, so CPU runs read Linux's VmHWM instead, which
writing "5" to /proc/self/clear_refs resets to the current RSS (it includes torch's own ~0.5 GiB baseline).
"""

import ctypes
import gc
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
    return {"peak_mem_bytes": _status_bytes("VmHWM:"), "peak_mem_reserved_bytes": None}


def _status_bytes(field: str) -> int | None:
    """A kB field of /proc/self/status in bytes (Linux), else None."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def release(device: torch.device) -> None:
    """Give back what the last configuration freed, so that the next one starts where the sweep began: collect
    Python garbage, then return cached blocks (CUDA) or free heap pages (glibc malloc_trim) to the system."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        return
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: freed pages stay with the process
        pass


def current(device: torch.device) -> int | None:
    """Bytes in use now: allocated by torch on CUDA, resident set size on CPU."""
    if device.type == "cuda":
        return torch.cuda.memory_allocated(device)
    return _status_bytes("VmRSS:")


def capacity(device: torch.device, ranks_on_host: int) -> int | None:
    """What one rank may use: its GPU's memory, or this host's RAM shared by its ranks."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024 // max(1, ranks_on_host)
    except OSError:
        pass
    return None
