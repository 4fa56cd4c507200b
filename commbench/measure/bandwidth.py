"""algbw and busbw exactly as nccl-tests defines them (doc/PERFORMANCE.md); GB/s means 1e9 bytes per second."""

import math


def algbw_gbps(algbw_bytes: int, seconds: float) -> float:
    """Algorithm bandwidth: the collective's S bytes divided by the time of one operation; NaN (no figure) when the
    time is not above 0, i.e. below the timer's resolution: dividing by it would print TB/s or raise."""
    if not seconds > 0:
        return math.nan
    return algbw_bytes / seconds / 1e9


def busbw_gbps(algbw_bytes: int, seconds: float, factor: float) -> float:
    """Bus bandwidth: algbw times the collective's factor, comparable with link speed for ring algorithms."""
    return algbw_gbps(algbw_bytes, seconds) * factor
