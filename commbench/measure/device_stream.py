"""What the CUDA timer does to the device, as one small interface: marks (CUDA events recorded on the current stream),
waits for the stream or the whole device, and the spin kernel. The timer issues everything through it, so the order
of what it issues (spin, meet, start mark, calls, end mark) is one recorded sequence a CPU test can read
(tests/test_timer_sequence.py); on a GPU it is torch.cuda's own calls, nothing in between."""

from typing import Protocol

import torch

from commbench.measure.spin_kernel import spin_kernel


class Mark(Protocol):
    """A point on the stream's timeline."""

    def seconds_to(self, later: "Mark") -> float: ...

    def wait(self) -> None: ...


class DeviceStream(Protocol):
    spin_available: bool

    def mark(self) -> Mark: ...

    def wait_stream(self) -> None: ...

    def wait_device(self) -> None: ...

    def calibrate(self) -> None: ...

    def cycles_for(self, seconds: float) -> int: ...

    def spin(self, cycles: int) -> None: ...


class CudaMark:
    """A timing CUDA event recorded on the current stream when made."""

    def __init__(self) -> None:
        self.event = torch.cuda.Event(enable_timing=True)
        self.event.record(torch.cuda.current_stream())

    def seconds_to(self, later: "Mark") -> float:
        assert isinstance(later, CudaMark)
        return self.event.elapsed_time(later.event) / 1e3

    def wait(self) -> None:
        self.event.synchronize()


class CudaStream:
    """The current CUDA stream and this process's spin kernel (spin_kernel.py)."""

    def __init__(self) -> None:
        self._kernel = spin_kernel()
        self.spin_available = self._kernel.available

    def mark(self) -> Mark:
        return CudaMark()

    def wait_stream(self) -> None:
        torch.cuda.current_stream().synchronize()

    def wait_device(self) -> None:
        torch.cuda.synchronize()

    def calibrate(self) -> None:
        self._kernel.calibrate()

    def cycles_for(self, seconds: float) -> int:
        return self._kernel.cycles_for(seconds)

    def spin(self, cycles: int) -> None:
        self._kernel.run_cycles(cycles)
