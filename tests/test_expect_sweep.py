"""A sweep's rows carry the expected busbw of this machine (commbench expect's model on its facts), and its table
says the percentage where bandwidth dominates: on CPU from the host's loopback and copy rates, measured here."""

import json

import pandas as pd
import pytest

from tests.in_process import commbench_here


@pytest.mark.distributed
@pytest.mark.exclusive  # it measures the host's copy and loopback rates: two cores busy, and no other test beside it
def test_a_cpu_all_reduce_reaches_a_plausible_fraction_of_its_expected_busbw(tmp_path):
    """A property, not a rate: gloo's 16 MiB all_reduce lies between 0.05 and 1.2 of the loopback ceiling. The host
    rates are measured in this test (a cache of its own), beside the sweep, under the same load."""
    env = {"COMMBENCH_CACHE_DIR": str(tmp_path / "cache")}
    completed = commbench_here("sweep", "-c", "all_reduce", "--sizes", "4M,16M", "--iters", "6", "--out",
                               str(tmp_path / "results"), "--run-id", "x", env=env)
    assert completed.returncode == 0, completed.stderr
    rows = pd.read_csv(tmp_path / "results" / "x" / "results.csv")
    row = rows[rows["size_bytes"] == 16 * 1024**2].iloc[0]
    ratio = row["busbw_gbps"] / row["expected_busbw_gbps"]
    print(f"16 MiB all_reduce: {row['busbw_gbps']:.3f} GB/s of {row['expected_busbw_gbps']:.3f} expected "
          f"({row['expected_basis']}): {ratio:.2f}")
    assert 0.05 <= ratio <= 1.2
    assert row["expected_basis"].startswith("gloo ring, bound by ")
    assert "% of expected" in completed.stdout and f"; expected {row['expected_busbw_gbps']:.3f} GB/s" in \
        completed.stdout
    kept = json.loads(next((tmp_path / "cache").glob("host-rates-*.json")).read_text())
    assert kept["loopback_gbps"] > 0 and kept["memcpy_gbps"] > 0


@pytest.mark.no_process
def test_the_busbw_plot_draws_the_expected_busbw_where_the_rows_carry_one():
    from types import SimpleNamespace

    from commbench.report.collective_plots import busbw_vs_size

    row = {"bench": "collective", "collective": "all_reduce", "impl": "builtin", "backend": "gloo", "device": "cpu",
           "world_size": 2, "dtype": "float32", "op": "sum", "inplace": True, "timing": "batch",
           "time_us_ci_lo": 90.0, "time_us_ci_hi": 110.0}
    rows = pd.DataFrame([{**row, "size_bytes": size, "time_us_p50": 100.0 * size / 2**20, "busbw_gbps": busbw,
                          "expected_busbw_gbps": expected, "expected_basis": basis}
                         for size, busbw in ((2**20, 1.0), (2**22, 1.5))
                         for expected, basis in [(2.5, "gloo ring, bound by loopback TCP; vm")]])
    figure, _ = busbw_vs_size([SimpleNamespace(name="run", results=rows)])
    [axis] = figure.axes
    [expected] = [line for line in axis.get_lines() if line.get_label().startswith("expected")]
    assert set(expected.get_ydata()) == {2.5} and "bound by loopback TCP" in expected.get_label()
    figure, _ = busbw_vs_size([SimpleNamespace(name="run", results=rows.drop(columns=["expected_busbw_gbps"]))])
    assert not [line for line in figure.axes[0].get_lines() if line.get_label().startswith("expected")]


@pytest.mark.distributed
def test_hunt_judges_a_node_against_the_expected_busbw_with_baseline_expected(tmp_path):
    """`commbench hunt --baseline expected` on this one node: the reference of its all-reduce is the expected busbw
    (the loopback ceiling measured here, in a cache of its own), not the allocation's median. Whatever the load,
    the reference must equal the rates this run kept: the machine is shared."""
    env = {"COMMBENCH_CACHE_DIR": str(tmp_path / "cache")}
    completed = commbench_here("hunt", "--baseline", "expected", "--threshold", "1000", "--out",
                               str(tmp_path / "results"), "--run-id", "h", env=env)
    assert completed.returncode == 0, completed.stderr
    reference = json.loads((tmp_path / "results" / "h" / "hunt.json").read_text())["reference"]
    kept = json.loads(next((tmp_path / "cache").glob("host-rates-*.json")).read_text())
    assert reference["source"] == "baseline"
    assert reference["intra_all_reduce"] == pytest.approx(min(kept["loopback_gbps"], kept["memcpy_gbps"]))
    rows = pd.read_csv(tmp_path / "results" / "h" / "results.csv")
    intra = rows[rows["test"] == "all_reduce"]
    assert not intra.empty and ((intra["expected_busbw_gbps"] - reference["intra_all_reduce"]).abs() < 1e-3).all()
    assert "# expected busbw: " in completed.stdout
    p2p = commbench_here("p2p", "--sizes", "64K", "--out", str(tmp_path / "results"), "--run-id", "p", env=env)
    assert p2p.returncode == 0, p2p.stderr
    pairs = pd.read_csv(tmp_path / "results" / "p" / "results.csv")
    assert pairs["same_node"].all() and (pairs["expected_busbw_gbps"] == intra["expected_busbw_gbps"].iloc[0]).all()
