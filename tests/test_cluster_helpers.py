"""Building blocks of cluster acceptance (issue 19): pairing rounds and Slurm hostlists. Hostlists are checked
against a real scontrol (Debian's slurm-client, which .ci/run installs), expanding them as Slurm does."""

import itertools
import os
import shutil
import subprocess

import pytest

from commbench.cluster.hostlist import compress
from commbench.cluster.pairing import circle_rounds, random_rounds


@pytest.mark.no_process
@pytest.mark.parametrize("count", [2, 3, 4, 5, 8, 9, 16])
def test_circle_rounds_pair_every_two_nodes_once_in_disjoint_rounds(count):
    nodes = [f"n{i}" for i in range(count)]
    rounds = circle_rounds(nodes)
    assert len(rounds) == (count - 1 if count % 2 == 0 else count)
    seen = [frozenset(pair) for round_ in rounds for pair in round_]
    assert sorted(seen, key=sorted) == sorted({frozenset(p) for p in itertools.combinations(nodes, 2)}, key=sorted)
    for round_ in rounds:
        members = [node for pair in round_ for node in pair]
        assert len(members) == len(set(members))  # each node in at most one pair of a round
        assert len(round_) == count // 2


@pytest.mark.no_process
def test_random_rounds_are_disjoint_and_the_same_for_the_same_seed():
    nodes = [f"n{i}" for i in range(7)]
    rounds = random_rounds(nodes, 4, seed=11)
    assert rounds == random_rounds(nodes, 4, seed=11)
    for round_ in rounds:
        members = [node for pair in round_ for node in pair]
        assert len(members) == len(set(members)) == 6
    with pytest.raises(ValueError, match="repeat"):
        circle_rounds(["a", "a"])


CASES = [
    (["n3", "n7"], "n[3,7]"),
    (["n1"], "n1"),
    (["n7", "gpu01", "n1"], "gpu01,n[1,7]"),
    (["n8", "n9", "n10", "n11"], "n[8-11]"),
    (["c1", "c3", "c2", "c5"], "c[1-3,5]"),
    (["gpu10", "gpu01", "gpu02", "gpu1", "gpu9"], None),
    (["n09", "n10", "n11", "n8"], None),
    (["a", "b1", "b01", "node-3", "node-4", "rack1-n2", "rack1-n3", "x1y", "a"], None),
    (["n001", "n002", "n100", "n099"], None),
]


@pytest.fixture(scope="module")
def slurm_expand(tmp_path_factory):
    """Expand a hostlist as Slurm does: `scontrol show hostnames` with a minimal config (all it needs for this)."""
    scontrol = shutil.which("scontrol")
    if scontrol is None:
        pytest.skip("scontrol is not installed (Debian slurm-client; .ci/run installs it)")
    conf = tmp_path_factory.mktemp("slurm") / "slurm.conf"
    conf.write_text("ClusterName=hostlists\nSlurmctldHost=localhost\nNodeName=localhost CPUs=1 State=UNKNOWN\n"
                    "PartitionName=p Nodes=localhost Default=YES\n")

    def expand(expression: str) -> list[str]:
        completed = subprocess.run([scontrol, "show", "hostnames", expression], capture_output=True, text=True,
                                   timeout=30, env={**os.environ, "SLURM_CONF": str(conf)})
        assert completed.returncode == 0, completed.stderr
        return completed.stdout.split()

    return expand


@pytest.mark.parametrize("names, expected", CASES)
def test_a_hostlist_names_exactly_the_given_nodes(names, expected, slurm_expand):
    expression = compress(names)
    if expected is not None:  # the form scontrol show hostlistsorted gives too
        assert expression == expected
    assert sorted(set(slurm_expand(expression))) == sorted(set(names))


@pytest.mark.no_process
def test_names_a_hostlist_cannot_hold_are_refused():
    for name in ("", "n[1]", "a,b"):
        with pytest.raises(ValueError, match="not a host name"):
            compress([name])
