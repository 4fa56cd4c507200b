"""`commbench p2p`: the rank × rank matrix, launched on this machine and on 3 "nodes" of it with a slow link."""

import json

import pandas as pd
import pytest

from tests.in_process import commbench_here
from tests.shaped_fabric import Shaping, unavailable
from tests.virtual_nodes import run_on_nodes

pytestmark = pytest.mark.distributed
SLOW_RATE = "200mbit"


def test_every_ordered_pair_at_every_size_checked_with_matrix_files(run_commbench):
    # 3 ranks: each circle round has one pair and a bye, so 2 ranks at a time on this 2-core machine
    run = run_commbench("p2p", "--nproc", "3", "--oversubscribe", "--sizes", "8,1M", "--iters", "10", "--statistic",
                        "p10")
    assert run.returncode == 0, run.stderr
    results = run.results
    assert len(results) == 2 * 3 * 2  # sizes × ordered pairs of 3 ranks
    assert sorted(zip(results["src"], results["dst"])) == sorted(
        [(i, j) for i in range(3) for j in range(3) if i != j] * 2)
    assert (results["n_wrong"] == 0).all() and (results["busbw_gbps"] > 0).all() and (results["iters"] == 10).all()
    assert results["same_node"].all()
    assert len(run.samples) == len(results) * 10
    for size in (8, 1 << 20):
        matrix = pd.read_csv(run.run_dir / f"p2p_matrix_busbw_gbps_{size}B.csv", index_col=0)
        assert matrix.shape == (3, 3) and matrix.isna().to_numpy().diagonal().all()
        assert matrix.notna().sum().sum() == 6
    assert "# busbw (GB/s) at 1 MiB" in run.stdout and "src \\ dst" in run.stdout
    # every pair of every round at every size on the world's own communicator: none made per pair, round or size
    # (the serial test below, 1 pair at 1 size, counts the same)
    assert json.loads((run.run_dir / "meta.json").read_text())["communicators_created"] == 1
    report = commbench_here("report", str(run.run_dir), "--out", str(run.run_dir / "report"))
    assert report.returncode == 0, report.stderr
    assert (run.run_dir / "report" / "p2p_matrix.png").stat().st_size > 0


def test_serial_schedule_measures_the_same_pairs(run_commbench):
    run = run_commbench("p2p", "--sizes", "64K", "--iters", "6", "--schedule", "serial")
    assert run.returncode == 0, run.stderr
    assert sorted(zip(run.results["src"], run.results["dst"])) == [(0, 1), (1, 0)]
    assert (run.results["schedule"] == "serial").all()
    assert json.loads((run.run_dir / "meta.json").read_text())["communicators_created"] == 1


@pytest.mark.skipif(unavailable() is not None, reason=f"no namespaced network: {unavailable()}")
def test_the_matrix_shows_a_slow_link_and_nothing_else(tmp_path):
    # a real slow link between n1 and n3 (tests/shaped_fabric.py: each node a network namespace, the link shaped to
    # 200 Mbit/s, 42 ms per 1 MiB): both directions of that pair, no other cell; with 3 nodes each circle round has
    # one pair and a bye, so 2 ranks at a time on this machine's 2 cores (and the p10 figure, for the reason
    # tests/test_hunt.py gives)
    run = run_on_nodes(tmp_path, ["n1", "n2", "n3"], "p2p", "--sizes", "1M", "--iters", "10", "--statistic", "p10",
                       shaping=Shaping(slow_links={("n1", "n3"): SLOW_RATE}))
    assert run.codes == [0, 0, 0], run.outputs
    results = pd.read_csv(run.run_dir / "results.csv")
    assert len(results) == 6 and (results["n_wrong"] == 0).all() and not results["same_node"].any()
    slow = results["src_node"].isin(["n1", "n3"]) & results["dst_node"].isin(["n1", "n3"])
    assert slow.sum() == 2
    # the slow cells take longer than every other cell: 42 ms at the link's rate, against ~4 ms at most for a
    # healthy pair here, even with a core taken by a busy loop
    assert results.loc[slow, "time_us_p10"].min() > results.loc[~slow, "time_us_p10"].max()
    assert (results.loc[slow, "busbw_gbps"].max() < results.loc[~slow, "busbw_gbps"].min())
    # i→j against j→i: one link measured both ways (on this host's healthy pairs a core shared with another
    # process makes one direction read up to 20x the other, so only the shaped link, far beyond that, is compared)
    assert results.loc[slow, "time_us_p10"].max() < 3 * results.loc[slow, "time_us_p10"].min()
