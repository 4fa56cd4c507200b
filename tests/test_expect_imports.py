"""Expected busbw against real published nccl-tests logs (tests/data/imports), each imported with the preset of the
machine that wrote it: a ceiling is never below a real measurement, so at the largest size expected ≥ measured."""

from pathlib import Path

import pandas as pd
import pytest

from tests.refusals import invoke

LOGS = Path(__file__).parent / "data" / "imports" / "nccl-tests"

CASES = [
    ("a100_2node_16rank_mpi_prefix_old_layout_all_reduce.txt", "aws-p4d", ["--collective", "all_reduce"]),
    ("h100_2node_16rank_all_reduce.txt", "gcp-a3-mega", ["--collective", "all_reduce"]),
    ("v100_dgx2_12gpu_old_layout_5tests_concatenated.txt", "dgx-2", []),
    ("a100_8gpu_sendrecv_wrong_na_table_only.txt", "dgx-a100",
     ["--collective", "sendrecv", "--world-size", "8", "--partial"]),
    pytest.param("mi300x_2node_16rank_rccl_tests_all_reduce.txt", None, [], marks=pytest.mark.skip(
        reason="AMD MI300X: rccl-tests on Infinity Fabric, which no preset or NVML fact describes")),
    pytest.param("t4_3node_old_layout_error_na_all_reduce.txt", None, [], marks=pytest.mark.skip(
        reason="its source names no network between the three T4 hosts, so no preset can hold their NICs")),
    pytest.param("rtx5090_2rank_1host_mpi_prefix_v2_18_all_reduce.txt", None, [], marks=pytest.mark.skip(
        reason="both ranks ran on one RTX 5090 (device 0): the model has one rank per GPU")),
    pytest.param("rtx2080ti_2gpu_6runs_concatenated_shell_prompts.txt", None, [], marks=pytest.mark.skip(
        reason="the file mixes world sizes 1 and 2, which one import refuses")),
]


@pytest.mark.parametrize("name, machine, options", CASES, ids=[str(case[0] if isinstance(case, tuple) else
                                                                   case.values[0]).split("_")[0] for case in CASES])
def test_expected_is_at_least_the_published_measurement_at_the_largest_size(tmp_path, name, machine, options):
    result = invoke(["import", "nccl-tests", str(LOGS / name), "--machine", machine, *options,
                     "--out", str(tmp_path), "--run-id", "imported", "-q"])
    assert result.exit_code in (0, 1), result.output + result.stderr  # 1: the log itself reports wrong results
    rows = pd.read_csv(tmp_path / "imported" / "results.csv")
    assert rows["expected_busbw_gbps"].notna().all(), rows["expected_basis"].unique()
    for collective, group in rows.groupby("collective"):
        largest = group[group["size_bytes"] == group["size_bytes"].max()]
        measured, expected = largest["busbw_gbps"].max(), largest["expected_busbw_gbps"].iloc[0]
        print(f"{name} {collective} {largest['size_bytes'].iloc[0]} B: measured {measured} GB/s, expected "
              f"{expected} GB/s ({largest['expected_basis'].iloc[0]}), ratio {measured / expected:.3f}")
        assert 0 < measured <= expected, (collective, measured, expected)


def test_an_import_without_a_machine_says_why_its_rows_have_no_expected_busbw(tmp_path):
    result = invoke(["import", "nccl-tests", str(LOGS / CASES[1][0]), "--collective", "all_reduce",
                     "--out", str(tmp_path), "--run-id", "plain", "-q"])
    assert result.exit_code == 0, result.output + result.stderr
    rows = pd.read_csv(tmp_path / "plain" / "results.csv")
    assert rows["expected_busbw_gbps"].isna().all()
    assert set(rows["expected_basis"]) == {"none: no facts of the machine that wrote the file: pass --machine PRESET "
                                           "or --facts FILE (commbench expect)"}
