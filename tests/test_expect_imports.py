"""Expected busbw against every published log in tests/data: each healthy machine's log, imported with the preset of
the machine that wrote it, reaches measured / expected in [0.85, 1.05] at its largest size. A log or a collective left
out names the physical reason it cannot be held against a healthy figure (or has none to be held against)."""

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.refusals import invoke

pytestmark = pytest.mark.no_process

IMPORTS = Path(__file__).parent / "data" / "imports"
LOGS = IMPORTS / "nccl-tests"
HEALTHY = (0.85, 1.05)

CASES = [
    ("a100_2node_16rank_mpi_prefix_old_layout_all_reduce.txt", "aws-p4d", ["--collective", "all_reduce"]),
    ("h100_2node_16rank_all_reduce.txt", "gcp-a3-mega", ["--collective", "all_reduce"]),
    ("v100_dgx2_12gpu_old_layout_5tests_concatenated.txt", "dgx-2", []),
    ("a100_8gpu_sendrecv_wrong_na_table_only.txt", "dgx-a100",
     ["--collective", "sendrecv", "--world-size", "8", "--partial"]),
]
LEFT_OUT_COLLECTIVES = {
    ("v100_dgx2_12gpu_old_layout_5tests_concatenated.txt", "all_gather"):
        "its own check failed: '# Out of bounds values : 4 FAILED', errors of 1e+00 at the largest sizes",
    ("v100_dgx2_12gpu_old_layout_5tests_concatenated.txt", "reduce_scatter"):
        "the GPUs were shared: its source says another user ran on GPUs 0, 3, 4 and 5 during the runs, and its three "
        "largest sizes read 62, 49 and 64 GB/s, an interrupted curve rather than a plateau",
}
"""(file, collective) → why that collective of a log cannot be held against a healthy figure."""
LEFT_OUT = {
    LOGS / "mi300x_2node_16rank_rccl_tests_all_reduce.txt":
        "AMD MI300X over Infinity Fabric with RCCL: no NVIDIA GPU, NVLink or NCCL for the model to take",
    LOGS / "t4_3node_old_layout_error_na_all_reduce.txt":
        "the network between its three T4 hosts is not known (its source names none), so no figure exists",
    LOGS / "rtx5090_2rank_1host_mpi_prefix_v2_18_all_reduce.txt":
        "both ranks ran on one RTX 5090 (device 0): nothing crossed a link between GPUs",
    LOGS / "rtx2080ti_2gpu_6runs_concatenated_shell_prompts.txt":
        "two GeForce RTX 2080 Ti without PCIe peer-to-peer (GeForce cards lack it; NCCL copies through host memory): "
        "one-way broadcast and reduce reach 11.1 GB/s, 0.92 of PCIe gen3's healthy 12, while all_reduce and "
        "all_gather, both ways at once, read 4.0 and 3.8; one run is also on 1 GPU, which one import refuses",
    **{path: "one RTX 5090 with 2 ranks on it, over sockets (NCCL_NET=Socket): nothing crossed a link between GPUs"
       for path in sorted((IMPORTS / "nccl-tests-algo").glob("*.txt")) + sorted((IMPORTS / "nccl-tests-json").glob(
           "*.json"))},
    **{path: "NVIDIA's README example, on a machine it does not name ('example-hostname'): no facts to hold it against"
       for path in sorted((IMPORTS / "nccl-inspector").glob("*.json"))},
    **{path: "gloo on the CPU of an unknown host: its figure is that host's own measured copy and loopback rates"
       for path in sorted((IMPORTS / "param").glob("*.txt"))},
}
"""Every other published log in tests/data/imports, with the reason it is left out."""


def test_every_published_log_is_held_against_a_healthy_figure_or_says_why_not():
    logs = {path for folder in IMPORTS.iterdir() if folder.is_dir() for path in folder.iterdir()
            if path.suffix in (".txt", ".json") and path.name != "README.md"}
    tested = {LOGS / name for name, _, _ in CASES}
    assert logs == tested | set(LEFT_OUT), sorted(str(path) for path in logs ^ (tested | set(LEFT_OUT)))
    assert not tested & set(LEFT_OUT)


@pytest.mark.parametrize("name, machine, options", CASES, ids=[case[0].split("_")[0] for case in CASES])
def test_a_healthy_machines_log_reaches_the_expected_figure_at_its_largest_size(tmp_path, name, machine, options):
    result = invoke(["import", "nccl-tests", str(LOGS / name), "--machine", machine, *options,
                     "--out", str(tmp_path), "--run-id", "imported", "-q"])
    assert result.exit_code in (0, 1), result.output + result.stderr  # 1: the log itself reports wrong results
    rows = pd.read_csv(tmp_path / "imported" / "results.csv")
    assert rows["expected_busbw_gbps"].notna().all(), rows["expected_basis"].unique()
    ceilings = {key: item["ceiling_busbw_gbps"] for key, item in
                json.loads((tmp_path / "imported" / "meta.json").read_text())["expectation"]["expectations"].items()}
    held = 0
    for collective, group in rows.groupby("collective"):
        largest = group[group["size_bytes"] == group["size_bytes"].max()]
        measured, expected = largest["busbw_gbps"].max(), largest["expected_busbw_gbps"].iloc[0]
        ratio = measured / expected
        print(f"{name} {collective} {largest['size_bytes'].iloc[0]} B: measured {measured} GB/s, expected "
              f"{expected} GB/s ({largest['expected_basis'].iloc[0]}), ratio {ratio:.3f}")
        assert measured <= ceilings[collective]  # no machine exceeds the signaling rates
        if (name, collective) in LEFT_OUT_COLLECTIVES:
            continue
        assert HEALTHY[0] <= ratio <= HEALTHY[1], (collective, measured, expected)
        held += 1
    assert held >= 1


def test_an_import_without_a_machine_says_why_its_rows_have_no_expected_busbw(tmp_path):
    result = invoke(["import", "nccl-tests", str(LOGS / CASES[1][0]), "--collective", "all_reduce",
                     "--out", str(tmp_path), "--run-id", "plain", "-q"])
    assert result.exit_code == 0, result.output + result.stderr
    rows = pd.read_csv(tmp_path / "plain" / "results.csv")
    assert rows["expected_busbw_gbps"].isna().all()
    assert set(rows["expected_basis"]) == {"none: no facts of the machine that wrote the file: pass --machine PRESET "
                                           "or --facts FILE (commbench expect)"}


def test_an_imports_env_changes_the_algorithm_expected(tmp_path):
    """The two-node H100 log under NCCL_ALGO=Ring (as NVIDIA advises for a network check): the ring's figure."""
    result = invoke(["import", "nccl-tests", str(LOGS / CASES[1][0]), "--collective", "all_reduce", "--machine",
                     "gcp-a3-mega", "--env", "NCCL_ALGO=Ring", "--out", str(tmp_path), "--run-id", "ring", "-q"])
    assert result.exit_code == 0, result.output + result.stderr
    rows = pd.read_csv(tmp_path / "ring" / "results.csv")
    assert rows["expected_basis"].str.startswith("ring, bound by network").all()
    assert rows["expected_busbw_gbps"].iloc[0] == pytest.approx(8 * 200 / 8 * 0.94)
