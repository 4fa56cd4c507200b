"""What NCCL would pick and what the node nominally is: NVLS only where this NCCL and the row's environment allow it,
only ACTIVE InfiniBand/RoCE ports (one per GPU, or NCCL_IB_HCA's), and what NVML cannot answer said, never read as
0 links (tests/test_expect.py holds the figures)."""

import pytest

from commbench.expect.model import expect
from commbench.expect.nccl_choice import NcclContext, algorithm_filter
from commbench.expect.presets import PRESETS
from commbench.expect.probe import network_adapters, node_topology
from tests.refusals import invoke

pytestmark = pytest.mark.no_process

H100 = PRESETS["dgx-h100"]


@pytest.mark.parametrize("context, reason", [
    (NcclContext(env={"NCCL_NVLS_ENABLE": "0"}), "nvls: NCCL_NVLS_ENABLE=0"),
    (NcclContext(env={"NCCL_ALGO": "Ring"}), "nvls: NCCL_ALGO=Ring"),
    (NcclContext(version=(2, 16, 5)), "nvls: NCCL 2.16.5 predates NVLS (2.17)"),
    (NcclContext(env={"NCCL_ALGO": "^nvls"}), "nvls: NCCL_ALGO=^nvls"),
    (NcclContext(env={"NCCL_ALGO": "allreduce:ring,tree"}), "nvls: NCCL_ALGO=allreduce:ring,tree"),
])
def test_nvls_is_not_expected_where_nccl_would_not_run_it(context, reason):
    found = expect(H100, "all_reduce", nodes=1, ranks_per_node=8, nccl=context)
    assert (found.algorithm, found.busbw_gbps) == ("ring", pytest.approx(18 * 20.6))
    assert reason in found.ruled_out


def test_nvls_is_expected_where_nccl_runs_it():
    for context in (NcclContext(), NcclContext(version=(2, 17, 1)), NcclContext(env={"NCCL_ALGO": "NVLS,Ring"}),
                    NcclContext(env={"NCCL_ALGO": "ring;allreduce:nvls"}),
                    NcclContext(env={"NCCL_ALGO": "allgather:ring"})):
        found = expect(H100, "all_reduce", nodes=1, ranks_per_node=8, nccl=context)
        assert found.algorithm == "nvls" and not any(out.startswith("nvls") for out in found.ruled_out), context


def test_nvls_tree_needs_nccl_2_18_across_nodes():
    older = expect(H100, "all_reduce", nodes=2, ranks_per_node=8, nccl=NcclContext(version=(2, 17, 1)))
    assert older.algorithm == "ring" and "nvls_tree: NCCL 2.17.1 predates NVLS_TREE (2.18)" in older.ruled_out
    assert expect(H100, "all_reduce", nodes=2, ranks_per_node=8, nccl=NcclContext(version=(2, 18, 1))).algorithm \
        == "nvls_tree"


def test_nccl_algo_follows_nccls_own_grammar():
    """env.rst: a list; ^ inverts it; from 2.24 function:list entries, the first may lack a function."""
    assert algorithm_filter("", "all_reduce") is None
    assert algorithm_filter("allgather:ring", "all_reduce") is None  # another function's entry
    ring_tree = algorithm_filter("Ring,TREE", "all_reduce")
    assert ring_tree("ring") and ring_tree("tree") and not ring_tree("nvls")
    assert not algorithm_filter("^NVLS,NVLSTree", "all_reduce")("nvls_tree")
    mixed = "ring,collnetdirect;allreduce:tree,collnetdirect;broadcast:ring"
    assert algorithm_filter(mixed, "all_reduce")("tree") and not algorithm_filter(mixed, "all_reduce")("ring")
    assert algorithm_filter(mixed, "all_gather")("ring") and not algorithm_filter(mixed, "all_gather")("tree")


def test_only_nccl_algo_ruling_out_everything_leaves_no_figure_and_says_why():
    found = expect(H100, "all_gather", nodes=1, ranks_per_node=8, nccl=NcclContext(env={"NCCL_ALGO": "Tree"}))
    assert found.busbw_gbps is None and "NCCL_ALGO=Tree" in found.why_none


def test_expect_takes_the_nccl_version_and_env_and_refuses_bad_ones():
    ring = invoke(["expect", "--machine", "dgx-h100", "--collective", "all_reduce", "--env", "NCCL_NVLS_ENABLE=0",
                   "--json"])
    assert ring.exit_code == 0, ring.output
    assert '"algorithm": "ring"' in ring.stdout and "NCCL_NVLS_ENABLE=0" in ring.stdout
    for args, fragment in ((["--nccl-version", "two"], "--nccl-version 'two' is not a version"),
                           (["--env", "NCCL_ALGO"], "--env 'NCCL_ALGO' is not NAME=VALUE")):
        bad = invoke(["expect", "--machine", "dgx-h100", *args])
        assert bad.exit_code == 2 and fragment in bad.stderr and "Traceback" not in bad.output


def _port(root, device, port, *, rate, state, link_layer="InfiniBand"):
    folder = root / "infiniband" / device / "ports" / str(port)
    folder.mkdir(parents=True)
    (folder / "rate").write_text(f"{rate} Gb/sec (4X NDR)\n")
    (folder / "state").write_text(state + "\n")
    (folder / "link_layer").write_text(link_layer + "\n")


def _sys_tree(tmp_path):
    """A node with 4 GPUs' worth of NDR ports, one DOWN, a RoCE port, and a 100 GbE interface beside them."""
    root = tmp_path / "class"
    for index in range(3):
        _port(root, f"mlx5_{index}", 1, rate=400, state="4: ACTIVE")
    _port(root, "mlx5_3", 1, rate=400, state="1: DOWN")
    _port(root, "mlx5_4", 1, rate=200, state="4: ACTIVE", link_layer="Ethernet")  # RoCE: NCCL uses it
    ethernet = root / "net" / "eth0"
    (ethernet / "device").mkdir(parents=True)
    (ethernet / "speed").write_text("100000\n")
    return root


def test_only_active_ports_count_and_at_most_one_per_gpu(tmp_path):
    root = _sys_tree(tmp_path)
    found = network_adapters(root, gpus=8, environ={})
    assert sorted(found.rates) == [200.0, 400.0, 400.0, 400.0]  # the DOWN port is out, eth0 is not NCCL's
    assert any("mlx5_3 port 1: DOWN" in finding for finding in found.findings)
    two_gpus = network_adapters(root, gpus=2, environ={})
    assert two_gpus.rates == [400.0, 400.0] and any("one per GPU" in finding for finding in two_gpus.findings)


def test_nccl_ib_hca_names_the_ports_nccl_uses(tmp_path):
    root = _sys_tree(tmp_path)
    assert network_adapters(root, gpus=8, environ={"NCCL_IB_HCA": "mlx5_0,mlx5_1:1"}).rates == [400.0, 400.0]
    assert sorted(network_adapters(root, gpus=8, environ={"NCCL_IB_HCA": "^mlx5_4"}).rates) == [400.0] * 3
    assert network_adapters(root, gpus=8, environ={"NCCL_IB_HCA": "=mlx5"}).rates == [100.0]  # no exact name: eth0
    assert network_adapters(root, gpus=8, environ={"NCCL_IB_HCA": "mlx5_0:2"}).rates == [100.0]  # no port 2


def test_without_active_ports_the_fastest_physical_interface_is_the_network(tmp_path):
    root = tmp_path / "class"
    _port(root, "mlx5_0", 1, rate=400, state="1: DOWN")
    ethernet = root / "net" / "eth0"
    (ethernet / "device").mkdir(parents=True)
    (ethernet / "speed").write_text("25000\n")
    assert network_adapters(root, gpus=8, environ={}).rates == [25.0]


def _gpu(index, *, links=18, active=18, switch=True, capability=(9, 0)):
    return {"index": index, "name": "NVIDIA H100 80GB HBM3", "nvlink_links": links, "nvlink_active_links": active,
            "nvswitch": switch, "compute_capability": list(capability) if capability else None, "pcie_gen": 5,
            "pcie_width": 16}


def test_a_gpu_with_links_down_is_a_finding_and_the_expectation_stays_nominal():
    topology = node_topology([_gpu(0), _gpu(1, active=16), *(_gpu(index) for index in range(2, 8))])
    assert topology.values["nvlink_links"] == 18 and topology.values["nvls"]
    assert topology.findings == ("GPU 1: 16 of 18 NVLink links up",)


def test_what_nvml_cannot_read_stays_unknown_and_gives_no_figure():
    from commbench.expect.facts import MachineFacts

    unknown = node_topology([_gpu(index, links=None, active=None, switch=None) for index in range(8)])
    assert unknown.values["nvlink_links"] is None and unknown.values["nvswitch"] is None
    assert not unknown.values["nvls"] and "GPU 0: NVML could not read its NVLink links" in unknown.findings
    facts = MachineFacts(name="node", gpu="H100", gpus_per_node=8, **unknown.values)
    found = expect(facts, "all_reduce", nodes=1, ranks_per_node=8)
    assert found.busbw_gbps is None and "unknown, not 0" in found.why_none
    no_capability = node_topology([_gpu(index, capability=None) for index in range(8)])
    facts = MachineFacts(name="node", gpu="H100", gpus_per_node=8, **no_capability.values)
    assert "compute capability" in expect(facts, "all_reduce", nodes=1, ranks_per_node=8).why_none
    pcie = node_topology([_gpu(index, links=0, active=0, switch=False) for index in range(2)])
    assert (pcie.values["nvlink_links"], pcie.findings) == (0, ())  # NVLink NotSupported: truly PCIe
