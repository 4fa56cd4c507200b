"""An imported nccl-tests run says the log's own `# Avg bus bandwidth` (nccl-tests averages unrounded busbw, so the
mean of its rounded rows may differ in the last digit), and its start_time is the log's where the log records one
(nccl-tests -J, -S 1 timestamps, the NCCL Inspector's dump times), labelled as such, else the import's."""

import json
import re
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import pytest

from commbench import store
from commbench.benches.collective import KIND
from commbench.sweep.table_averages import source_average
from tests.refusals import invoke

pytestmark = pytest.mark.no_process

DATA = Path(__file__).parent / "data" / "imports"
NCCL_TESTS = DATA / "nccl-tests"
H100 = NCCL_TESTS / "h100_2node_16rank_all_reduce.txt"
V100 = NCCL_TESTS / "v100_dgx2_12gpu_old_layout_5tests_concatenated.txt"
JSON_LOG = DATA / "nccl-tests-json" / "rtx5090_2rank_all_reduce.json"
INSPECTOR = DATA / "nccl-inspector" / "readme_v4.0_allreduce_example.json"
PARAM = DATA / "param" / "param_2rank_gloo_cpu_all_reduce.txt"
_LOG_AVERAGE = re.compile(r"Avg bus bandwidth\s*:\s*(\S+)")
_TABLE_AVERAGE = re.compile(r"^# Avg bus bandwidth: (\S+) GB/s \((\d+) results, the log's own figure\)", re.MULTILINE)
_ROW = re.compile(r"^\s*\d+\s+\d+\s+[a-z]")


def imported(tmp_path: Path, tool: str, *files: Path, run_id: str = "imported") -> tuple[object, Path]:
    result = invoke(["import", tool, *map(str, files), "--out", str(tmp_path / "results"), "--run-id", run_id])
    assert result.exit_code in (0, 1), result.output + result.stderr
    return result, tmp_path / "results" / run_id


def log_averages(path: Path) -> list[str]:
    """Each test's `# Avg bus bandwidth` as the log prints it, read here apart from the importer."""
    return [match.group(1) for line in path.read_text().splitlines() if (match := _LOG_AVERAGE.search(line))]


@pytest.mark.parametrize("path", [H100, V100, NCCL_TESTS / "a100_2node_16rank_mpi_prefix_old_layout_all_reduce.txt",
                                  NCCL_TESTS / "mi300x_2node_16rank_rccl_tests_all_reduce.txt"],
                         ids=lambda path: path.name.split("_")[0])
def test_the_tables_print_each_logs_own_average(tmp_path, path):
    result, run_dir = imported(tmp_path, "nccl-tests", path)
    printed = _TABLE_AVERAGE.findall(result.stdout)
    assert [figure for figure, _ in printed] == log_averages(path)
    rows = store.read_results(run_dir, KIND)
    assert sum(int(count) for _, count in printed) == len(rows)
    key_numbers = KIND.key_numbers(rows)["Avg bus bandwidth (GB/s)"].tolist()
    assert key_numbers == [round(float(figure), 3) for figure in log_averages(path)]


def test_the_h100_logs_average_is_not_the_mean_of_its_rounded_rows(tmp_path):
    """The case the figure above guards: the rows' mean at three decimals says 70.741, the log says 70.742."""
    rows = [float(value) for line in H100.read_text().splitlines() if _ROW.match(line)
            for value in (line.split()[7], line.split()[11])]
    assert f"{sum(rows) / len(rows):.3f}" == "70.741" and log_averages(H100) == ["70.742"]
    result, _ = imported(tmp_path, "nccl-tests", H100)
    assert "# Avg bus bandwidth: 70.742 GB/s (62 results, the log's own figure)" in result.stdout


def test_a_table_of_several_tests_weighs_their_averages_and_a_part_of_a_test_has_none():
    frame = pd.DataFrame({"busbw_gbps": [1.0, 2.0, 3.0, 10.0], "source_file": ["a.log"] * 4,
                          "source_avg_busbw_gbps": [2.01, 2.01, 2.01, 10.02], "source_avg_results": [3, 3, 3, 1]})
    figure, tests = source_average(frame)
    assert tests == 2 and figure == pytest.approx((3 * 2.01 + 10.02) / 4)  # nccl-tests' mean over the 4 results
    assert source_average(frame.iloc[:2]) is None  # 2 of the 3 results its line averages
    assert source_average(frame.drop(columns="source_avg_results")) is None  # a sweep's rows, PARAM's


def _meta(run_dir: Path) -> dict:
    return json.loads((run_dir / "meta.json").read_text())


def test_a_json_logs_start_time_is_the_runs(tmp_path):
    logged = json.loads(JSON_LOG.read_text())["start_time"]
    result, run_dir = imported(tmp_path, "nccl-tests", JSON_LOG)
    meta = _meta(run_dir)
    assert datetime.fromisoformat(meta["start_time"]) == datetime.strptime(logged, "%Y-%m-%d %H:%M:%S")
    assert meta["start_time_source"] == "log" and meta["imported_at"] != meta["start_time"]
    assert meta["source"]["start_time"].startswith(f"{JSON_LOG.name}: its start_time (nccl-tests -J)")
    assert f"# ran at {meta['start_time']} ({JSON_LOG.name}: " in result.stdout
    assert f"imported at {meta['imported_at']}" in result.stdout


def _with_timestamps(path: Path, first: datetime) -> str:
    """The log as nccl-tests -S 1 prints it (src/util.cu writeResultHeader, writeTimestamp): a timestamp column
    after the in-place group, each row's time right-aligned in 21 characters, a second apart. A schema exercise: no
    published log printed with -S 1 was found."""
    lines, second = [], 0
    for line in path.read_text().splitlines():
        if line.startswith("#") and "busbw" in line.split():
            line += "  timestamp"
        elif _ROW.match(line):
            stamp = first.replace(second=second % 60, minute=first.minute + second // 60)
            line += f"{stamp:%Y-%m-%d %H:%M:%S}".rjust(21)
            second += 1
        lines.append(line)
    return "\n".join(lines) + "\n"


def test_a_text_log_printed_with_timestamps_starts_at_its_first_rows(tmp_path):
    first = datetime(2025, 7, 1, 9, 15, 0)
    path = tmp_path / "h100_with_timestamps.txt"
    path.write_text(_with_timestamps(H100, first))
    _, run_dir = imported(tmp_path, "nccl-tests", path)
    meta = _meta(run_dir)
    assert meta["start_time_source"] == "log" and datetime.fromisoformat(meta["start_time"]) == first
    assert len(store.read_results(run_dir, KIND)) == 62  # the timestamps are not read as figures


def test_an_inspector_logs_start_time_is_its_first_dump_in_utc(tmp_path):
    dumped = json.loads(INSPECTOR.read_text())["metadata"]["dump_timestamp_us"]
    _, run_dir = imported(tmp_path, "nccl-inspector", INSPECTOR)
    meta = _meta(run_dir)
    assert meta["start_time_source"] == "log"
    assert datetime.fromisoformat(meta["start_time"]) == \
        datetime.fromtimestamp(dumped // 1_000_000, timezone.utc)


@pytest.mark.parametrize("tool, path", [("nccl-tests", H100), ("param", PARAM)], ids=["nccl-tests-text", "param"])
def test_a_log_without_a_time_keeps_the_import_time_and_says_so(tmp_path, tool, path):
    before = datetime.now(timezone.utc).replace(microsecond=0)
    result, run_dir = imported(tmp_path, tool, path)
    meta = _meta(run_dir)
    assert meta["start_time_source"] == "import" and meta["start_time"] == meta["imported_at"]
    assert datetime.fromisoformat(meta["start_time"]) >= before
    assert f"# imported at {meta['imported_at']}; the files record no time of their run" in result.stdout
