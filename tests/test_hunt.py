"""`commbench hunt` on 4 "nodes" of this host (tests/virtual_nodes.py), clean and with a test-only fault that slows
one node's sends or one link's (COMMBENCH_SLOW_NODE / COMMBENCH_SLOW_LINK, commbench/faults.py): what it names,
what it writes, how every node exits. The fault is 300 % (4× the time), the threshold 50 %, one pair at a time and
each figure the 10th percentile of its samples: on this 2-core VM a waiting rank sometimes wakes ~3 ms late (a
scheduler tick), which adds ~3 ms to some exchanges of ~1 ms and flips a median between ~1 and ~4 ms, while a fault
of the pair moves every sample (benchmarks/hunt_detection.py measures the rates over many runs)."""

import json
import subprocess
import sys

import pandas as pd
import pytest

from tests.virtual_nodes import run_on_nodes

pytestmark = [pytest.mark.distributed, pytest.mark.exclusive]
NODES = ["n1", "n2", "n3", "n4"]
HUNT = ("hunt", "--threshold", "50", "--pair-size", "1M", "--iters", "10", "--pairs-at-once", "1",
        "--statistic", "p10")


def _hunt(tmp_path, **fault):
    run = run_on_nodes(tmp_path, NODES, *HUNT, env=fault)
    doc = json.loads((run.run_dir / "hunt.json").read_text())
    return run, doc


def test_a_clean_allocation_names_nothing_and_every_node_exits_0(tmp_path):
    run, doc = _hunt(tmp_path)
    assert run.codes == [0, 0, 0, 0], run.outputs
    assert doc["healthy"] and doc["suspect_nodes"] == [] and doc["suspect_links"] == [] and doc["exclude"] == ""
    assert doc["nodes"] == sorted(doc["nodes"], key=lambda node: doc["ranks"][node]) and set(doc["nodes"]) == set(NODES)
    matrix = pd.read_csv(run.run_dir / "node_matrix_busbw_gbps.csv", index_col=0)
    assert list(matrix.index) == doc["nodes"] == list(matrix.columns)
    values = matrix.to_numpy()
    for i in range(4):  # every pair measured once, shown both ways; nothing on the diagonal
        assert pd.isna(values[i][i])
        for j in range(4):
            if i != j:
                assert values[i][j] > 0 and values[i][j] == values[j][i]
    results = pd.read_csv(run.run_dir / "results.csv")
    first = results[results["phase"] == "pairs"]
    assert len(first) == 12 and set(first["test"]) == {"bandwidth", "latency"}  # 6 pairs × 2 tests
    assert (first["n_wrong"] == 0).all()
    assert first.groupby("test")["iters"].unique().to_dict() == {"bandwidth": [10], "latency": [50]}
    samples = pd.read_csv(run.run_dir / "samples.csv")
    assert len(samples[samples["phase"] == "pairs"]) == 6 * (10 + 50)
    assert "intra-node all_reduce skipped on n[1-4]: one rank each" in doc["notes"]
    rank0 = next(output for output in run.outputs if "# healthy" in output)
    assert "# healthy: no suspect among 4 node(s)" in rank0 and "Traceback" not in rank0
    report = subprocess.run([sys.executable, "-m", "commbench", "report", str(run.run_dir), "--out",
                             str(tmp_path / "report")], capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    assert (tmp_path / "report" / "hunt_node_matrix.png").stat().st_size > 0


def test_a_slow_node_is_named_alone_with_its_evidence_and_every_node_exits_1(tmp_path):
    run, doc = _hunt(tmp_path, COMMBENCH_SLOW_NODE="n2:300")
    assert run.codes == [1, 1, 1, 1], run.outputs
    assert [entry["node"] for entry in doc["suspect_nodes"]] == ["n2"] and doc["suspect_links"] == []
    assert doc["exclude"] == "n2"
    evidence = doc["suspect_nodes"][0]["evidence"][0]
    assert evidence["slow_with"] == ["n1", "n3", "n4"] and evidence["slower_pct"] >= 50 and evidence["z"] >= 3
    assert evidence["second_pass"]  # measured again against known-good nodes before it was named
    rank0 = next(output for output in run.outputs if "SUSPECT" in output)
    table = rank0[rank0.index("# SUSPECT"):]
    assert table.startswith("# SUSPECT node n2:")  # suspects first
    assert "bench hunt" not in rank0 and "hunt: 1 suspect(s)" in rank0


def test_a_slow_link_is_named_as_a_link_not_as_either_node(tmp_path):
    run, doc = _hunt(tmp_path, COMMBENCH_SLOW_LINK="n1,n3:300")
    assert run.codes == [1, 1, 1, 1], run.outputs
    assert doc["suspect_nodes"] == [] and doc["exclude"] == ""
    assert [sorted(entry["nodes"]) for entry in doc["suspect_links"]] == [["n1", "n3"]]
    evidence = doc["suspect_links"][0]["evidence"][0]
    assert evidence["ends_fine_elsewhere"] == {"n1": True, "n3": True} or \
        evidence["ends_fine_elsewhere"] == {"n3": True, "n1": True}
    assert set(evidence["second_pass"]) == {"link", "n1 with", "n3 with"}
    results = pd.read_csv(run.run_dir / "results.csv")
    link = results[(results["phase"] == "finding") & (results["verdict"] == "suspect")]
    assert link[["test", "node_a", "node_b"]].values.tolist() in ([["link", "n1", "n3"]], [["link", "n3", "n1"]])


def test_hunt_launched_on_one_machine_says_there_are_no_pairs(run_commbench):
    run = run_commbench("hunt", "--nproc", "2", "--intra-sizes", "64K", "--iters", "6")
    assert run.returncode == 0, run.stderr
    assert "one node: commbench launched the ranks here" in run.stdout
    doc = json.loads((run.run_dir / "hunt.json").read_text())
    assert doc["healthy"] and len(doc["nodes"]) == 1 and doc["matrix"]["busbw_gbps"] == [[None]]
    intra = pd.read_csv(run.run_dir / "results.csv").query("test == 'all_reduce'")
    assert len(intra) == 1 and intra["n_wrong"].tolist() == [0] and intra["busbw_gbps"].iloc[0] > 0
