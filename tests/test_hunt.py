"""`commbench hunt` on "nodes" of this host (tests/virtual_nodes.py): on 5 joined by a real network in which one node
and one link are slow (tests/shaped_fabric.py: each node a network namespace, the slow ones shaped to SLOW_RATE), on
4 with a stalling node, and on one: what it names, what it writes, how every node exits. The threshold is 100 %, one
pair at a time and each figure the 10th percentile of its samples: on this 2-core VM a waiting rank sometimes wakes a
scheduler tick late, which adds ~3 ms to some exchanges of ~1 ms (and ~4 ms to every one of a rank sharing its core
with a busy loop), while the shaped link moves every sample by the 42 ms a 1 MiB transfer takes at SLOW_RATE. A fault
injected into the timed code as a share of the transfer's own time (commbench/faults.py) drowned in that noise with
a core taken (docs/measurements.md, "The suite with a core taken"); a rate does not.

What only a quiet machine can show is measured, not tested: that a clean allocation names nothing (beside the other
pytest worker a node whose rank shares its core is slower for real, and hunt rightly names it: +1,312 % latency
seen) and that a node under a real CPU quota is named (the same load hides it among the others).
benchmarks/hunt_detection.py measures both rates over many runs (its clean and throttled scenarios,
docs/measurements.md); the verdict paths they take are tested here on a healthy single node (exit 0, healthy) and a
stalling node (the stall test that names a throttled one)."""

import json

import pandas as pd
import pytest

from tests.in_process import commbench_here
from tests.shaped_fabric import Shaping, unavailable
from tests.virtual_nodes import run_on_nodes

pytestmark = pytest.mark.distributed
NODES = ["n1", "n2", "n3", "n4"]
SLOW_RATE = "200mbit"
HUNT = ("hunt", "--threshold", "100", "--pair-size", "1M", "--iters", "10", "--latency-iters", "20",
        "--pairs-at-once", "1", "--statistic", "p10")


@pytest.mark.skipif(unavailable() is not None, reason=f"no namespaced network: {unavailable()}")
def test_a_slow_node_is_named_as_a_node_and_a_slow_link_as_a_link_and_nothing_else(tmp_path):
    # 5 nodes (an odd count: each circle round has a bye), two slow parts of the network at once: n2's port (every
    # byte to or from n2), and the link between n4 and n5 (whose other pairs are fine)
    run = run_on_nodes(tmp_path, [f"n{index}" for index in range(1, 6)], *HUNT,
                       shaping=Shaping(slow_nodes={"n2": SLOW_RATE}, slow_links={("n4", "n5"): SLOW_RATE}))
    doc = json.loads((run.run_dir / "hunt.json").read_text())
    assert run.codes == [1] * 5, run.outputs
    assert [entry["node"] for entry in doc["suspect_nodes"]] == ["n2"]
    assert [sorted(entry["nodes"]) for entry in doc["suspect_links"]] == [["n4", "n5"]]
    assert doc["exclude"] == "n2"  # a link is not a node to exclude
    node = doc["suspect_nodes"][0]["evidence"][0]
    # The tolerance is hunt's own rule, not a count: hunt names a node that is slow with more than half of its
    # partners (diagnosis._node_suspects: each pair judged against its noise bar), past the slowdown hunt says this
    # run could detect, so that is what n2 must show, and every partner is listed as slow or fine.
    partners = {"n1", "n3", "n4", "n5"}
    assert set(node["slow_with"]) | set(node["fine_with"]) == partners and len(node["slow_with"]) * 2 > len(partners)
    assert node["slower_pct"] >= doc["detectable_slowdown_pct"][node["test"]]
    assert node["z"] >= doc["thresholds"]["min_z"]
    assert node["second_pass"]  # measured again against known-good nodes before it was named
    link = doc["suspect_links"][0]["evidence"][0]
    assert link["ends_fine_elsewhere"] == {"n4": True, "n5": True}
    assert {"link", "n4 with", "n5 with"} <= set(link["second_pass"])  # and each repeat's own slowdown
    results = pd.read_csv(run.run_dir / "results.csv")
    named = results[(results["phase"] == "finding") & (results["verdict"] == "suspect")]
    assert named[["test", "node_a", "node_b"]].fillna("").values.tolist() == [["node", "n2", ""], ["link", "n4", "n5"]]
    rank0 = next(output for output in run.outputs if "SUSPECT" in output)
    table = rank0[rank0.index("# SUSPECT"):]
    assert table.startswith("# SUSPECT node n2:") and "\n# SUSPECT link n4–n5:" in table  # suspects first
    assert "hunt: 2 suspect(s)" in rank0
    assert "Traceback" not in rank0[:rank0.index("# Results:")]  # torchrun's own report of exit 1 follows
    _measured_every_pair_once_shown_both_ways(run.run_dir, doc, [f"n{index}" for index in range(1, 6)])
    _exports_its_suspects(run.run_dir)
    report = commbench_here("report", str(run.run_dir), "--out", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr
    assert (tmp_path / "report" / "hunt_node_matrix.png").stat().st_size > 0


def _measured_every_pair_once_shown_both_ways(run_dir, doc, nodes) -> None:
    """What hunt writes whatever its verdict: the matrix of every pair, each pair's rows and samples from both passes
    over the circle rounds, what the run could have detected, and one communicator for all pairs."""
    assert doc["nodes"] == sorted(doc["nodes"], key=lambda node: doc["ranks"][node]) and set(doc["nodes"]) == set(nodes)
    matrix = pd.read_csv(run_dir / "node_matrix_busbw_gbps.csv", index_col=0)
    assert list(matrix.index) == doc["nodes"] == list(matrix.columns)
    values = matrix.to_numpy()
    for i in range(len(nodes)):  # every pair measured once, shown both ways; nothing on the diagonal
        assert pd.isna(values[i][i])
        for j in range(len(nodes)):
            if i != j:
                assert values[i][j] > 0 and values[i][j] == values[j][i]
    pairs = len(nodes) * (len(nodes) - 1) // 2
    results = pd.read_csv(run_dir / "results.csv")
    first = results[results["phase"] == "pairs"]
    assert len(first) == 2 * pairs and set(first["test"]) == {"bandwidth", "latency"}
    assert (first["n_wrong"] == 0).all()
    # every pair measured twice (all rounds, then all again), its samples pooled
    assert first.groupby("test")["iters"].unique().to_dict() == {"bandwidth": [20], "latency": [40]}
    samples = pd.read_csv(run_dir / "samples.csv")
    assert len(samples[samples["phase"] == "pairs"]) == pairs * 2 * (10 + 20)
    assert set(doc["detectable_slowdown_pct"]) == {"bandwidth", "latency", "stalls"}
    assert all(value >= 100 for value in doc["detectable_slowdown_pct"].values())  # never under --threshold
    # one rank per node: no node group; the pairs run on the world's communicator
    assert json.loads((run_dir / "meta.json").read_text())["communicators_created"] == 1
    assert f"intra-node all_reduce skipped on n[1-{len(nodes)}]: one rank each" in doc["notes"]


def _exports_its_suspects(run_dir) -> None:
    """`commbench export prometheus` of the hunt: a suspect gauge per node and per link (1 for the named ones), and
    each first-pass pair's bandwidth and latency as the results hold them (measured once: a hunt takes half a
    minute of the machine to itself)."""
    from commbench import store
    from commbench.benches import get_kind
    from tests.test_export_prometheus import by_labels, exported

    families = exported(str(run_dir))
    run_id = store.run_id_of(run_dir)
    nodes = by_labels(families["commbench_hunt_suspect_node"], run_id=run_id)
    assert nodes == {frozenset({"run_id": run_id, "node": f"n{index}"}.items()): float(index == 2)
                     for index in range(1, 6)}
    pairs = [(f"n{a}", f"n{b}") for a in range(1, 6) for b in range(a + 1, 6)]
    links = by_labels(families["commbench_hunt_suspect_link"], run_id=run_id)
    assert links == {frozenset({"run_id": run_id, "node_a": a, "node_b": b}.items()): float((a, b) == ("n4", "n5"))
                     for a, b in pairs}
    rows = store.read_results(run_dir, get_kind("hunt"))
    first = rows[rows["phase"] == "pairs"]
    for name, test, column in (("commbench_hunt_pair_bus_bandwidth_gbs", "bandwidth", "busbw_gbps"),
                               ("commbench_hunt_pair_latency_microseconds", "latency", "latency_us")):
        expected = {frozenset({"run_id": run_id, "node_a": row["node_a"], "node_b": row["node_b"],
                               "size_bytes": str(int(row["size_bytes"]))}.items()): row[column]
                    for _, row in first[first["test"] == test].iterrows()}
        got = by_labels(families[name])
        assert got.keys() == expected.keys() and len(got) == 10, name
        assert all(got[key] == pytest.approx(value, rel=1e-12) for key, value in expected.items()), name


def test_a_stalling_node_is_named_by_the_time_its_pairs_lose(tmp_path):
    # n2 delays 20 % of its exchanges by 50 ms (COMMBENCH_STALL_NODE): its pairs' medians and 10th percentiles barely
    # move, only their tails; the stall test names it from the time lost
    run = run_on_nodes(tmp_path, NODES, *HUNT, env={"COMMBENCH_STALL_NODE": "n2:20:50"})
    doc = json.loads((run.run_dir / "hunt.json").read_text())
    assert run.codes == [1] * 4, run.outputs
    assert [entry["node"] for entry in doc["suspect_nodes"]] == ["n2"]
    # n2's pairs are not taken for links. A link between two other nodes can be named here: beside the other pytest
    # worker a pair whose rank shares its core reads several times slower for real (n3-n4 at 5x once, judged
    # against the pairs of the nodes not named); that no false suspect comes on a quiet machine is
    # benchmarks/hunt_detection.py's stalling scenario (docs/measurements.md)
    assert not [entry for entry in doc["suspect_links"] if "n2" in entry["nodes"]], doc["suspect_links"]
    stalls = next(entry for entry in doc["suspect_nodes"][0]["evidence"] if entry["test"] == "stalls")
    assert stalls["slow_with"] == ["n1", "n3", "n4"] and stalls["p"] < 0.01 / 4 and stalls["lost_ms"] > 0
    assert stalls["second_pass"]["p"] < 0.01  # and again against known-good nodes
    rank0 = next(output for output in run.outputs if "SUSPECT" in output)
    assert "# SUSPECT node n2: stalls in " in rank0 and " ms lost" in rank0


def test_hunt_launched_on_one_machine_says_there_are_no_pairs(run_commbench):
    run = run_commbench("hunt", "--nproc", "2", "--intra-sizes", "64K", "--iters", "6")
    assert run.returncode == 0, run.stderr
    assert "one node: commbench launched the ranks here" in run.stdout
    doc = json.loads((run.run_dir / "hunt.json").read_text())
    assert doc["healthy"] and len(doc["nodes"]) == 1 and doc["matrix"]["busbw_gbps"] == [[None]]
    intra = pd.read_csv(run.run_dir / "results.csv").query("test == 'all_reduce'")
    assert len(intra) == 1 and intra["n_wrong"].tolist() == [0] and intra["busbw_gbps"].iloc[0] > 0


def test_a_baseline_without_a_figure_leaves_it_to_the_allocation_and_says_so(run_commbench, tmp_path):
    """A baseline of bandwidth alone: the intra-node all_reduce is judged against the allocation's own reference, and
    hunt.json's reference source and the printed notes name it (not "baseline")."""
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps({"bandwidth": 10.0}))
    run = run_commbench("hunt", "--nproc", "2", "--intra-sizes", "64K", "--iters", "6", "--baseline", str(baseline))
    assert run.returncode == 0, run.stderr
    assert "# note: intra_all_reduce: the baseline has no intra_all_reduce figure; judged against the allocation's " \
           "own reference" in run.stdout
    reference = json.loads((run.run_dir / "hunt.json").read_text())["reference"]
    assert reference["source"] == "allocation" and reference["sources"] == {"intra_all_reduce": "allocation"}
    assert reference["intra_all_reduce"] > 0
