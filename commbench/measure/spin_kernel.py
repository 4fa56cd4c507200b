"""The spin kernel that keeps a CUDA stream busy for a given time (torch.cuda._sleep, a precompiled ATen kernel: no
nvcc, no Triton), calibrated once per process on the device it first runs on."""

import math
from functools import cache

import torch


class SpinKernel:
    """torch.cuda._sleep(cycles) and the cycles per second it runs at on this process's GPU."""

    CALIBRATION_CYCLES = 1_000_000

    def __init__(self) -> None:
        self._sleep = getattr(torch.cuda, "_sleep", None)  # private but long-standing; without it no spin
        self._cycles_per_s: float | None = None

    @property
    def available(self) -> bool:
        return self._sleep is not None

    def calibrate(self) -> None:
        """Time one spin with CUDA events; it waits for the device, so it belongs before a timed stretch that spins,
        never inside one. The first launch loads the kernel and is not timed."""
        if self._sleep is None or self._cycles_per_s is not None:
            return
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        self._sleep(self.CALIBRATION_CYCLES)
        start.record()
        self._sleep(self.CALIBRATION_CYCLES)
        end.record()
        end.synchronize()
        self._cycles_per_s = self.CALIBRATION_CYCLES / max(start.elapsed_time(end) / 1e3, 1e-9)

    def cycles_for(self, seconds: float) -> int:
        if self._sleep is None:
            return 0
        self.calibrate()
        assert self._cycles_per_s is not None
        return int(math.ceil(seconds * self._cycles_per_s))

    def run_cycles(self, cycles: int) -> None:
        """Queue a spin of `cycles` on the current stream (the host does not wait)."""
        if self._sleep is not None and cycles > 0:
            self._sleep(cycles)

    def run_for(self, seconds: float) -> None:
        """Queue a spin of about `seconds` on the current stream."""
        self.run_cycles(self.cycles_for(seconds))


@cache
def spin_kernel() -> SpinKernel:
    """This process's spin kernel: one calibration serves every timer and fault of the process (a rank has one GPU)."""
    return SpinKernel()


def can_spin() -> bool:
    """Whether this torch has the spin kernel (torch.cuda._sleep)."""
    return spin_kernel().available


def calibrate_spin() -> None:
    """Calibrate the spin now, before a timed stretch that spins."""
    spin_kernel().calibrate()


def spin_device(seconds: float) -> None:
    """Keep the current CUDA stream busy for about `seconds` more (a spin kernel; the host does not wait)."""
    spin_kernel().run_for(seconds)
