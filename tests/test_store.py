import json

import pytest

from commbench import store
from commbench.benches.collective import KIND as COLLECTIVE
from commbench.errors import CommbenchError

pytestmark = pytest.mark.no_process

RESULT_COLUMNS = COLLECTIVE.result_columns


def _row(**overrides):
    row = {column: 1 for column in RESULT_COLUMNS}
    row.update({"schema_version": store.SCHEMA_VERSION, "collective": "all_reduce", **overrides})
    return row


def test_rows_are_on_disk_after_each_write(tmp_path):
    writer = store.RowWriter(tmp_path / "results.csv", RESULT_COLUMNS)
    writer.write([_row(size_bytes=1024)])
    # read back before close: a crash after write() must not lose the row
    assert list(store.read_rows(tmp_path / "results.csv", RESULT_COLUMNS)["size_bytes"]) == [1024]
    writer.write([_row(size_bytes=2048)])
    writer.close()
    assert list(store.read_results(tmp_path, COLLECTIVE)["size_bytes"]) == [1024, 2048]


def test_reopened_writer_does_not_repeat_the_header(tmp_path):
    for size in (1, 2):
        writer = store.RowWriter(tmp_path / "results.csv", RESULT_COLUMNS)
        writer.write([_row(size_bytes=size)])
        writer.close()
    assert len(store.read_results(tmp_path, COLLECTIVE)) == 2


def test_torn_last_line_is_dropped(tmp_path):
    writer = store.RowWriter(tmp_path / "results.csv", RESULT_COLUMNS)
    writer.write([_row(size_bytes=1024)])
    writer.close()
    with open(tmp_path / "results.csv", "a") as file:
        file.write("1,run,collective,all_red")  # a writer killed mid-row
    assert list(store.read_results(tmp_path, COLLECTIVE)["size_bytes"]) == [1024]


def test_foreign_csv_is_refused_with_one_line(tmp_path):
    (tmp_path / "results.csv").write_text("a,b,c\n1,2,3\n")
    with pytest.raises(CommbenchError, match="not a commbench results file"):
        store.read_results(tmp_path, COLLECTIVE)


def test_newer_schema_is_refused(tmp_path):
    writer = store.RowWriter(tmp_path / "results.csv", RESULT_COLUMNS)
    writer.write([_row(schema_version=store.SCHEMA_VERSION + 1)])
    writer.close()
    with pytest.raises(CommbenchError, match="upgrade commbench"):
        store.read_results(tmp_path, COLLECTIVE)


def test_meta_update_keeps_other_fields(tmp_path):
    store.write_meta(tmp_path, {"schema_version": store.SCHEMA_VERSION, "status": "running", "a": 1})
    store.update_meta(tmp_path, status="complete")
    assert json.loads((tmp_path / "meta.json").read_text()) == {
        "schema_version": store.SCHEMA_VERSION, "status": "complete", "a": 1}
    assert not list(tmp_path.glob(".*tmp"))


def test_run_dirs_never_collide(tmp_path):
    first = store.create_run_dir(tmp_path, None)
    second = store.create_run_dir(tmp_path, None)
    assert first != second and first.is_dir() and second.is_dir()
    store.create_run_dir(tmp_path, "mine")
    with pytest.raises(CommbenchError, match="already exists"):
        store.create_run_dir(tmp_path, "mine")
    with pytest.raises(CommbenchError, match="not a folder name"):
        store.create_run_dir(tmp_path, "../escape")


def test_results_without_later_columns_still_read(tmp_path):
    core = COLLECTIVE.required_columns
    writer = store.RowWriter(tmp_path / "results.csv", core)
    writer.write([{column: 1 for column in core}])
    writer.close()
    frame = store.read_results(tmp_path, COLLECTIVE)
    assert set(RESULT_COLUMNS) <= set(frame.columns)
    assert frame["bytes_source"].isna().all()


def test_meta_names_the_kind_and_older_runs_are_migrated_from_their_rows(tmp_path):
    store.write_meta(tmp_path, {"schema_version": store.SCHEMA_VERSION, "kind": "ddp"})
    assert store.kind_name(tmp_path) == "ddp"
    # schema 1 before meta.json named the kind: the rows' `bench` value has always named it
    store.write_meta(tmp_path, {"schema_version": store.SCHEMA_VERSION})
    writer = store.RowWriter(tmp_path / "results.csv", RESULT_COLUMNS)
    writer.write([_row(bench="collective")])
    writer.close()
    assert store.kind_name(tmp_path) == "collective"
    (tmp_path / "results.csv").unlink()
    with pytest.raises(CommbenchError, match="does not name its bench kind"):
        store.kind_name(tmp_path)
