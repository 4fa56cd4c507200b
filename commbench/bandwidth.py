"""algbw and busbw exactly as nccl-tests defines them (doc/PERFORMANCE.md); GB/s means 1e9 bytes per second."""


def algbw_gbps(algbw_bytes: int, seconds: float) -> float:
    """Algorithm bandwidth: the collective's S bytes divided by the time of one operation."""
    return algbw_bytes / seconds / 1e9


def busbw_gbps(algbw_bytes: int, seconds: float, factor: float) -> float:
    """Bus bandwidth: algbw times the collective's factor, comparable with link speed for ring algorithms."""
    return algbw_gbps(algbw_bytes, seconds) * factor
