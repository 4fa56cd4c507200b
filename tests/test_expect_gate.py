"""`commbench compare --fail-below-expected PCT`: a new row below PCT % of its expected busbw, at a size where
bandwidth dominates, fails the gate; rows without an expected busbw are bad input for it. On a real two-node H100
log (tests/data/imports) imported with its machine's preset: its largest sizes reach about 90 % of 375 GB/s."""

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.refusals import assert_refused, invoke

pytestmark = pytest.mark.no_process

LOG = Path(__file__).parent / "data" / "imports" / "nccl-tests" / "h100_2node_16rank_all_reduce.txt"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("gate")
    for run_id, machine in (("base", ["--machine", "gcp-a3-mega"]), ("new", ["--machine", "gcp-a3-mega"]),
                            ("plain", [])):
        result = invoke(["import", "nccl-tests", str(LOG), "--collective", "all_reduce", *machine, "--out", str(out),
                         "--run-id", run_id, "-q"])
        assert result.exit_code == 0, result.output + result.stderr
    return out


def test_rows_below_the_share_fail_the_gate_and_name_the_share(runs):
    rows = pd.read_csv(runs / "new" / "results.csv")
    failed = invoke(["compare", str(runs / "base"), str(runs / "new"), "--fail-below-expected", "95", "--json"])
    assert failed.exit_code == 1, failed.output + failed.stderr
    document = json.loads(failed.stdout)
    below = [entry for entry in document["entries"] if entry["verdict"] == "BELOW EXPECTED"]
    judged = [entry for entry in document["entries"] if entry["metric"] == "busbw of expected"]
    assert below and all(100 * entry["new"] / entry["baseline"] < 95 for entry in below)
    assert all(entry["verdict"] == "ok" for entry in judged if entry not in below)
    assert "below 95 % of their expected busbw" in document["gate"]["line"] and not document["gate"]["passed"]
    assert 0 < len(judged) < len(rows)  # the small sizes, latency-bound, are not held against a bandwidth ceiling
    lowest = min(100 * entry["new"] / entry["baseline"] for entry in judged)
    top = rows[rows["size_bytes"] == rows["size_bytes"].max()]
    assert lowest < 100 * top["busbw_gbps"].max() / top["expected_busbw_gbps"].iloc[0]  # 90 % at 8 GiB
    passed = invoke(["compare", str(runs / "base"), str(runs / "new"), "--fail-below-expected", f"{lowest - 1:.0f}"])
    assert passed.exit_code == 0, passed.output + passed.stderr
    assert passed.stdout.splitlines()[-1] == "# gate: passed"


def test_rows_without_an_expected_busbw_are_refused_for_the_expectation_gate(runs):
    refused = invoke(["compare", str(runs / "base"), str(runs / "plain"), "--fail-below-expected", "70"])
    assert_refused(refused, fragment="the new run's rows carry no expected busbw (no facts of the machine")
