"""The row schema (commbench/schema/): every column declared once, the kinds' files made of declared columns, the
committed files readable by it, and docs/columns.md generated from it."""

import json
import pickle
from pathlib import Path

import pytest

from commbench.benches import KINDS
from commbench.profiling import nvml_sampler
from commbench.schema import collective, common, gpu, hunt, p2p, replay, training
from commbench.schema.column import Column
from commbench.schema.files import COLUMNS, FILES, NUMERIC_COLUMNS
from commbench.schema.reference import COMMAND, reference
from commbench.training.spec import SETTING_COLUMNS

pytestmark = pytest.mark.no_process

ROOT = Path(__file__).parent.parent
MODULES = (common, gpu, collective, training, hunt, p2p, replay)


def _declared(module) -> list[Column]:
    return [value for value in vars(module).values() if isinstance(value, Column)]


def test_the_column_reference_is_generated_from_the_schema():
    page = (ROOT / "docs" / "columns.md").read_text(encoding="utf-8")
    assert page == reference(), f"docs/columns.md is out of date: run {COMMAND}"


@pytest.mark.parametrize("kind", KINDS.values(), ids=list(KINDS))
def test_every_kind_writes_declared_columns_only(kind):
    files = [kind.result_columns, kind.sample_columns, kind.gpu_sample_columns or (), kind.iteration_columns or ()]
    for columns in files:
        assert all(isinstance(column, Column) for column in columns), columns
        assert len(set(columns)) == len(columns)
    assert set(kind.required_columns) <= set(kind.result_columns)


def test_every_declaration_is_in_a_file_and_agrees_with_its_namesakes():
    in_files = {id(column) for file in FILES for column in file.columns}
    for module in MODULES:
        for column in _declared(module):
            assert id(column) in in_files, f"{module.__name__}.{column.name} is declared but in no file"
            assert column.dtype == COLUMNS[column.name].dtype, column.name  # the store reads a name's one dtype
            assert column.unit == COLUMNS[column.name].unit, column.name
            assert column.meaning.endswith(".") and "|" not in column.meaning, column.name


def test_declarations_match_the_facts_they_name():
    assert training.SETTING_COLUMNS == SETTING_COLUMNS  # TrainConfig's settings, same names, same order
    assert set(nvml_sampler._COMBINE) == set(gpu.SUMMARY_COLUMNS)  # each GPU column has its combination
    assert {"time_us_p50", "busbw_gbps", "step_time_ms_p50", "n_wrong"} <= set(NUMERIC_COLUMNS)
    assert not {"note", "inplace", "fits", "bucket_cap_mb"} & set(NUMERIC_COLUMNS)


def test_a_column_is_its_name_wherever_a_name_goes():
    column = common.TIME_US_P50
    assert column == "time_us_p50" and hash(column) == hash("time_us_p50") and column.name == "time_us_p50"
    assert {column: 1}["time_us_p50"] == 1 and repr(column) == "'time_us_p50'" and f"{column}" == "time_us_p50"
    assert json.dumps({column: 1}) == '{"time_us_p50": 1}'
    assert pickle.loads(pickle.dumps({column: 1})) == {"time_us_p50": 1}  # rows gathered across ranks
    assert (column.unit, column.dtype) == ("us", "float")


def _committed(name: str) -> list[Path]:
    return sorted((ROOT / "results").rglob(name)) + sorted((ROOT / "tests" / "data").rglob(name))


@pytest.mark.parametrize("name, columns", [("results.csv", collective.RESULT_COLUMNS),
                                           ("samples.csv", collective.SAMPLE_COLUMNS)])
def test_committed_runs_hold_declared_columns_only(name, columns):
    """Runs written by older commbench versions (and the CI baselines) read back through the schema."""
    paths = _committed(name)
    assert paths
    for path in paths:
        header = path.read_text(encoding="utf-8").split("\n", 1)[0].split(",")
        assert set(header) <= set(columns), (path, set(header) - set(columns))


def test_a_row_the_collective_sweep_writes_has_the_declared_columns():
    from commbench.benches.collective import KIND
    from commbench.sweep.spec import SweepSpec, plan

    spec = SweepSpec(collectives=("all_reduce",), sizes=(1024,), dtypes=("float32",), ops=("sum",), placement="out",
                     warmup=1, iters=1, backend="gloo", device="cpu", nproc=2, timeout_s=60.0)
    row = KIND.unavailable_row(spec, plan(spec, 2)[0], run_id="r", world=2, reason="test")
    assert list(row) == list(collective.RESULT_COLUMNS)


def test_the_store_refuses_text_where_the_schema_declares_a_number(tmp_path):
    """The reader's number check comes from the declared dtypes: root (an int) holding text is refused at its
    line; note (text) may hold anything."""
    from commbench import store
    from commbench.errors import CommbenchError

    path = tmp_path / "results.csv"

    def write(**cells: str) -> None:
        values = {column: "" for column in collective.RESULT_COLUMNS}
        values.update(schema_version="1", world_size="2", size_bytes="1024", note="anything, 1.5", **cells)
        line = ",".join(f'"{values[column]}"' for column in collective.RESULT_COLUMNS)
        path.write_text(",".join(collective.RESULT_COLUMNS) + f"\n{line}\n", encoding="utf-8")

    write(root="-1")
    assert len(store.read_rows(path, collective.REQUIRED_COLUMNS, NUMERIC_COLUMNS)) == 1
    write(root="x")
    with pytest.raises(CommbenchError, match="line 2, column root: 'x' is not a number"):
        store.read_rows(path, collective.REQUIRED_COLUMNS, NUMERIC_COLUMNS)


def test_a_training_row_names_a_column_it_fills_but_the_schema_lacks():
    from commbench.training.measure import _in_file_order

    row = dict.fromkeys(training.RESULT_COLUMNS, 1)
    assert list(_in_file_order(dict(reversed(row.items())))) == list(training.RESULT_COLUMNS)
    with pytest.raises(RuntimeError, match=r"\['surprise_ms'\] measured but not declared"):
        _in_file_order({**row, "surprise_ms": 1.0})
    with pytest.raises(RuntimeError, match=r"\['loss_last'\] declared .* but not measured"):
        _in_file_order({column: 1 for column in training.RESULT_COLUMNS if column != "loss_last"})
