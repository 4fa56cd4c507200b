"""What differs between device types on a rank, asked of one Platform value instead of testing the device type:
timing a call, waiting for the device, peak memory (read, reset, release), GPU sampling, profiler activities,
and whether point-to-point transfers go in pairs.

torch.cuda.max_memory_allocated() silently returns 0 without CUDA, so the CPU platform reads Linux's VmHWM, which
writing "5" to /proc/self/clear_refs resets to the current RSS (it includes torch's own ~0.5 GiB baseline).
"""

from __future__ import annotations

import ctypes
import gc
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from commbench.machine import proc_kib_field
from commbench.measure.timers import CpuTimer, CudaTimer, Timer
from commbench.names import CPU, CUDA, GLOO, NCCL, Backend, Device

if TYPE_CHECKING:
    from commbench.machine import Machine
    from commbench.profiling.nvml_sampler import GpuSampler


class CpuPlatform:
    """Ranks on CPU tensors (gloo)."""

    has_gpu = False

    def __init__(self, backend: Backend):
        self.backend = backend
        self.device = torch.device(CPU)

    @property
    def p2p_batched(self) -> bool:
        """NCCL pairs a ring step's send and receive in one group (batch_isend_irecv); gloo posts them apart."""
        return self.backend == NCCL

    def timer(self, barrier: Callable[[], None], meet: Callable[[], None] | None = None) -> Timer:
        """The rank's timer; `meet` (a collective the ranks meet by on the device) is for timers that spin ahead."""
        return CpuTimer(barrier)

    def synchronize(self) -> None:
        """Wait until the device has finished what was queued (nothing is queued on CPU)."""

    def profiler_activities(self) -> list[torch.profiler.ProfilerActivity]:
        return [torch.profiler.ProfilerActivity.CPU]

    def device_name(self) -> str:
        from commbench.runinfo import cpu_model

        return cpu_model()

    def device_slot(self) -> tuple[int, str]:
        """(device index, bus id) as nccl-tests' rank lines print them: on CPU the first core this rank may run on
        and "cpu"."""
        cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0]
        return cores[0], "cpu"

    def gpu_sampler(self, interval_s: float) -> tuple[GpuSampler | None, str]:
        """(sampler or None, what meta.json says about GPU sampling)."""
        return None, "not sampled: the run is on CPU tensors"

    def gpu_uuid(self) -> str | None:
        """NVML's name of this rank's GPU ("GPU-…"); None on CPU."""
        return None

    def reset_peak(self) -> None:
        try:
            Path("/proc/self/clear_refs").write_text("5")
        except OSError:  # not Linux, or not allowed: the peak then counts from process start
            pass

    def peak(self) -> dict[str, int | None]:
        """Peak bytes since the last reset_peak: the resident set size (no reserved figure on CPU)."""
        return {"peak_mem_bytes": proc_kib_field("/proc/self/status", "VmHWM:"), "peak_mem_reserved_bytes": None}

    def current(self) -> int | None:
        """Bytes in use now: the resident set size."""
        return proc_kib_field("/proc/self/status", "VmRSS:")

    def start_peak_window(self) -> None:
        """Before a measured stretch: release what is free first, then reset the peak, so that peak() afterwards
        counts this stretch only (the other order would start the window at memory still held by garbage)."""
        self.release()
        self.reset_peak()

    def release(self) -> None:
        """Give back what was freed: Python garbage, then free heap pages (glibc malloc_trim) to the system."""
        gc.collect()
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):  # not glibc: freed pages stay with the process
            pass

    def capacity(self, ranks_sharing: int) -> int | None:
        """What one rank may use: this host's RAM shared by its ranks (ranks_sharing: the ranks on this host)."""
        total = proc_kib_field("/proc/meminfo", "MemTotal:")
        return None if total is None else total // max(1, ranks_sharing)


class CudaPlatform(CpuPlatform):
    """Ranks on one CUDA GPU each (NCCL), or sharing GPUs (gloo on CUDA tensors)."""

    has_gpu = True

    def __init__(self, backend: Backend, device_index: int):
        self.backend = backend
        # the index machine.gpu_index gave (commbench/gpu_mapping.py): the rule the launcher checked the ranks with
        self.device = torch.device(CUDA, device_index)
        torch.cuda.set_device(self.device)

    def timer(self, barrier: Callable[[], None], meet: Callable[[], None] | None = None) -> Timer:
        # gloo's calls on CUDA tensors return when done: nothing to cover with a spin (CudaTimer)
        return CudaTimer(barrier, meet=meet, host_blocking=self.backend == GLOO)

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)

    def profiler_activities(self) -> list[torch.profiler.ProfilerActivity]:
        return [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]

    def device_name(self) -> str:
        return torch.cuda.get_device_name(self.device)

    def device_slot(self) -> tuple[int, str]:
        """(CUDA device index, PCI domain:bus:device as nccl-tests prints it, e.g. 0000:02:00)."""
        properties = torch.cuda.get_device_properties(self.device)
        bus = [getattr(properties, f"pci_{part}_id", None) for part in ("domain", "bus", "device")]
        text = "unknown" if None in bus else f"{bus[0]:04x}:{bus[1]:02x}:{bus[2]:02x}"
        return self.device.index, text

    def gpu_sampler(self, interval_s: float) -> tuple[GpuSampler | None, str]:
        from commbench.profiling.nvml_sampler import GpuSampler, nvml_unavailable_reason

        reason = nvml_unavailable_reason()
        if reason:
            return None, f"not sampled: {reason}"
        try:
            sampler = GpuSampler.open(self.device.index, interval_s, uuid=self.gpu_uuid())
        except Exception as error:  # e.g. the UUID is unknown to NVML: sampling another GPU would be wrong
            return None, f"not sampled: NVML could not open this rank's GPU ({type(error).__name__})"
        return sampler, sampler.describe()

    def gpu_uuid(self) -> str | None:
        uuid = getattr(torch.cuda.get_device_properties(self.device), "uuid", None)
        return None if uuid is None else (str(uuid) if str(uuid).startswith("GPU-") else f"GPU-{uuid}")

    def reset_peak(self) -> None:
        torch.cuda.reset_peak_memory_stats(self.device)

    def peak(self) -> dict[str, int | None]:
        """Peak bytes since the last reset_peak: allocated and reserved by torch's caching allocator."""
        return {"peak_mem_bytes": torch.cuda.max_memory_allocated(self.device),
                "peak_mem_reserved_bytes": torch.cuda.max_memory_reserved(self.device)}

    def current(self) -> int | None:
        return torch.cuda.memory_allocated(self.device)

    def release(self) -> None:
        """Python garbage first, then the allocator's cached blocks back to the driver."""
        gc.collect()
        torch.cuda.synchronize(self.device)
        torch.cuda.empty_cache()

    def capacity(self, ranks_sharing: int) -> int | None:
        """What one rank may use: its GPU's memory shared by the ranks on that GPU (ranks_sharing; gloo on CUDA may
        put several on one GPU)."""
        return torch.cuda.get_device_properties(self.device).total_memory // max(1, ranks_sharing)


def platform_for(*, backend: Backend, device_type: Device, machine: Machine) -> CpuPlatform:
    """This rank's platform (on CUDA it also makes the rank's GPU, machine.gpu_index's, the current device)."""
    return CudaPlatform(backend, machine.gpu_index(backend)) if device_type == CUDA else CpuPlatform(backend)
