"""The busbw a healthy machine reaches with a collective at large messages, and the physical ceiling beside it,
from the machine's facts (expect/facts.py), with the terms both come from; and the latency floor NCCL's own model
gives.

The ceiling counts signaling rates (NVLink links × the link's rate, PCIe after line encoding, NICs at rate / 8); the
expected figure takes each link at its healthy share (expect/healthy.py: NCCL's effective rates from topo.h and
topo.cc, NDR's 46-48 GB/s per NIC, NVIDIA's published NVLS and NVLS-tree figures), one share per algorithm and
transport. The algorithm is the one NCCL would pick: the best healthy figure among those its version and the row's
environment allow (expect/nccl_choice.py). Bandwidths are GB/s one way; busbw is nccl-tests' (doc/PERFORMANCE.md).

- One node: a ring is bound by the GPU's link. NVLink SHARP (NVLS, NVSwitch with Hopper or newer) all-reduces with
  each GPU moving S(1 + 1/G) each way instead of 2S(G-1)/G: ceiling = link × 2(G-1)/(G+1).
- Across nodes (N nodes of G GPUs, NET = the node's NICs together): a ring crosses each node boundary once each way,
  so its busbw ≤ NET. A tree all-reduce sends S out of each node at two nodes and 2S from three on: ≤ NET × 2(n-1)/n
  at 2 nodes, NET × (n-1)/n beyond; NCCL's own model gives a plain tree half its channel rate (×0.92), so rings win
  it at large messages, while NVLS-tree keeps the network's two-node gain. NVLS-tree's intra-node part moves S(1 +
  1/G) per GPU on NVLink: ceiling link × G/(G+1) × 2(n-1)/n. all_to_all sends S(n-G)/n off each GPU: busbw ≤ NET ×
  (n-1) / (G(n-G)). A sendrecv crosses a node on one GPU's NIC.
- gloo on CPU: ranks on one host exchange over loopback TCP and reduce in host memory: busbw ≤ min(loopback, memory
  copy), both measured on the machine (facts); with more ranks than cores they share the cores.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from commbench.expect import healthy
from commbench.expect.facts import MachineFacts
from commbench.expect.nccl_choice import NVLS, NVLS_TREE, P2P, RING, TREE, NcclContext
from commbench.names import CPU, CUDA

NVLINK_GBPS = ((10, 50.0), (9, 25.0), (8.6, 14.0625), (8, 25.0), (7, 25.0), (6, 20.0))
"""NVLink signaling rate per link and direction by compute capability, the highest capability at or below the GPU's:
NVLink 1 (P100) 20 GB/s, 2 (V100) and 3 (A100) 25, the RTX 30 bridge (SM86) 112.5 GB/s over 4 links both ways,
4 (H100/H200) 25, 5 (B200) 50 (NVIDIA's architecture whitepapers: 160/300/600/900/1800 GB/s per GPU both ways)."""
NCCL_NVLINK_GBPS = ((10, 40.1), (9, 20.6), (8.6, 12.0), (8, 20.0), (7, 20.0), (6, 18.0))
"""NCCL's NVLink bandwidth per link (src/graph/topo.h SM100/SM90/SM86/SM80/SM70/SM60_NVLINK_BW), said beside."""
PCIE_GBPS_PER_LANE = {1: 0.25, 2: 0.5, 3: 8 * 128 / 130 / 8, 4: 16 * 128 / 130 / 8, 5: 32 * 128 / 130 / 8,
                      6: 64 * 242 / 256 / 8}
"""PCIe per lane and direction by generation: the transfer rate after line encoding (8b/10b to gen 2, 128b/130b gen
3-5, gen 6's FLIT 242/256): gen3 x16 15.75 GB/s, gen4 31.5, gen5 63."""
PCIE_100MBPS_PER_LANE = {1: 15, 2: 30, 3: 60, 4: 120, 5: 240, 6: 480}
"""NCCL's PCIe rate per lane in 100 Mb/s by generation (src/graph/topo.cc kvDictPciGen; GB/s = lanes × rate / 80),
said beside."""
NCCL_LL_LATENCY_US = {"base": {"tree": 6.8, "ring": 6.6},
                      "nvlink": {"tree": 0.6, "ring": 0.6}, "pci": {"tree": 1.0, "ring": 1.0},
                      "net": {"tree": 5.0, "ring": 2.7}}
"""NCCL's LL-protocol latencies in µs (src/graph/tuning.cc baseLatencies and hwLatencies[NVLINK/PCI/NET]), the
protocol NCCL uses for the smallest messages."""
NET_OVERHEAD_US = 1.0
"""NCCL's per-step network overhead on x86 Intel (getNetOverhead; 2.0 on AMD), a floor on an inter-node ring step."""

MODEL_DIFFERENCES = (
    "NCCL sizes channels and per-channel bandwidths by searching the topology (src/graph/search.cc); commbench takes "
    "the whole link (NVLink links × per-link rate, or PCIe) and the node's NICs together, at most one per GPU.",
    "NCCL's NVLS model (tuning.cc: channel bandwidth × nvlsEfficiency × 2 × (nChannels-1)/nChannels) reads about 590 "
    "GB/s on an 8 × H100 node, where NVIDIA's published healthy figure is 480: the expected NVLS and NVLS-tree figures "
    "take NVIDIA's published figures, scaled by the link's signaling rate.",
    "NCCL derates LL and LL128 (×0.5, ×0.92); the figures are the Simple protocol's at large messages.",
    "NCCL picks an algorithm by its own model's time at each size; commbench takes the best healthy figure at large "
    "messages among the algorithms NCCL's version and NCCL_ALGO / NCCL_NVLS_ENABLE allow. Whether the GPUs support "
    "multicast (NVLS needs the fabric manager's multicast, and VMs may lack it) is not read: NCCL falls back to "
    "NVLS-less algorithms there, and the row reads below expected.",
    "The latency floor is NCCL's LL latency for the algorithm with the lowest one, without the graph's measured "
    "inter-node latency (unknown from facts).",
)


@dataclass(frozen=True)
class Term:
    """One input of the figure: its name, value and unit, and where it comes from."""

    name: str
    value: float
    unit: str
    source: str


@dataclass(frozen=True)
class Expectation:
    collective: str
    nodes: int
    ranks_per_node: int
    busbw_gbps: float | None
    algorithm: str | None = None
    bound: str | None = None
    """What limits the figure: NVLink, PCIe, network, loopback TCP, memory copy."""
    latency_us: float | None = None
    terms: tuple[Term, ...] = field(default=())
    why_none: str | None = None
    ceiling_gbps: float | None = None
    """The physical ceiling of the same algorithm (signaling rates, no efficiency): the expected figure is what a
    healthy machine reaches, this what no machine exceeds."""
    ceiling_bound: str | None = None
    ruled_out: tuple[str, ...] = ()
    """Algorithms the hardware has but this NCCL or the row's environment does not run, each with why."""

    @property
    def ranks(self) -> int:
        return self.nodes * self.ranks_per_node

    def to_json(self) -> dict:
        return {"collective": self.collective, "nodes": self.nodes, "ranks_per_node": self.ranks_per_node,
                "expected_busbw_gbps": self.busbw_gbps, "algorithm": self.algorithm, "bound": self.bound,
                "latency_floor_us": self.latency_us, "why_none": self.why_none,
                "ceiling_busbw_gbps": self.ceiling_gbps, "ceiling_bound": self.ceiling_bound,
                "ruled_out": list(self.ruled_out), "terms": [vars(term) for term in self.terms]}


def nvlink_gbps_per_link(capability: tuple[int, int], table: tuple[tuple[float, float], ...] = NVLINK_GBPS) -> float:
    value = capability[0] + capability[1] / 10
    return next(gbps for at_least, gbps in table if value >= at_least) if value >= 6 else table[-1][1]


def pcie_gbps(generation: int, width: int) -> float:
    return width * PCIE_GBPS_PER_LANE[generation]


def nccl_pcie_gbps(generation: int, width: int) -> float:
    return width * PCIE_100MBPS_PER_LANE[generation] / 80


def gpu_link(facts: MachineFacts) -> Term | None:
    """The bandwidth a GPU has to the others in its node: NVLink links × per-link rate, else its PCIe link."""
    if facts.nvlink_links and facts.compute_capability:
        per_link = nvlink_gbps_per_link(facts.compute_capability)
        nccl = nvlink_gbps_per_link(facts.compute_capability, NCCL_NVLINK_GBPS)
        major, minor = facts.compute_capability
        return Term("NVLink", facts.nvlink_links * per_link, "GB/s",
                    f"{facts.nvlink_links} links × {per_link:g} GB/s (SM{major}{minor} signaling rate; NCCL's topo.h "
                    f"counts {nccl:g}: {facts.nvlink_links * nccl:.1f})")
    if facts.pcie_gen in PCIE_GBPS_PER_LANE and facts.pcie_width:
        nccl = nccl_pcie_gbps(facts.pcie_gen, facts.pcie_width)
        return Term("PCIe", pcie_gbps(facts.pcie_gen, facts.pcie_width), "GB/s",
                    f"gen{facts.pcie_gen} x{facts.pcie_width} after line encoding (NCCL's topo.cc counts "
                    f"{nccl:g})")
    return None


def network(facts: MachineFacts) -> Term | None:
    """The node's NICs together (NCCL: Mb/s / 8000 each)."""
    if not facts.nic_gbits:
        return None
    rates = facts.nic_gbits
    spelled = f"{len(rates)} × {rates[0]:g}" if len(set(rates)) == 1 else " + ".join(f"{rate:g}" for rate in rates)
    return Term("network", sum(rates) / 8, "GB/s", f"{spelled} Gb/s / 8 (NCCL: Mb/s / 8000)")


def expect(facts: MachineFacts, collective: str, *, nodes: int, ranks_per_node: int, device: str = CUDA,
           nccl: NcclContext | None = None) -> Expectation:
    """The busbw a healthy machine reaches at large messages with the algorithm NCCL would pick (the best healthy
    figure among the algorithms this NCCL and the row's environment allow), its physical ceiling, and the latency
    floor of one collective at this scope."""
    base = Expectation(collective, nodes, ranks_per_node, busbw_gbps=None)
    ranks = nodes * ranks_per_node
    if ranks < 2:
        return replace(base, why_none="one rank moves nothing between ranks")
    if device == CPU:
        return _expect_cpu(facts, base, nodes=nodes, ranks_per_node=ranks_per_node)
    if not facts.gpus_per_node:
        return replace(base, why_none=f"the facts of {facts.name} hold no GPUs")
    if ranks_per_node > facts.gpus_per_node:
        return replace(base, why_none=f"{ranks_per_node} ranks per node share "
                           f"{facts.gpus_per_node} GPU(s): the model has one rank per GPU")
    unknown = _unknown_link(facts)
    if unknown:
        return replace(base, why_none=unknown)
    link = gpu_link(facts)
    if link is None:
        return replace(base, why_none="the facts give neither NVLink links nor the PCIe link")
    net = network(facts) if nodes > 1 else None
    if nodes > 1 and net is None:
        return replace(base, why_none="the facts list no network adapters to cross nodes with")
    nccl = nccl or NcclContext()
    candidates = _candidates(facts, collective, link, net, nodes=nodes, per_node=ranks_per_node)
    ruled_out = tuple(f"{found.algorithm}: {why}" for found in candidates
                      if (why := nccl.allowed(found.algorithm, collective)))
    allowed = [found for found in candidates if not nccl.allowed(found.algorithm, collective)]
    if not allowed:
        return replace(base, why_none=f"no bandwidth model for {collective}" if not candidates else
                       f"no algorithm left for {collective} ({'; '.join(ruled_out)})", ruled_out=ruled_out)
    # at a tie the later candidate: NCCL's newer algorithm (NVLS-tree over tree) where the same link binds both
    _, best = max(enumerate(allowed), key=lambda found: (found[1].busbw_gbps, found[0]))
    healthy = _healthy_terms(facts, link, net)
    return replace(base, busbw_gbps=best.busbw_gbps, algorithm=best.algorithm, bound=best.bound,
                   ceiling_gbps=best.ceiling_gbps, ceiling_bound=best.ceiling_bound, ruled_out=ruled_out,
                   terms=(link, *((net,) if net else ()), *healthy, *best.terms),
                   latency_us=latency_floor_us(collective, link.name, nodes=nodes, per_node=ranks_per_node))


@dataclass(frozen=True)
class Candidate:
    """One algorithm NCCL has for the collective here: the busbw a healthy machine reaches with it and what bounds
    that, its physical ceiling and what bounds that, and the terms beyond the links."""

    algorithm: str
    busbw_gbps: float
    bound: str
    ceiling_gbps: float
    ceiling_bound: str
    terms: tuple[Term, ...] = ()


def _unknown_link(facts: MachineFacts) -> str | None:
    """Why the GPU's link cannot be known from these facts (NVML could not answer), or None: an unknown is said,
    never read as 0 links or as PCIe."""
    if facts.nvlink_links is None:
        return "NVML could not read the GPUs' NVLink links (unknown, not 0)"
    if facts.nvlink_links and not facts.compute_capability:
        return "NVML could not read the compute capability, which sets the NVLink rate"
    return None


def _healthy_terms(facts: MachineFacts, link: Term, net: Term | None) -> tuple[Term, ...]:
    """The healthy rates beside the signaling ones: the GPU's link and the network at their healthy shares."""
    share = _link_share(facts, link)
    found = [Term(f"healthy {link.name}", link.value * share.share, "GB/s", share.source)]
    if net is not None:
        found.append(Term("healthy network", net.value * healthy.NETWORK.share, "GB/s", healthy.NETWORK.source))
    return tuple(found)


def _link_share(facts: MachineFacts, link: Term) -> healthy.Efficiency:
    if link.name == "NVLink" and facts.compute_capability:
        return healthy.nvlink_share(facts.compute_capability, nvlink_gbps_per_link(facts.compute_capability),
                                    nvlink_gbps_per_link(facts.compute_capability, NCCL_NVLINK_GBPS))
    if facts.pcie_gen in PCIE_100MBPS_PER_LANE and facts.pcie_width:
        share = nccl_pcie_gbps(facts.pcie_gen, facts.pcie_width) / pcie_gbps(facts.pcie_gen, facts.pcie_width)
        return healthy.Efficiency(share, f"NCCL's topo.cc PCIe gen{facts.pcie_gen} rate over the rate after line "
                                         "encoding")
    return healthy.Efficiency(1.0, "no healthy share known for this link: its ceiling")


def _candidates(facts: MachineFacts, collective: str, link: Term, net: Term | None, *, nodes: int,
                per_node: int) -> list[Candidate]:
    ranks = nodes * per_node
    link_ok = link.value * _link_share(facts, link).share
    p2p_ok = link.value * healthy.P2P_OF_LINK.share if link.name == "NVLink" else link_ok
    net_ok = net.value * healthy.NETWORK.share if net else None
    nvls = _nvls_shares(facts, link, per_node) if collective == "all_reduce" else None
    if net is None or net_ok is None:  # one node
        if collective in ("all_to_all", "sendrecv"):
            return [Candidate(P2P, p2p_ok, link.name, link.value, link.name)]
        found = [Candidate(RING, link_ok, link.name, link.value, link.name)]
        if nvls:
            ceiling = link.value * 2 * (per_node - 1) / (per_node + 1)
            term = Term("NVLS ceiling", ceiling, "GB/s", f"link × 2(G-1)/(G+1), G = {per_node}: each GPU moves "
                        "S(1 + 1/G) each way with multicast")
            found.append(Candidate(NVLS, ceiling * nvls[0].share, "NVLS", ceiling, "NVLS",
                                   (term, Term("NVLS share", nvls[0].share, "of the ceiling", nvls[0].source))))
        return found
    ring = _bounded(RING, [(link_ok, link.name), (net_ok, "network")],
                    [(link.value, link.name), (net.value, "network")])
    if collective == "all_reduce":
        tree_net = net.value * 2 * (ranks - 1) / ranks / (1 if nodes == 2 else 2)
        # n is the rank count, not the node count: a reader who takes it for 2 nodes computes NET, not 2 × NET × 15/16
        tree_term = Term("tree over the network", tree_net, "GB/s",
                         f"NET × 2(n-1)/n, n = {ranks} ranks: each node sends S out at 2 nodes" if nodes == 2 else
                         f"NET × (n-1)/n, n = {ranks} ranks: each node sends 2S out from 3 nodes on")
        channel = min(link_ok, net_ok)  # a tree channel runs at the ring's channel rate (NCCL: bwIntra at 2 nodes)
        tree_ok = healthy.TREE_NCCL.share * 2 * (ranks - 1) / ranks * channel
        found = [ring, Candidate(TREE, tree_ok, "network" if net_ok <= link_ok else link.name,
                                 *_least([(link.value, link.name), (tree_net, "network")]),
                                 (tree_term, Term("tree share", healthy.TREE_NCCL.share, "of the channel rate",
                                                  healthy.TREE_NCCL.source)))]
        if nvls:
            # the NVLS part at n ranks: each GPU moves S(1 + 1/G) each way on NVLink, busbw counts 2(n-1)/n
            nvls_ceiling = link.value * per_node / (per_node + 1) * 2 * (ranks - 1) / ranks
            intra_ok = link.value * nvls[1].share
            found.append(Candidate(NVLS_TREE, *_least([(intra_ok, "NVLS-tree"), (tree_net * healthy.NETWORK.share,
                                                                                "network")]),
                                   *_least([(nvls_ceiling, "NVLS"), (tree_net, "network")]),
                                   (tree_term, Term("NVLS-tree intra-node", intra_ok, "GB/s", nvls[1].source))))
        return found
    if collective == "all_to_all":
        off_node = net.value * (ranks - 1) / (per_node * (ranks - per_node))
        term = Term("all-to-all over the network", off_node, "GB/s",
                    f"NET × (n-1) / (G(n-G)), n = {ranks} ranks, G = {per_node} per node: S(n-G)/n leaves each GPU")
        return [_bounded(P2P, [(p2p_ok, link.name), (off_node * healthy.NETWORK.share, "network")],
                         [(link.value, link.name), (off_node, "network")], (term,))]
    if collective == "sendrecv":
        one_nic = max(facts.nic_gbits) / 8
        term = Term("one NIC", one_nic, "GB/s", f"{max(facts.nic_gbits):g} Gb/s / 8: one GPU's send leaves the node")
        return [_bounded(P2P, [(p2p_ok, link.name), (one_nic * healthy.NETWORK.share, "network")],
                         [(link.value, link.name), (one_nic, "network")], (term,))]
    if collective in ("all_gather", "reduce_scatter", "broadcast", "reduce"):
        return [ring]
    return []


def _least(limits: list[tuple[float, str]]) -> tuple[float, str]:
    value, bound = min(limits)
    return value, bound


def _bounded(algorithm: str, healthy_limits: list[tuple[float, str]], ceilings: list[tuple[float, str]],
             terms: tuple[Term, ...] = ()) -> Candidate:
    return Candidate(algorithm, *_least(healthy_limits), *_least(ceilings), terms)


def _nvls_shares(facts: MachineFacts, link: Term, per_node: int) -> tuple[healthy.Efficiency,
                                                                          healthy.Efficiency] | None:
    """(NVLS's share of its ceiling, NVLS-tree's intra-node share of the link) where the node has NVLS, else None."""
    if not (facts.nvls and facts.compute_capability and link.name == "NVLink" and per_node >= 2):
        return None
    single = healthy.nvls_share(healthy.NVLS_OF_CEILING, facts.compute_capability[0])
    tree = healthy.nvls_share(healthy.NVLS_TREE_OF_LINK, facts.compute_capability[0])
    return (single, tree) if single and tree else None


def latency_floor_us(collective: str, link: str, *, nodes: int, per_node: int) -> float | None:
    """NCCL's LL latency (tuning.cc) of the ring, and of the tree for all_reduce, whichever is lower."""
    if collective in ("all_to_all", "sendrecv"):
        return None  # NCCL's tuning model times collectives, not point-to-point
    ranks = nodes * per_node
    nsteps = 2 * (ranks - 1) if collective == "all_reduce" else ranks - 1 \
        if collective in ("all_gather", "reduce_scatter") else ranks
    hw = "nvlink" if link == "NVLink" else "pci"
    lat = NCCL_LL_LATENCY_US
    intra = max(lat[hw]["ring"], NET_OVERHEAD_US if nodes > 1 else 0.0)
    inter_steps = 0 if nodes == 1 else 2 * (nodes - 1) if collective == "all_reduce" else nodes - 1
    ring = lat["base"]["ring"] + (nsteps - inter_steps) * intra + inter_steps * lat["net"]["ring"]
    if collective != "all_reduce":
        return ring
    inter_tree = lat["net"]["tree"] if nodes > 1 else 0.0
    tree = lat["base"]["tree"] + 2 * ((per_node - 1) * lat[hw]["tree"] + int(math.log2(nodes)) * inter_tree)
    return min(ring, tree)


def _expect_cpu(facts: MachineFacts, base: Expectation, *, nodes: int, ranks_per_node: int) -> Expectation:
    if collective_without_cpu_model(base.collective):
        return replace(base, why_none=f"no gloo model for {base.collective}")
    terms: list[Term] = []
    if facts.memcpy_gbps:
        terms.append(Term("memory copy", facts.memcpy_gbps, "GB/s", "measured: a large numpy copy on this host"))
    if nodes == 1 and facts.loopback_gbps:
        share = min(1.0, (facts.cpu_cores or ranks_per_node) / ranks_per_node)
        terms.append(Term("loopback TCP", facts.loopback_gbps * share, "GB/s",
                          "measured: 2 processes in a TCP ring on 127.0.0.1, per stream" +
                          (f", × {share:.2f} for {ranks_per_node} ranks on {facts.cpu_cores} cores"
                           if share < 1 else "")))
    if nodes > 1:
        net = network(facts)
        if net is None:
            return replace(base, why_none="the facts list no network adapters")
        terms.append(net)
    if not terms:
        return replace(base, why_none="the facts hold no measured copy or loopback rate; "
                           "record them with `commbench env --json` on the machine")
    bound = min(terms, key=lambda term: term.value)
    # the terms are measured on the machine: what it reached is both its healthy figure and its ceiling
    return replace(base, busbw_gbps=bound.value, algorithm="gloo ring", bound=bound.name, ceiling_gbps=bound.value,
                   ceiling_bound=bound.name, terms=tuple(terms))


def collective_without_cpu_model(collective: str) -> bool:
    return collective not in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all",
                              "sendrecv")
