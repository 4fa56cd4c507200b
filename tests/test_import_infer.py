"""The collective of an nccl-tests table whose file does not name it is inferred from its busbw ÷ algbw (the busbw
factor at its world size) and its redop and root columns; where they leave several candidates the import is refused
naming them, and a --collective the table contradicts is refused. Checked on every real log in tests/data/imports."""

import shutil
from pathlib import Path

import pandas as pd
import pytest

from commbench.imports import infer
from tests.refusals import assert_refused, invoke

pytestmark = pytest.mark.no_process

DATA = Path(__file__).parent / "data" / "imports"
# every real log, and what its tables are: the file names them, or their rows tell (inferred), or they cannot
LOGS = {
    "nccl-tests/a100_2node_16rank_mpi_prefix_old_layout_all_reduce.txt": ([], {"all_reduce"}, True),
    "nccl-tests/h100_2node_16rank_all_reduce.txt": ([], {"all_reduce"}, True),
    "nccl-tests/mi300x_2node_16rank_rccl_tests_all_reduce.txt": ([], {"all_reduce"}, True),
    "nccl-tests/t4_3node_old_layout_error_na_all_reduce.txt": ([], {"all_reduce"}, True),
    "nccl-tests/a100_8gpu_sendrecv_wrong_na_table_only.txt": (["--partial", "--world-size", "8"], {"sendrecv"}, True),
    "nccl-tests/rtx5090_2rank_1host_mpi_prefix_v2_18_all_reduce.txt": ([], {"all_reduce"}, False),
    "nccl-tests/v100_dgx2_12gpu_old_layout_5tests_concatenated.txt":
        ([], {"all_gather", "all_reduce", "broadcast", "reduce", "reduce_scatter"}, False),
    **{f"nccl-tests-algo/{path.name}": ([], {"all_reduce" if "_all_reduce_" in path.name else "broadcast"}, False)
       for path in sorted((DATA / "nccl-tests-algo").glob("*.txt"))},
}


@pytest.mark.parametrize("name", sorted(LOGS))
def test_each_real_log_imports_without_collective_as_the_test_it_is(tmp_path, name):
    options, collectives, inferred = LOGS[name]
    result = invoke(["import", "nccl-tests", str(DATA / name), *options, "--out", str(tmp_path), "--run-id", "r"])
    assert result.exit_code in (0, 1), result.output  # 1: a log whose own check found wrong elements
    rows = pd.read_csv(tmp_path / "r" / "results.csv")
    assert set(rows["collective"]) == collectives
    assert ("(inferred: busbw/algbw" in result.stdout) == inferred, result.stdout


def test_the_candidates_follow_the_factor_and_the_columns():
    """A 2-rank table of factor 1 that prints no redop or root: broadcast, reduce, sendrecv and all_reduce (2(n-1)/n
    is 1 at n = 2) all fit; a redop and a root leave reduce alone; (n-1)/n with redop none leaves two."""
    fits = infer.candidates([(0.99, 1.01)], 2, redops=set(), roots=set())
    assert fits == ["all_reduce", "broadcast", "reduce", "sendrecv"]
    assert infer.candidates([(0.99, 1.01)], 2, redops={"sum"}, roots={"0"}) == ["reduce"]
    assert infer.candidates([(0.87, 0.88)], 8, redops={"none"}, roots={"-1"}) == ["all_gather", "all_to_all"]


def test_a_table_without_its_name_that_fits_several_tests_is_refused_naming_them(tmp_path):
    """The V100 log's first table (all_gather, nccl-tests' 2017 layout: no redop column, and its busbw/algbw is 1),
    with the lines that name it removed: several tests fit, so the import names them and asks for --collective."""
    text = (DATA / "nccl-tests" / "v100_dgx2_12gpu_old_layout_5tests_concatenated.txt").read_text()
    first = text.split("# Avg bus bandwidth", 1)[0]
    tail = text.split("# Avg bus bandwidth", 1)[1].split("\n", 1)[0]
    lines = [line for line in f"{first}# Avg bus bandwidth{tail}\n".splitlines(keepends=True)
             if "_perf" not in line and "Collective test" not in line]
    cut = tmp_path / "all_gather_unnamed.txt"
    cut.write_text("".join(lines))
    assert_refused(invoke(["import", "nccl-tests", str(cut), "--out", str(tmp_path / "out")]),
                   fragment="fits one of broadcast, sendrecv; pass --collective NAME", left_empty=[tmp_path / "out"])


def test_a_collective_the_table_contradicts_is_refused(tmp_path):
    log = DATA / "nccl-tests" / "h100_2node_16rank_all_reduce.txt"
    refused = invoke(["import", "nccl-tests", str(log), "--collective", "all_gather", "--out", str(tmp_path / "out")])
    assert_refused(refused, fragment="--collective all_gather, but the table's busbw/algbw 1.875",
                   left_empty=[tmp_path / "out"])
    shutil.rmtree(tmp_path / "out", ignore_errors=True)
    agreed = invoke(["import", "nccl-tests", str(log), "--collective", "all_reduce", "--out", str(tmp_path / "ok")])
    assert agreed.exit_code == 0, agreed.output
