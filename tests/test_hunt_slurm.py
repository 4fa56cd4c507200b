"""`commbench hunt` as a suite bench (kind = "hunt") in a real Slurm job over 4 virtual nodes of a local cluster
(tests/local_slurm.py): each node is named by Slurm (SLURMD_NODENAME), and the job exits 1 when it names a suspect.
The slow node, every exchange of n2 40 ms late (COMMBENCH_STALL_NODE at 100 %, commbench/faults.py), reaches the
job through --env: an absolute delay, ten times what a rank sharing its core with another process waits for it,
because Slurm's nodes here share one network, which cannot be shaped per node (tests/test_hunt.py names a slow node
and a slow link on a real shaped network). The settings are tests/test_hunt.py's, for the same reason."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import commbench_env
from tests.local_slurm import started

pytestmark = pytest.mark.distributed
SUITE = """
backend = "gloo"
device = "cpu"

[[bench]]
name = "hunt"
kind = "hunt"
threshold = 100
pair-size = "1M"
iters = 10
pairs-at-once = 1
statistic = "p10"
latency-iters = 20
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with started(tmp_path_factory, nodes=4) as running:
        yield running


def _hunt_job(cluster, tmp_path: Path, nodes: int, *fault: str) -> tuple[subprocess.CompletedProcess, dict]:
    (tmp_path / "hunt.toml").write_text(SUITE)
    env = {**commbench_env(), "SLURM_CONF": cluster.env["SLURM_CONF"]}
    completed = subprocess.run(
        [sys.executable, "-m", "commbench", "slurm", "submit", "hunt.toml", "--nodes", str(nodes), "--gpus-per-node",
         "0", "--nproc-per-node", "1", "--out", "results", *fault, "--partition", cluster.partition, "--wait",
         "--wait-timeout", "240", "--poll", "0.5"], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=300)
    found = re.search(r"^# Results: (.+)$", completed.stdout, re.M)
    assert found, completed.stdout + completed.stderr
    return completed, json.loads((Path(found.group(1)) / "hunt" / "hunt.json").read_text())


def test_a_slow_node_is_named_with_its_slurm_name(cluster, tmp_path):
    completed, doc = _hunt_job(cluster, tmp_path, 4, "--env", "COMMBENCH_STALL_NODE=n2:100:40")
    assert completed.returncode == 1, completed.stdout + completed.stderr
    assert sorted(doc["nodes"]) == sorted(cluster.node_names)
    assert [entry["node"] for entry in doc["suspect_nodes"]] == ["n2"]
    assert doc["suspect_links"] == []
    assert doc["exclude"] == "n2"
    assert "bench hunt: 1 suspect(s) named" in completed.stderr
