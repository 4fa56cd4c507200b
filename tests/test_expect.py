"""The expected-bandwidth model (commbench/expect) on facts recorded from real machines (tests/data/topology,
tests/data/gpu/h200-1: NCCL topology dumps and nvidia-smi output, with their sources): each expected figure equals
the arithmetic written out here: the ceiling from signaling rates, the expected figure from the healthy shares
(expect/healthy.py: NCCL's topo.h and tuning.cc, NVIDIA's published NVLS and NVLS-tree figures)."""

import json
import re
from pathlib import Path

import pytest

from commbench.errors import CommbenchError
from commbench.expect import read_facts
from commbench.expect.facts import MachineFacts
from commbench.expect.model import NCCL_NVLINK_GBPS, expect, nccl_pcie_gbps, nvlink_gbps_per_link, pcie_gbps
from commbench.expect.presets import PRESETS, PUBLISHED
from tests.refusals import assert_refused, invoke
from tests.test_trace_analysis import GPU_TRACES, needs_gpu_traces

DATA = Path(__file__).parent / "data"
TOPOLOGY = DATA / "topology"


CAPABILITIES = [(6, 0), (7, 0), (8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (12, 0)]


@pytest.mark.no_process
def test_link_rates_are_the_signaling_rates_and_nccls_are_said_beside():
    """Per link and direction: NVLink 1 20 GB/s, 2-4 25 (SM86's bridge 112.5 GB/s over 4 links both ways), 5 50;
    PCIe after line encoding. NCCL's topo.h: SM60 18, SM70 20, SM80 20, SM86 12, SM90 20.6, SM100 40.1."""
    assert [nvlink_gbps_per_link(cc) for cc in CAPABILITIES] == [20.0, 25.0, 25.0, 14.0625, 14.0625, 25.0, 50.0, 50.0]
    assert [nvlink_gbps_per_link(cc, NCCL_NVLINK_GBPS) for cc in CAPABILITIES] == \
        [18.0, 20.0, 20.0, 12.0, 12.0, 20.6, 40.1, 40.1]
    assert pcie_gbps(3, 16) == pytest.approx(16 * 8 * 128 / 130 / 8)  # 15.75 GB/s
    assert pcie_gbps(5, 16) == pytest.approx(16 * 32 * 128 / 130 / 8) and pcie_gbps(5, 8) == pcie_gbps(4, 16)
    assert (nccl_pcie_gbps(3, 16), nccl_pcie_gbps(4, 16), nccl_pcie_gbps(5, 16)) == (12.0, 24.0, 48.0)


@pytest.mark.no_process
def test_an_h100_node_from_its_nccl_topology_dump():
    """IBM Cloud gx3d H100 (NCCL_TOPO_DUMP_FILE): 8 GPUs, sm 90, 5+5+4+4 links to 4 NVSwitches, 8 NICs of 200 Gb/s."""
    facts = read_facts(TOPOLOGY / "ibm-cloud-gx3d-h100_nccl-topo.xml")
    assert (facts.gpus_per_node, facts.compute_capability, facts.nvlink_links, facts.nvswitch, facts.nvls) == \
        (8, (9, 0), 18, True, True)
    assert (facts.pcie_gen, facts.pcie_width, facts.nic_gbits) == (5, 16, (200.0,) * 8)  # width 0 counts as 16
    link = 18 * 25.0
    one = {c: expect(facts, c, nodes=1, ranks_per_node=8) for c in ("all_reduce", "all_gather", "all_to_all")}
    assert one["all_reduce"].ceiling_gbps == pytest.approx(link * 2 * 7 / 9)  # NVLS multicast: 700
    assert one["all_reduce"].busbw_gbps == pytest.approx(480)  # NVIDIA's healthy NVLS figure on 8 H100
    assert one["all_reduce"].algorithm == "nvls"
    assert one["all_gather"].ceiling_gbps == pytest.approx(link) and one["all_gather"].algorithm == "ring"
    assert one["all_gather"].busbw_gbps == pytest.approx(18 * 20.6)  # NCCL's topo.h rate per link
    assert one["all_to_all"].busbw_gbps == pytest.approx(335)  # AzNHC's NVLink copy floor, 335 of 450
    assert one["all_reduce"].latency_us == pytest.approx(min(6.6 + 14 * 0.6, 6.8 + 2 * 7 * 0.6))  # LL ring / tree
    net = 8 * 200 / 8
    two = {c: expect(facts, c, nodes=2, ranks_per_node=8) for c in ("all_reduce", "all_gather", "all_to_all",
                                                                      "sendrecv")}
    assert two["all_reduce"].ceiling_gbps == pytest.approx(net * 2 * 15 / 16)  # the tree's network: 375
    assert two["all_reduce"].busbw_gbps == pytest.approx(net * 2 * 15 / 16 * 0.94)  # NDR's 47 of 50 GB/s
    assert (two["all_reduce"].algorithm, two["all_reduce"].bound) == ("nvls_tree", "network")
    assert two["all_gather"].ceiling_gbps == pytest.approx(net)  # a ring crosses each node once: 200
    assert two["all_gather"].busbw_gbps == pytest.approx(net * 0.94)
    assert two["all_to_all"].ceiling_gbps == pytest.approx(net * 15 / (8 * 8))
    assert two["sendrecv"].ceiling_gbps == pytest.approx(200 / 8)
    assert two["all_reduce"].latency_us == pytest.approx(min(6.6 + 28 * 1.0 + 2 * 2.7 - 2 * 1.0,
                                                             6.8 + 2 * (7 * 0.6 + 1 * 5.0)))


@pytest.mark.no_process
def test_an_a100_node_from_its_nccl_topology_dump():
    """SimAI's 8 × A100 SXM4 dump: sm 80, 6 NVSwitches × 2 links, PCIe gen4 x16, 5 NICs of 200 Gb/s; no NVLS."""
    facts = read_facts(TOPOLOGY / "a100-sxm4-80gb-8gpu_nccl-topo.xml")
    assert (facts.gpus_per_node, facts.compute_capability, facts.nvlink_links, facts.nvls) == (8, (8, 0), 12, False)
    one = expect(facts, "all_reduce", nodes=1, ranks_per_node=8)
    assert (one.ceiling_gbps, one.busbw_gbps, one.algorithm, one.bound) == (12 * 25.0, 12 * 20.0, "ring", "NVLink")
    two = expect(facts, "all_reduce", nodes=2, ranks_per_node=8)
    # NCCL's model halves a plain tree's channel rate (×0.92): the ring over the network is the healthy pick
    assert two.busbw_gbps == pytest.approx(5 * 200 / 8 * 0.94) and two.algorithm == "ring"
    assert expect(facts, "reduce_scatter", nodes=2, ranks_per_node=8).ceiling_gbps == pytest.approx(5 * 200 / 8)


@pytest.mark.no_process
def test_a_tree_all_reduce_across_two_a100_nodes_is_its_share_of_the_channel_times_2_n_minus_1_over_n():
    """NCCL_ALGO=Tree: NCCL's tree share (0.92 / 2) × the busbw factor 2(n−1)/n at n = 16 ranks × the channel, the
    healthy network (5 NICs × 200 Gb/s / 8 × 0.94) being below the healthy NVLink (240 GB/s)."""
    from commbench.expect.nccl_choice import NcclContext

    facts = read_facts(TOPOLOGY / "a100-sxm4-80gb-8gpu_nccl-topo.xml")
    tree = expect(facts, "all_reduce", nodes=2, ranks_per_node=8, nccl=NcclContext(env={"NCCL_ALGO": "Tree"}))
    assert tree.algorithm == "tree"
    assert tree.busbw_gbps == pytest.approx(0.92 / 2 * 2 * 15 / 16 * (5 * 200 / 8 * 0.94))


@pytest.mark.no_process
def test_one_h200_in_a_vm_from_its_own_dump():
    """This project's H200-1: one GPU on PCIe gen5 (the VM reports width 0), no NVLink, one 10 Gb/s eth0."""
    facts = read_facts(DATA / "gpu" / "h200-1" / "nccl-topo.xml")
    assert (facts.gpus_per_node, facts.nvlink_links, facts.pcie_gen, facts.nic_gbits) == (1, 0, 5, (10.0,))
    assert expect(facts, "all_reduce", nodes=1, ranks_per_node=1).why_none == "one rank moves nothing between ranks"
    across = expect(facts, "all_reduce", nodes=2, ranks_per_node=1)
    assert across.ceiling_gbps == pytest.approx(min(16 * 32 * 128 / 130 / 8, 10 / 8))
    assert across.busbw_gbps == pytest.approx(10 / 8 * 0.94) and across.bound == "network"
    assert expect(facts, "all_reduce", nodes=1, ranks_per_node=2).why_none.startswith("2 ranks per node share 1 GPU")


@pytest.mark.no_process
def test_the_dgx_a100_preset_agrees_with_a_real_dgx_a100():
    """gengwg/cheatsheets' DGX A100 `nvidia-smi topo -m`: every pair of the 8 GPUs is NV12."""
    text = (TOPOLOGY / "dgx-a100_nvidia-smi-topo.txt").read_text()
    gpu_rows = [line.split("\t") for line in text.splitlines() if re.match(r"GPU\d\t", line)]
    links = {cell.strip() for row in gpu_rows for cell in row[1:9] if cell.strip() != "X"}
    assert len(gpu_rows) == 8 and links == {"NV12"}
    preset = PRESETS["dgx-a100"]
    assert (preset.gpus_per_node, preset.nvlink_links) == (8, 12)
    assert expect(preset, "all_reduce", nodes=1, ranks_per_node=8).ceiling_gbps == 12 * 25.0


@pytest.mark.no_process
def test_the_h100_presets_agree_with_a_real_h100_dump():
    dump = read_facts(TOPOLOGY / "ibm-cloud-gx3d-h100_nccl-topo.xml")
    for name in ("dgx-h100", "azure-nd-h100-v5", "aws-p5", "gcp-a3-mega"):
        preset = PRESETS[name]
        assert (preset.compute_capability, preset.nvlink_links, preset.nvswitch, preset.nvls, preset.gpus_per_node) \
            == (dump.compute_capability, dump.nvlink_links, dump.nvswitch, dump.nvls, dump.gpus_per_node), name


@pytest.mark.no_process
def test_published_figures_meet_the_expected_figure_and_floors_lie_below_it():
    """A health check's floor is a pass mark under what a healthy node reaches; a published healthy figure lies
    within [0.85, 1.05] of the expected one (the H100 without NVLS under NCCL_NVLS_ENABLE=0, as it was measured)."""
    from commbench.expect.nccl_choice import NcclContext

    for figure in PUBLISHED:
        without_nvls = "without NVLS" in figure.source
        found = expect(PRESETS[figure.machine], figure.collective, nodes=figure.nodes, ranks_per_node=8,
                       nccl=NcclContext(env={"NCCL_NVLS_ENABLE": "0"} if without_nvls else {}))
        assert found.busbw_gbps is not None and found.ceiling_gbps >= found.busbw_gbps, figure
        if figure.kind == "floor":
            assert found.busbw_gbps >= figure.busbw_gbps, figure
        else:
            assert 0.85 <= figure.busbw_gbps / found.busbw_gbps <= 1.05, (figure, found.busbw_gbps)


@pytest.mark.no_process
def test_an_h100_node_and_two_meet_nvidias_published_figures():
    """One 8 × H100 node: 480 GB/s with NVLS (nccl-tests#290); 2 nodes × 8 over 8 × 400 Gb/s: NVLS-tree 370-380
    (GTC'24, NVIDIA/nccl#1649). Each within 10 %, and the ceiling beside it no lower."""
    one = expect(PRESETS["dgx-h100"], "all_reduce", nodes=1, ranks_per_node=8)
    two = expect(PRESETS["dgx-h100"], "all_reduce", nodes=2, ranks_per_node=8)
    assert one.busbw_gbps == pytest.approx(480, rel=0.10) and one.ceiling_gbps >= one.busbw_gbps
    assert two.busbw_gbps == pytest.approx(375, rel=0.10) and two.ceiling_gbps >= two.busbw_gbps
    assert (one.algorithm, two.algorithm) == ("nvls", "nvls_tree")


@pytest.mark.no_process
def test_the_cpu_model_is_the_slower_of_loopback_and_copy_shared_by_the_ranks():
    facts = MachineFacts(name="cpu", cpu_cores=2, memcpy_gbps=10.0, loopback_gbps=2.0)
    two = expect(facts, "all_reduce", nodes=1, ranks_per_node=2, device="cpu")
    assert (two.busbw_gbps, two.bound, two.algorithm) == (2.0, "loopback TCP", "gloo ring")
    assert expect(facts, "all_reduce", nodes=1, ranks_per_node=4, device="cpu").busbw_gbps == 2.0 * 2 / 4
    slow_copy = MachineFacts(name="cpu", cpu_cores=2, memcpy_gbps=1.0, loopback_gbps=2.0)
    assert expect(slow_copy, "all_gather", nodes=1, ranks_per_node=2, device="cpu").bound == "memory copy"
    assert expect(MachineFacts(name="cpu"), "all_reduce", nodes=1, ranks_per_node=2, device="cpu").why_none


def test_facts_round_trip_through_env_json(tmp_path):
    """`commbench env --json` holds the facts `expect --facts` reads; the host's rates are measured (above 0)."""
    result = invoke(["env", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(report))
    facts = read_facts(path)
    assert facts == MachineFacts.from_json(report["facts"])
    assert facts.memcpy_gbps > 0 and facts.loopback_gbps > 0 and facts.cpu_cores >= 1
    shown = invoke(["expect", "--facts", str(path), "--collective", "all_reduce", "--json"])
    assert shown.exit_code == 0, shown.output
    [row] = json.loads(shown.stdout)["expectations"]
    assert row["collective"] == "all_reduce" and (row["expected_busbw_gbps"] or row["why_none"])


@pytest.mark.no_process
def test_expect_prints_model_terms_published_figures_and_where_it_differs_from_nccl():
    result = invoke(["expect", "--machine", "dgx-h100", "--nodes", "2"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "expected busbw (GB/s)" in out and "latency floor (us)" in out
    assert "NVLink: 450.0 GB/s = 18 links × 25 GB/s (SM90 signaling rate; NCCL's topo.h counts 20.6: 370.8)" in out
    assert "nccl-tests#212" in out and "azurehpc-health-checks" in out
    assert "where this model differs from NCCL's" in out
    assert len([line for line in out.splitlines() if line.startswith("all_reduce ")]) == 2  # 1 node and 2 nodes
    listed = invoke(["expect", "--machine", "list"])
    assert listed.exit_code == 0 and all(name in listed.stdout for name in PRESETS)


@pytest.mark.no_process
@pytest.mark.parametrize("args, fragment", [
    (["--machine", "dgx-h1000"], "unknown --machine 'dgx-h1000'"),
    (["--machine", "dgx-h100", "--facts", "x.json"], "--machine and --facts both"),
    (["--facts", "no-such.json"], "no-such.json does not exist"),
    (["--facts", str(TOPOLOGY / "azure-ndv5-h100_nccl-topo.xml")], "holds no <gpu>"),
    (["--facts", str(TOPOLOGY / "README.md")], "README.md is not JSON"),
    (["--facts", str(TOPOLOGY)], "is a folder"),
    (["--machine", "dgx-h100", "--collective", "allreduce"], "unknown allreduce"),
    (["--machine", "dgx-h100", "--nodes", "0"], "--nodes"),
])
def test_bad_input_is_refused_in_one_line(args, fragment):
    assert_refused(invoke(["expect", *args]), fragment=fragment)


@pytest.mark.no_process
def test_a_cut_topology_dump_is_refused_in_one_line(tmp_path):
    cut = tmp_path / "topo.xml"
    cut.write_text((TOPOLOGY / "ibm-cloud-gx3d-h100_nccl-topo.xml").read_text()[:2000])
    assert_refused(invoke(["expect", "--facts", str(cut)]), fragment="is not well-formed XML")


@pytest.mark.no_process
def test_hunts_expected_baseline_is_the_models_lane_and_node_figures():
    """--baseline expected: a lane is a sendrecv across two nodes over one GPU's NIC, a node its all-reduce."""
    from commbench.cluster.baseline import expected_baseline

    h100 = expected_baseline(PRESETS["dgx-h100"], ranks_per_node=8, device="cuda")
    assert h100 == {"bandwidth": pytest.approx(400 / 8 * 0.94), "intra_all_reduce": pytest.approx(480)}
    cpu = MachineFacts(name="cpu", cpu_cores=2, memcpy_gbps=10.0, loopback_gbps=2.0)
    assert expected_baseline(cpu, ranks_per_node=2, device="cpu") == {"intra_all_reduce": 2.0}  # no NIC to cross
    with pytest.raises(CommbenchError, match="--baseline expected: this machine's facts give no expected busbw"):
        expected_baseline(MachineFacts(name="bare"), ranks_per_node=2, device="cpu")


@pytest.mark.no_process
def test_the_h200_1_preset_agrees_with_that_machines_nvidia_smi():
    """`nvidia-smi -q` on H200-1 (tests/data/gpu/h200-1/nvidia-smi.txt): PCIe Generation Max 5, Link Width Max 16x;
    `nvidia-smi topo -m` lists one GPU."""
    text = (DATA / "gpu" / "h200-1" / "nvidia-smi.txt").read_text()
    generation = re.search(r"PCIe Generation\s+Max\s+:\s+(\d+)", text)
    width = re.search(r"Link Width\s+Max\s+:\s+(\d+)x", text)
    assert generation and width
    preset = PRESETS["h200-1"]
    assert (preset.pcie_gen, preset.pcie_width) == (int(generation.group(1)), int(width.group(1))) == (5, 16)
    assert preset.gpus_per_node == 1 and preset.nvlink_links == 0
    assert expect(preset, "all_reduce", nodes=1, ranks_per_node=1).why_none == "one rank moves nothing between ranks"


@pytest.mark.no_process
@needs_gpu_traces
def test_trace_analyze_gives_each_collective_and_group_its_expected_busbw():
    """The DDP trace's all_reduce and broadcast over 2 ranks, on a DGX H100: a ring on 18 NVLinks at NCCL's 20.6
    GB/s (2 ranks gain nothing from NVLS: its ceiling 2(G-1)/(G+1) is 2/3 of the link); the 128-rank sendrecv on a
    DGX H100 spans 16 nodes of 8, over one NIC at NDR's healthy 47 GB/s."""
    trace = str(GPU_TRACES / "ddp-allreduce-2rank-rank0.json.gz")
    result = invoke(["trace", "analyze", trace, "--machine", "dgx-h100", "--json"])
    assert result.exit_code == 0, result.output
    expected = {(item["collective"], item["group_size"]): item for item in json.loads(result.stdout)["expected"]}
    assert set(expected) == {("all_reduce", 2), ("broadcast", 2)}
    assert expected[("all_reduce", 2)]["expected_busbw_gbps"] == pytest.approx(18 * 20.6)
    wide = invoke(["trace", "analyze", str(GPU_TRACES / "sendrecv-128rank-rank0.json.gz"), "--machine", "dgx-h100",
                   "--json"])
    [sendrecv] = json.loads(wide.stdout)["expected"]
    assert sendrecv["group_size"] == 128 and sendrecv["expected_busbw_gbps"] == pytest.approx(400 / 8 * 0.94)
    assert "16 node(s) × 8" in sendrecv["expected_basis"]
    plain = invoke(["trace", "analyze", trace])
    assert "expected busbw: none (a trace does not hold its machine's topology" in plain.stdout


@pytest.mark.no_process
def test_an_8_gpu_pcie_node_rings_over_pcie():
    """hgx-h100-pcie: NVLink bridges join pairs only, so 8 ranks ring over PCIe gen5 x16 (63 GB/s after 128b/130b);
    its NICs are not known, so across nodes there is no figure, and it says so."""
    preset = PRESETS["hgx-h100-pcie"]
    one = expect(preset, "all_reduce", nodes=1, ranks_per_node=8)
    assert (one.ceiling_gbps, one.bound) == (pytest.approx(16 * 32 * 128 / 130 / 8), "PCIe")
    assert one.busbw_gbps == pytest.approx(48.0)  # NCCL's topo.cc: 16 lanes × 240 × 100 Mb/s
    assert expect(preset, "all_reduce", nodes=2, ranks_per_node=8).why_none == \
        "the facts list no network adapters to cross nodes with"


@pytest.mark.no_process
@pytest.mark.parametrize("nodes", [2, 4])
def test_network_terms_name_n_as_ranks_and_their_arithmetic_gives_the_figure(nodes):
    """The tree and all-to-all terms say n is the rank count (16 at 2 nodes × 8), with its value: a reader taking n
    for the node count would compute 400 where the term says 750. Recomputing each term from the numbers its text
    names gives the term's own figure. (From 3 nodes the ring beats NVLS-tree here, so the tree term is shown at 2.)"""
    preset = PRESETS["dgx-h100"]
    net = 8 * 400 / 8
    ranks = nodes * 8
    alltoall = {term.name: term for term in expect(preset, "all_to_all", nodes=nodes, ranks_per_node=8).terms}[
        "all-to-all over the network"]
    assert f"n = {ranks} ranks, G = 8 per node" in alltoall.source
    assert alltoall.value == pytest.approx(net * (ranks - 1) / (8 * (ranks - 8)))
    if nodes == 2:
        tree = {term.name: term for term in expect(preset, "all_reduce", nodes=2, ranks_per_node=8).terms}[
            "tree over the network"]
        assert "n = 16 ranks" in tree.source and tree.value == pytest.approx(net * 2 * 15 / 16)
