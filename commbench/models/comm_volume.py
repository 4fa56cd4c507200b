"""Bytes each rank sends per training step with ring collectives, and their α–β time.

With Ψ parameters of d bytes and N ranks, a ring reduce-scatter or all-gather of the model sends (N−1)/N·Ψ·d per
rank and takes (N−1) steps; an all-reduce is the two. DDP all-reduces the gradients; ZeRO-1 and ZeRO-2
reduce-scatter gradients and all-gather parameters (the same bytes); ZeRO-3/FSDP all-gathers parameters in forward
and again in backward and reduce-scatters gradients: 3 phases, 1.5× DDP.
"""

from dataclasses import dataclass

# ring phases (one reduce-scatter or all-gather of the whole model) per step
PHASES = {"DDP": 2, "ZeRO-1": 2, "ZeRO-2": 2, "ZeRO-3/FSDP": 3}


@dataclass(frozen=True)
class StepTraffic:
    strategy: str
    bytes_sent_per_rank: float
    ratio_to_ddp: float | None  # None at one rank, where nothing is sent
    time_s: float | None  # α–β estimate, when α and bandwidth are known


def ring_time_s(phases: int, *, ranks: int, payload_bytes: float, alpha_us: float, busbw_gbps: float) -> float:
    """Hockney cost of `phases` ring phases: each (N−1)·α plus its (N−1)/N·payload over the bus bandwidth."""
    per_phase = (ranks - 1) * alpha_us * 1e-6 + (ranks - 1) / ranks * payload_bytes / (busbw_gbps * 1e9) \
        if ranks > 1 else 0.0
    return phases * per_phase


def traffic(*, params: float, ranks: int, dtype_bytes: float, alpha_us: float | None = None,
            busbw_gbps: float | None = None) -> list[StepTraffic]:
    payload = params * dtype_bytes
    per_phase = (ranks - 1) / ranks * payload
    rows = []
    for strategy, phases in PHASES.items():
        time_s = None
        if alpha_us is not None and busbw_gbps is not None:
            time_s = ring_time_s(phases, ranks=ranks, payload_bytes=payload, alpha_us=alpha_us, busbw_gbps=busbw_gbps)
        ratio = phases / PHASES["DDP"] if per_phase > 0 else None
        rows.append(StepTraffic(strategy, phases * per_phase, ratio, time_s))
    return rows
