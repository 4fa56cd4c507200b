"""Facts from NCCL's own topology dump (NCCL_TOPO_DUMP_FILE=topo.xml, written when a communicator starts): the
GPUs with their compute capability, NVLink links and PCIe link, and the NICs with their speed, read as NCCL reads
them (src/graph/topo.cc, src/graph/xml.cc)."""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree

from commbench.errors import CommbenchError
from commbench.expect.facts import MachineFacts

NVSWITCH_CLASS = "0x068000"
"""An <nvlink tclass=...> ending at a PCI bridge: an NVSwitch (a GPU's is 0x030200)."""
_GENERATION = {"2.5": 1, "5": 2, "5.0": 2, "8": 3, "8.0": 3, "16": 4, "16.0": 4, "32": 5, "32.0": 5, "64": 6,
               "64.0": 6}
"""link_speed "32.0 GT/s PCIe" → PCIe generation (NCCL's kvDictPciGen)."""




def facts_from_topology(text: str, *, name: str, source: str) -> MachineFacts:
    """The facts of the node an NCCL topology dump describes (the first GPU's links stand for every GPU's)."""
    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError as error:
        raise CommbenchError(f"{source} is not well-formed XML ({error}); pass the file NCCL_TOPO_DUMP_FILE "
                             "wrote") from None
    parents = {child: parent for parent in root.iter() for child in parent}
    gpus = list(root.iter("gpu"))
    if root.tag != "system" or not gpus:
        raise CommbenchError(f"{source} holds no <gpu> of an NCCL topology; pass the file NCCL_TOPO_DUMP_FILE wrote")
    first = gpus[0]
    links = [link for link in first.iter("nvlink")]
    pci = parents.get(first)
    generation = width = None
    if pci is not None and pci.tag == "pci":
        generation = _GENERATION.get(pci.get("link_speed", "").split(" ")[0])
        width = int(pci.get("link_width") or 0) or 16  # NCCL: a width of 0 (not read from /sys) counts as 16
    nics = tuple(int(net.get("speed") or 0) / 1000 for net in root.iter("net") if int(net.get("speed") or 0) > 0)
    nics = tuple(sorted(nics, reverse=True)[:len(gpus)])  # one NIC per GPU at most, as NCCL pairs them
    sm = int(first.get("sm") or 0)
    nvswitch = any(link.get("tclass") == NVSWITCH_CLASS for link in links)
    return MachineFacts(
        name=name, gpu=None, compute_capability=(sm // 10, sm % 10) if sm else None, gpus_per_node=len(gpus),
        nvlink_links=sum(int(link.get("count") or 0) for link in links), nvswitch=nvswitch,
        nvls=nvswitch and sm >= 90, pcie_gen=generation, pcie_width=width if generation else None, nic_gbits=nics,
        sources=(f"{source}: NCCL's topology dump (<gpu sm>, <nvlink count tclass>, <pci link_speed link_width>, "
                 "<net speed> in Mb/s)",))

