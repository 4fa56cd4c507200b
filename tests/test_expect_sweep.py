"""A sweep's rows carry the expected busbw of this machine (commbench expect's model on its facts), and its table
says the percentage where bandwidth dominates: on CPU from the host's loopback and copy rates, measured here."""

import json
import subprocess
import sys

import pandas as pd
import pytest

from tests.conftest import commbench_env


@pytest.mark.distributed
def test_a_cpu_all_reduce_reaches_a_plausible_fraction_of_its_expected_busbw(tmp_path):
    """A property, not a rate: gloo's 16 MiB all_reduce lies between 0.05 and 1.2 of the loopback ceiling. The host
    rates are measured in this test (a cache of its own), beside the sweep, under the same load."""
    env = commbench_env(COMMBENCH_CACHE_DIR=str(tmp_path / "cache"))
    completed = subprocess.run([sys.executable, "-m", "commbench", "sweep", "-c", "all_reduce", "--sizes", "4M,16M",
                                "--iters", "6", "--out", str(tmp_path / "results"), "--run-id", "x"],
                               env=env, capture_output=True, text=True, timeout=300)
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
