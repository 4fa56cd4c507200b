"""What a healthy machine reaches, as a share of the physical ceiling (expect/model.py): one efficiency per algorithm
and transport, each with its source. Never one per machine or per log: the published logs in tests/data are the test
of these figures, not their input (tests/test_expect_imports.py).

The ceiling counts signaling rates; NCCL's own model (src/graph/topo.h, topo.cc, tuning.cc) counts effective rates
below them, and NVIDIA publishes what NVLS and NVLS-tree reach. A figure here is either NCCL's effective rate over
the signaling rate, or a published healthy figure over the ceiling it is measured against.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Efficiency:
    """A healthy figure as a share of its ceiling, and where the share comes from."""

    share: float
    source: str


NETWORK = Efficiency(0.94, "NDR InfiniBand reaches 46-48 GB/s per 400 Gb/s NIC in NCCL's ring (NVIDIA on "
                           "nccl-tests#290 and #196): 47 / 50; HDR's rule of thumb is 24 GB/s per 200 Gb/s "
                           "(nccl-tests#119), 0.96")
"""A NIC's healthy share of its signaling rate (rate / 8)."""

NVLS_TREE_OF_LINK = Efficiency(375 / 450, "NVIDIA's GTC'24 talk S62129: NVLS+Tree all-reduce reaches 370-380 GB/s "
                                          "busbw on H100 (quoted in NVIDIA/nccl#1649), over the H100's 450 GB/s "
                                          "of NVLink")
"""The intra-node part of NVLS-tree, as a share of the GPU's NVLink signaling rate (Hopper)."""

NVLS_OF_CEILING = Efficiency(480 / 700, "an 8 × H100 node's NVLS all-reduce reaches 476-480 GB/s busbw, which "
                                        "NVIDIA calls the expected range (nccl-tests#290, #212; GTC'24 S62129), over "
                                        "its ceiling 450 × 2(G-1)/(G+1) = 700 GB/s at G = 8")
"""NVLS all-reduce on one node, as a share of its multicast ceiling (Hopper)."""

NVLS_ARCHITECTURE = {9: 1.0, 10: 0.74 / 0.85}
"""Blackwell's NVLS shares are Hopper's scaled by NCCL's nvlsEfficiency (tuning.cc: 0.85 Hopper, 0.74 Blackwell):
NVIDIA publishes no B200 NVLS figure yet."""

P2P_OF_LINK = Efficiency(335 / 450, "Azure's health checks pass an ND H100 v5 GPU-to-GPU copy over NVLink from 335 "
                                    "GB/s (AzNHC conf/nd96isr_h100_v5.conf, nvbandwidth), of the H100's 450 GB/s")
"""Point-to-point over NVLink (sendrecv, all_to_all on one node), as a share of the link's signaling rate."""

TREE_NCCL = Efficiency(0.92 / 2, "NCCL's tuning.cc: tree bandwidth × 0.92, and its bus-to-algorithm ratio 0.5 "
                                 "(the tree carries each byte up and down its channel) where the ring's is n/(2(n-1))")
"""A (non-NVLS) tree all-reduce's algorithm bandwidth per unit of channel bandwidth, by NCCL's own model."""


def nvlink_share(capability: tuple[int, int], signaling_gbps: float, nccl_gbps: float) -> Efficiency:
    """NVLink's healthy share: NCCL's effective per-link rate over the signaling rate (H100: 20.6 of 25; an 8 × H100
    ring then reaches 18 × 20.6 = 371 GB/s, NVIDIA's 'about 370 without NVLS' on nccl-tests#212)."""
    major, minor = capability
    return Efficiency(nccl_gbps / signaling_gbps, f"NCCL's topo.h NVLink rate for SM{major}{minor}, {nccl_gbps:g} "
                                                  f"GB/s per link, over its signaling rate {signaling_gbps:g}")


def nvls_share(base: Efficiency, compute_major: int) -> Efficiency | None:
    """An NVLS share for this architecture, None before Hopper (no NVLS)."""
    scale = NVLS_ARCHITECTURE.get(min(compute_major, 10)) if compute_major >= 9 else None
    if scale is None:
        return None
    if scale == 1.0:
        return base
    return Efficiency(base.share * scale, f"{base.source}; × 0.74/0.85 for Blackwell (NCCL's nvlsEfficiency)")
