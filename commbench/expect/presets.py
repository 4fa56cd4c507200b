"""Named machines (`commbench expect --machine NAME`, `commbench import --machine NAME`): each one's facts as its
vendor publishes them, with the sources, and the published busbw figures a user can hold a measurement against."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from commbench.errors import CommbenchError
from commbench.expect.facts import MachineFacts

DGX_A100 = "https://docs.nvidia.com/dgx/dgxa100-user-guide/introduction-to-dgxa100.html"
DGX_H100 = "https://docs.nvidia.com/dgx/dgxh100-user-guide/introduction-to-dgxh100.html"
DGX_H200 = "https://www.nvidia.com/en-us/data-center/dgx-h200/"
DGX_B200 = "https://docs.nvidia.com/dgx/dgxb200-user-guide/introduction-to-dgxb200.html"
A100_NVLINK = "A100: 12 third-generation NVLink links per GPU (NVIDIA A100 Tensor Core GPU Architecture whitepaper)"
H100_NVLINK = "H100/H200 SXM: 18 fourth-generation NVLink links per GPU (NVIDIA H100 Tensor Core GPU whitepaper)"
B200_NVLINK = "B200: 18 fifth-generation NVLink links per GPU (NVIDIA Blackwell architecture technical brief)"


def _facts(name: str, **values: Any) -> MachineFacts:
    """A preset's facts; values: MachineFacts' other fields by name, as many types as it has fields."""
    return MachineFacts(name=name, **values)


PRESETS: dict[str, MachineFacts] = {facts.name: facts for facts in (
    _facts("dgx-a100", gpu="NVIDIA A100-SXM4-80GB", compute_capability=(8, 0), gpus_per_node=8, nvlink_links=12,
           nvswitch=True, pcie_gen=4, pcie_width=16, nic_gbits=(200.0,) * 8,
           sources=(DGX_A100 + ": 8 A100, 6 NVSwitches, 8 single-port ConnectX-6 200 Gb/s HDR for compute",
                    A100_NVLINK)),
    _facts("dgx-h100", gpu="NVIDIA H100 80GB HBM3", compute_capability=(9, 0), gpus_per_node=8, nvlink_links=18,
           nvswitch=True, nvls=True, pcie_gen=5, pcie_width=16, nic_gbits=(400.0,) * 8,
           sources=(DGX_H100 + ": 8 H100 SXM5, 4 NVSwitches, 8 ConnectX-7 400 Gb/s NDR (OSFP) for compute",
                    H100_NVLINK)),
    _facts("dgx-h200", gpu="NVIDIA H200", compute_capability=(9, 0), gpus_per_node=8, nvlink_links=18,
           nvswitch=True, nvls=True, pcie_gen=5, pcie_width=16, nic_gbits=(400.0,) * 8,
           sources=(DGX_H200 + ": 8 H200 SXM, 4 NVSwitches, 8 ConnectX-7 400 Gb/s", H100_NVLINK)),
    _facts("dgx-b200", gpu="NVIDIA B200", compute_capability=(10, 0), gpus_per_node=8, nvlink_links=18,
           nvswitch=True, nvls=True, pcie_gen=5, pcie_width=16, nic_gbits=(400.0,) * 8,
           sources=(DGX_B200 + ": 8 B200, 2 NVLink switch chips, 8 ConnectX-7 400 Gb/s (4 OSFP ports)",
                    B200_NVLINK)),
    _facts("azure-nd-h100-v5", gpu="NVIDIA H100 80GB HBM3", compute_capability=(9, 0), gpus_per_node=8,
           nvlink_links=18, nvswitch=True, nvls=True, pcie_gen=5, pcie_width=16, nic_gbits=(400.0,) * 8,
           sources=("https://learn.microsoft.com/en-us/azure/virtual-machines/sizes/gpu-accelerated/ndh100v5-series: "
                    "8 H100 SXM with NVLink 4.0, 8 × 400 Gb/s NDR InfiniBand, one per GPU", H100_NVLINK)),
    _facts("azure-nd-h200-v5", gpu="NVIDIA H200", compute_capability=(9, 0), gpus_per_node=8, nvlink_links=18,
           nvswitch=True, nvls=True, pcie_gen=5, pcie_width=16, nic_gbits=(400.0,) * 8,
           sources=("https://learn.microsoft.com/en-us/azure/virtual-machines/sizes/gpu-accelerated/nd-h200-v5-series: "
                    "8 H200 with NVLink 4.0, 8 × 400 Gb/s NDR InfiniBand", H100_NVLINK)),
    _facts("azure-nd-a100-v4", gpu="NVIDIA A100-SXM4-40GB", compute_capability=(8, 0), gpus_per_node=8,
           nvlink_links=12, nvswitch=True, pcie_gen=4, pcie_width=16, nic_gbits=(200.0,) * 8,
           sources=("https://learn.microsoft.com/en-us/azure/virtual-machines/sizes/gpu-accelerated/"
                    "ndasra100v4-series: 8 A100 40 GB with NVLink 3.0, 8 × 200 Gb/s HDR InfiniBand", A100_NVLINK)),
    _facts("aws-p4d", gpu="NVIDIA A100-SXM4-40GB", compute_capability=(8, 0), gpus_per_node=8, nvlink_links=12,
           nvswitch=True, pcie_gen=4, pcie_width=16, nic_gbits=(100.0,) * 4,
           sources=("https://aws.amazon.com/ec2/instance-types/p4/: p4d.24xlarge, 8 A100 40 GB with NVSwitch, "
                    "400 Gb/s EFA (4 × 100 Gb/s)", A100_NVLINK)),
    _facts("aws-p5", gpu="NVIDIA H100 80GB HBM3", compute_capability=(9, 0), gpus_per_node=8, nvlink_links=18,
           nvswitch=True, nvls=True, pcie_gen=5, pcie_width=16, nic_gbits=(100.0,) * 32,
           sources=("https://aws.amazon.com/ec2/instance-types/p5/: p5.48xlarge, 8 H100 with NVSwitch, 3200 Gb/s "
                    "EFA (32 × 100 Gb/s)", H100_NVLINK)),
    _facts("gcp-a3-mega", gpu="NVIDIA H100 80GB HBM3", compute_capability=(9, 0), gpus_per_node=8, nvlink_links=18,
           nvswitch=True, nvls=True, pcie_gen=5, pcie_width=16, nic_gbits=(200.0,) * 8,
           sources=("https://cloud.google.com/compute/docs/gpus#a3-series: a3-megagpu-8g, 8 H100 with NVSwitch, "
                    "8 GPU NICs of 200 Gb/s (GPUDirect-TCPXO)", H100_NVLINK)),
    _facts("dgx-2", gpu="Tesla V100-SXM3-32GB", compute_capability=(7, 0), gpus_per_node=16, nvlink_links=6,
           nvswitch=True, pcie_gen=3, pcie_width=16, nic_gbits=(100.0,) * 8,
           sources=("https://docs.nvidia.com/dgx/dgx2-user-guide/introduction-to-dgx2.html: 16 V100 SXM3, 12 "
                    "NVSwitches, 8 × 100 Gb/s EDR InfiniBand / 100 GbE",
                    "V100: 6 second-generation NVLink links per GPU (NVIDIA Tesla V100 GPU Architecture whitepaper)")),
    _facts("hgx-h100-pcie", gpu="NVIDIA H100 PCIe", compute_capability=(9, 0), gpus_per_node=8, pcie_gen=5,
           pcie_width=16,
           sources=("https://www.nvidia.com/en-us/data-center/h100/: H100 PCIe, PCIe Gen5 x16; its NVLink bridges "
                    "join two cards (600 GB/s both ways), so a ring over 8 GPUs crosses PCIe: the model takes PCIe",
                    "the NICs of such servers vary: none listed (pass --facts for a real one)")),
    _facts("pcie-rtx-2080ti", gpu="NVIDIA GeForce RTX 2080 Ti", compute_capability=(7, 5), gpus_per_node=2,
           pcie_gen=3, pcie_width=16,
           sources=("https://www.nvidia.com/en-us/geforce/graphics-cards/compare/?section=compare-20: PCIe 3.0 x16; "
                    "two cards without an NVLink bridge",)),
    _facts("h200-1", gpu="NVIDIA H200", compute_capability=(9, 0), gpus_per_node=1, pcie_gen=5, pcie_width=16,
           sources=("tests/data/gpu/h200-1: one H200 in a VM, NVML: PCIe gen5 x16, NVLink NOT_SUPPORTED",)),
)}
"""Vendor-published facts per node. Rates the vendor gives per port count; each NIC here is one port NCCL uses."""


@dataclass(frozen=True)
class Published:
    """A busbw figure someone published for a machine, with where."""

    machine: str
    collective: str
    nodes: int
    size_bytes: int | None
    busbw_gbps: float
    kind: str
    """'floor' (a health check's pass mark), 'measured' (a result), 'statement' (a maintainer's figure)."""
    source: str


PUBLISHED = (
    Published("azure-nd-h100-v5", "all_reduce", 1, 16 * 1024**3, 460.0, "floor",
              "Azure/azurehpc-health-checks@0611432 conf/nd96isr_h100_v5.conf: check_nccl_allreduce 460.0 ... 16G"),
    Published("azure-nd-h200-v5", "all_reduce", 1, 16 * 1024**3, 431.0, "floor",
              "Azure/azurehpc-health-checks@13fa400 conf/nd96isr_h200_v5.conf: check_nccl_allreduce 431.0 1 16G"),
    Published("azure-nd-a100-v4", "all_reduce", 1, 8 * 1024**3, 228.0, "floor",
              "Azure/azurehpc-health-checks@1200952 conf/nd96asr_v4.conf: check_nccl_allreduce 228.0 10 ... 8G"),
    Published("dgx-h100", "all_reduce", 1, None, 480.0, "statement",
              "NVIDIA/nccl-tests#212: H100 about 480 GB/s with NVLS"),
    Published("dgx-h100", "all_reduce", 1, None, 370.0, "statement",
              "NVIDIA/nccl-tests#212: H100 about 370 GB/s without NVLS (NCCL_NVLS_ENABLE=0)"),
    Published("azure-nd-h200-v5", "all_reduce", 1, 8 * 1024**3, 480.0, "measured",
              "Azure/AI-benchmarking-guide ND_H200_v5_results.md: all_reduce 8 GB"),
    Published("dgx-h100", "all_reduce", 1, None, 478.0, "statement",
              "NVIDIA/nccl-tests#290: 476-480 GB/s on 8 H100 with NVLS, 'in the expected range' (NVIDIA)"),
    Published("dgx-h100", "all_reduce", 2, None, 375.0, "statement",
              "GTC'24 S62129, quoted in NVIDIA/nccl#1649: NVLS+Tree all-reduce 370-380 GB/s across 8 × H100 nodes "
              "with 8 × 400 Gb/s NDR"),
)
"""Figures with sources (../shared/notes/anchors-next.md). NVIDIA publishes no table of expected busbw."""


def preset(name: str) -> MachineFacts:
    try:
        return PRESETS[name]
    except KeyError:
        raise CommbenchError(f"unknown --machine {name!r}; choose from {', '.join(PRESETS)}, or pass --facts FILE "
                             "written by `commbench env --json` on that machine") from None


_FAMILIES = (("dgx-h100", "azure-nd-h100-v5", "aws-p5", "gcp-a3-mega"), ("dgx-h200", "azure-nd-h200-v5"),
             ("dgx-a100", "azure-nd-a100-v4", "aws-p4d"))
"""Presets with the same node inside (GPUs, NVLink, NVSwitch): a single-node figure of one holds for the others."""


def published_for(machine: str, collective: str, nodes: int) -> list[Published]:
    """The published figures for a preset (the DGX and Azure names of one machine share theirs)."""
    # a family shares a node, not a network: figures across nodes belong to their own machine only
    names = next((family for family in _FAMILIES if machine in family), (machine,)) if nodes == 1 else (machine,)
    return [figure for figure in PUBLISHED
            if figure.machine in names and figure.collective == collective and figure.nodes == nodes]
