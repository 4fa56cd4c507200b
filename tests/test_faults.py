"""The test-only delay faults (commbench/faults.py: COMMBENCH_SLOWDOWN_PCT, COMMBENCH_SLOW_NODE / _LINK's share,
COMMBENCH_STALL_NODE's stall): on CPU a wait of the host inside the call, on CUDA a spin of the stream after it, since
a CUDA call returns once its work is queued and a host wait would delay nothing the CUDA events time. The CUDA tests
need a GPU and skip without one."""

import time

import pytest
import torch

from commbench import faults
from commbench.faults import Stall, slowed, slowed_by, stalled
from commbench.measure.spin_kernel import spin_device

pytestmark = pytest.mark.no_process

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: on CUDA the faults delay the "
                                                                     "stream with a spin kernel, timed by CUDA events")
CALL_S = 0.02


def _host_call():
    time.sleep(CALL_S)


def _host_seconds(run) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def test_without_a_fault_the_call_is_the_call_itself(monkeypatch):
    monkeypatch.delenv(faults.SLOWDOWN_ENV_VAR, raising=False)
    assert slowed(_host_call, "cpu") is _host_call
    assert slowed_by(_host_call, 0.0, "cpu") is _host_call
    assert stalled(_host_call, None, "cpu") is _host_call


def test_on_cpu_a_slow_share_waits_that_share_of_the_call(monkeypatch):
    assert _host_seconds(slowed_by(_host_call, 1.0, "cpu")) >= 2 * CALL_S
    monkeypatch.setenv(faults.SLOWDOWN_ENV_VAR, "50")
    assert _host_seconds(slowed(_host_call, "cpu")) >= 1.5 * CALL_S


def test_the_slowdown_is_a_share_of_the_fastest_call_so_far(monkeypatch):
    """A call's time includes waiting for peers, so a share of each call's own time would hand two ranks' skew back
    to each other multiplied; the share is of the fastest call this rank has made."""
    durations = iter([CALL_S, 4 * CALL_S])
    monkeypatch.setenv(faults.SLOWDOWN_ENV_VAR, "100")
    slow = slowed(lambda: time.sleep(next(durations)), "cpu")
    assert _host_seconds(slow) >= 2 * CALL_S
    # the long call waits CALL_S more (its fastest predecessor's share), not another 4 * CALL_S
    assert 5 * CALL_S <= _host_seconds(slow) < 7 * CALL_S


def test_on_cpu_a_stall_of_every_call_waits_its_milliseconds():
    assert _host_seconds(stalled(_host_call, Stall(100.0, 0.03), "cpu")) >= CALL_S + 0.03


def _device_and_host_seconds(run) -> tuple[float, float]:
    """(the device time CUDA events put around one call, the host time the call took)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    host_s = _host_seconds(run)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3, host_s


def _device_call():
    spin_device(CALL_S)  # the call's work: 20 ms on the stream, queued in microseconds


@needs_gpu
def test_on_cuda_a_slow_share_delays_the_device_not_the_host(monkeypatch):
    plain_s, _ = _device_and_host_seconds(_device_call)
    for run in (slowed_by(_device_call, 1.0, "cuda"), _with_slowdown(monkeypatch, 100)):
        run()  # the first call has no measured time yet, so no delay
        torch.cuda.synchronize()
        device_s, host_s = _device_and_host_seconds(run)
        assert device_s >= 1.8 * plain_s, (device_s, plain_s)
        assert host_s < 0.5 * plain_s  # the host only queued the work


def _with_slowdown(monkeypatch, percent: int):
    monkeypatch.setenv(faults.SLOWDOWN_ENV_VAR, str(percent))
    return slowed(_device_call, "cuda")


@needs_gpu
def test_on_cuda_a_stall_delays_the_device_not_the_host():
    plain_s, _ = _device_and_host_seconds(_device_call)
    device_s, host_s = _device_and_host_seconds(stalled(_device_call, Stall(100.0, 0.05), "cuda"))
    assert device_s >= plain_s + 0.045, (device_s, plain_s)
    assert host_s < 0.01
