import sys

import pytest
import torch

from commbench.platform import CpuPlatform

pytestmark = pytest.mark.no_process

CPU = CpuPlatform("gloo")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM and clear_refs are Linux features")
def test_cpu_peak_rises_with_an_allocation_and_resets():
    CPU.reset_peak()
    before = CPU.peak()["peak_mem_bytes"]
    big = torch.ones(64 * 1024 * 1024)  # 256 MiB, touched
    high = CPU.peak()["peak_mem_bytes"]
    assert high - before >= 200 * 1024 * 1024
    del big  # large tensors are mmap-backed: freeing returns them to the OS
    CPU.reset_peak()
    assert CPU.peak()["peak_mem_bytes"] < high - 150 * 1024 * 1024
