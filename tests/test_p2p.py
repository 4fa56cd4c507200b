"""`commbench p2p`: the rank × rank matrix, launched on this machine and on 3 "nodes" of it with a slow link."""

import json
import subprocess
import sys

import pandas as pd
import pytest

from tests.virtual_nodes import run_on_nodes

pytestmark = pytest.mark.distributed


@pytest.mark.exclusive
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
    assert_symmetric(results[results["size_bytes"] == 1 << 20])
    report = subprocess.run([sys.executable, "-m", "commbench", "report", str(run.run_dir), "--out",
                             str(run.run_dir / "report")], capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    assert (run.run_dir / "report" / "p2p_matrix.png").stat().st_size > 0


def assert_symmetric(results):
    """i→j against j→i: the same link both ways, within this host's noise (a clean run, or a fault on both ways)."""
    busbw = results.set_index(["src", "dst"])["busbw_gbps"]
    for (src, dst), value in busbw.items():
        assert 1 / 3 < value / busbw[(dst, src)] < 3, (src, dst)


def test_serial_schedule_measures_the_same_pairs(run_commbench):
    run = run_commbench("p2p", "--sizes", "64K", "--iters", "6", "--schedule", "serial")
    assert run.returncode == 0, run.stderr
    assert sorted(zip(run.results["src"], run.results["dst"])) == [(0, 1), (1, 0)]
    assert (run.results["schedule"] == "serial").all()
    assert json.loads((run.run_dir / "meta.json").read_text())["communicators_created"] == 1


@pytest.mark.exclusive
def test_the_matrix_shows_an_injected_slow_link_and_nothing_else(tmp_path):
    # 300 % slower sends between n1 and n3 (commbench/faults.py): both directions of that pair, no other cell; with
    # 3 nodes each circle round has one pair and a bye, so 2 ranks at a time on this machine's 2 cores (and the p10
    # figure, for the reason tests/test_hunt.py gives)
    run = run_on_nodes(tmp_path, ["n1", "n2", "n3"], "p2p", "--sizes", "1M", "--iters", "10", "--statistic", "p10",
                       env={"COMMBENCH_SLOW_LINK": "n1,n3:300"})
    assert run.codes == [0, 0, 0], run.outputs
    results = pd.read_csv(run.run_dir / "results.csv")
    assert len(results) == 6 and (results["n_wrong"] == 0).all() and not results["same_node"].any()
    slow = results["src_node"].isin(["n1", "n3"]) & results["dst_node"].isin(["n1", "n3"])
    assert slow.sum() == 2
    # the slow cells take longer than every other cell: 4× by the fault, against pairs within 2× of one another here
    assert results.loc[slow, "time_us_p10"].min() > results.loc[~slow, "time_us_p10"].max()
    assert (results.loc[slow, "busbw_gbps"].max() < results.loc[~slow, "busbw_gbps"].min())
    assert_symmetric(results)
