"""`commbench import … --env NAME=VALUE`: every imported row is labelled with the environment the log was taken under
(the label a sweep's --env-axis rows carry), and a malformed --env is refused in one line before anything is read or
written. The logs are the real published ones in tests/data/imports (their README.md gives each source)."""

from pathlib import Path

import pandas as pd
import pytest

from commbench.sweep.env_axes import label_of, parse_label
from tests.refusals import assert_refused, invoke

pytestmark = pytest.mark.no_process

DATA = Path(__file__).parent / "data" / "imports"
ALGO = DATA / "nccl-tests-algo"
TREE_LOG = ALGO / "rtx5090_2rank_1gpu_socket_all_reduce_NCCL_ALGO-Tree_NCCL_PROTO-Simple.txt"
PARAM_LOG = DATA / "param" / "param_2rank_gloo_cpu_all_reduce.txt"


def _import(tmp_path: Path, tool: str, path: Path, *options: str, run_id: str = "imported"):
    result = invoke(["import", tool, str(path), *options, "--out", str(tmp_path / "results"), "--run-id", run_id,
                     "-q"])
    return result, tmp_path / "results" / run_id


def _envs(run_dir: Path) -> set[str]:
    """The env cells as written (an empty cell reads back as NaN, shown here as "")."""
    rows = pd.read_csv(run_dir / "results.csv", keep_default_na=False, dtype={"env": str})
    return set(rows["env"])


def test_env_labels_every_row_of_an_nccl_tests_log_with_its_sorted_label(tmp_path):
    # given in the other order than the label sorts them: the label is the same either way
    result, run_dir = _import(tmp_path, "nccl-tests", TREE_LOG, "--env", "NCCL_PROTO=Simple", "--env",
                              "NCCL_ALGO=Tree")
    assert result.exit_code == 0, result.output + result.stderr
    label = "NCCL_ALGO=Tree NCCL_PROTO=Simple"
    assert _envs(run_dir) == {label}
    assert label == label_of({"NCCL_PROTO": "Simple", "NCCL_ALGO": "Tree"})
    assert parse_label(label) == {"NCCL_ALGO": "Tree", "NCCL_PROTO": "Simple"}
    rows = pd.read_csv(run_dir / "results.csv")
    assert len(rows) == 50  # 25 sizes x both placements, as the log prints them
    meta = pd.read_json(run_dir / "meta.json", typ="series")
    assert meta["source"]["env"] == label


def test_without_env_the_rows_carry_the_default_environment(tmp_path):
    result, run_dir = _import(tmp_path, "nccl-tests", TREE_LOG)
    assert result.exit_code == 0, result.output + result.stderr
    assert _envs(run_dir) == {""}


def test_the_env_label_is_said_in_the_import_summary(tmp_path):
    result = invoke(["import", "nccl-tests", str(TREE_LOG), "--env", "NCCL_ALGO=Tree", "--out",
                     str(tmp_path / "results"), "--run-id", "shown"])
    assert result.exit_code == 0, result.output + result.stderr
    assert "# env: every row is labelled NCCL_ALGO=Tree (--env)" in result.stdout


def test_param_imports_take_env_too_since_they_share_the_code_path(tmp_path):
    result, run_dir = _import(tmp_path, "param", PARAM_LOG, "--env", "OMP_NUM_THREADS=1")
    assert result.exit_code == 0, result.output + result.stderr
    assert _envs(run_dir) == {"OMP_NUM_THREADS=1"}


def test_a_list_value_is_kept_whole(tmp_path):
    """NCCL_ALGO=ring,tree is a legal NCCL setting (either algorithm); the label keeps it, tune refuses to write it."""
    result, run_dir = _import(tmp_path, "nccl-tests", TREE_LOG, "--env", "NCCL_ALGO=ring,tree")
    assert result.exit_code == 0, result.output + result.stderr
    assert _envs(run_dir) == {"NCCL_ALGO=ring,tree"}


@pytest.mark.parametrize("value, fragment", [
    ("NCCL_ALGO", "sets no value; give NAME=VALUE"),
    ("1NCCL=tree", "is not an environment variable name"),
    ("NCCL-ALGO=tree", "is not an environment variable name"),
    ("=tree", "is not an environment variable name"),
    ("NCCL_ALGO=", "the value is empty or holds a space"),
    ("NCCL_ALGO=tree ring", "the value is empty or holds a space"),
])
def test_a_malformed_env_is_refused_in_one_line_before_anything_is_written(tmp_path, value, fragment):
    result, _ = _import(tmp_path, "nccl-tests", TREE_LOG, "--env", value)
    assert_refused(result, fragment=fragment, left_empty=[tmp_path / "results"])


def test_the_same_variable_twice_is_refused(tmp_path):
    result, _ = _import(tmp_path, "nccl-tests", TREE_LOG, "--env", "NCCL_ALGO=tree", "--env", "NCCL_ALGO=ring")
    line = assert_refused(result, fragment="--env sets NCCL_ALGO twice", left_empty=[tmp_path / "results"])
    assert "give each variable once" in line


def test_a_bad_env_is_refused_before_the_file_is_read(tmp_path):
    """The refusal names --env, not the missing file: option problems are found first."""
    result, _ = _import(tmp_path, "nccl-tests", tmp_path / "missing.log", "--env", "NCCL_ALGO")
    assert_refused(result, fragment="--env 'NCCL_ALGO' sets no value")
