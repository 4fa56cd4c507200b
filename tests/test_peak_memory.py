import sys

import pytest
import torch

from commbench.training import peak_memory

CPU = torch.device("cpu")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM and clear_refs are Linux features")
def test_cpu_peak_rises_with_an_allocation_and_resets():
    peak_memory.reset(CPU)
    before = peak_memory.peak(CPU)["peak_mem_bytes"]
    big = torch.ones(64 * 1024 * 1024)  # 256 MiB, touched
    high = peak_memory.peak(CPU)["peak_mem_bytes"]
    assert high - before >= 200 * 1024 * 1024
    del big  # large tensors are mmap-backed: freeing returns them to the OS
    peak_memory.reset(CPU)
    assert peak_memory.peak(CPU)["peak_mem_bytes"] < high - 150 * 1024 * 1024
