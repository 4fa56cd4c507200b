"""Stream hops: where torch runs a call's NCCL work on the process group's own stream, the current stream waits for it
and it waits for the current stream (current stream → NCCL stream → current stream). Each hop is a cross-stream wait
on the device, about 1 µs (fourth GPU review, ../shared/notes/gpu-review.md), which nccl-tests, issuing on one stream,
never pays. The CUDA events still bracket the call correctly; the row's timing_method says how many hops its time holds
so that a comparison with nccl-tests allows for them (benchmarks/vs_nccl_tests.py: +HOP_US per hop).

Which calls hop (torch 2.13's ProcessGroupNCCL, read against older releases):
- batch_isend_irecv (sendrecv, hunt's and p2p's exchanges, the hand-written ring's steps) on every torch: its works
  run on the NCCL stream, and work.wait() brings the current stream back;
- the coalescing manager with async_ops (nccl-tests' -m, more than one call per iteration) on every torch;
- on torch 2.7 and older, every synchronous collective (from 2.8 a synchronous op runs on the current stream).
"""

import re

HOP_US = 1.0
"""Device time one cross-stream wait costs, as a comparison allows for it."""
HOPS_PER_ROUND_TRIP = 2
"""current → NCCL stream, then NCCL → current stream."""
SYNC_ON_CURRENT_STREAM_FROM = (2, 8)
"""The torch release from which a synchronous collective runs on the current stream (no hop)."""
POINT_TO_POINT = ("sendrecv",)
"""Builtin collectives issued with batch_isend_irecv."""


def _release(version: str) -> tuple[int, int]:
    numbers = re.match(r"(\d+)\.(\d+)", version)
    return (int(numbers.group(1)), int(numbers.group(2))) if numbers else SYNC_ON_CURRENT_STREAM_FROM


def hops_per_iteration(collective: str, *, backend: str, device: str, impl: str = "builtin", agg: int = 1,
                       torch_version: str | None = None) -> int | None:
    """Cross-stream waits one timed iteration holds on the device: 0 off NCCL/CUDA; None where they depend on the
    algorithm's steps (a hand-written implementation: HOPS_PER_ROUND_TRIP per step, which hop_text says)."""
    if backend != "nccl" or device != "cuda":
        return 0
    if impl != "builtin":
        return None
    if collective in POINT_TO_POINT or agg > 1:
        return HOPS_PER_ROUND_TRIP
    if torch_version is None:
        import torch

        torch_version = torch.__version__
    return HOPS_PER_ROUND_TRIP if _release(torch_version) < SYNC_ON_CURRENT_STREAM_FROM else 0


def hop_text(hops: int | None) -> str:
    """timing_method's words on the hops of one iteration ("" where there are none); hops_in reads them back."""
    if hops == 0:
        return ""
    if hops is None:
        return (f"; {HOPS_PER_ROUND_TRIP} stream hops per exchange step (current → NCCL → current stream, ~{HOP_US:g} "
                "µs each on the device)")
    return f"; {hops} stream hops per iteration (current → NCCL → current stream, ~{HOP_US:g} µs each on the device)"


_HOPS = re.compile(r"(\d+) stream hops per iteration")


def hops_in(timing_method: str) -> int:
    """The stream hops per iteration a row's timing_method states (0 where it states none)."""
    found = _HOPS.search(timing_method or "")
    return int(found.group(1)) if found else 0


def allowance_us(hops: int, agg: int = 1) -> float:
    """The device time per call a comparison allows for a call's hops: HOP_US each, shared by an iteration's calls."""
    return HOP_US * hops / max(1, agg)
