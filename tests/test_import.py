"""`commbench import`: real nccl-tests logs that other people published (tests/data/imports/README.md gives each
file's source), nccl-tests -J JSON made from one of them by its documented schema, and PARAM output from PARAM's
own comms.py. Each import is checked against the file it came from, read here independently of the importer."""

import json
import math
import re
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import commbench_env
from tests.refusals import assert_refused, invoke

DATA = Path(__file__).parent / "data" / "imports"
NCCL_TESTS, JSON_DIR, PARAM = DATA / "nccl-tests", DATA / "nccl-tests-json", DATA / "param"
_PREFIX = re.compile(r"^\[\d+,\d+\]<stdout>:")
_DATA_ROW = re.compile(r"^\s*\d+\s+\d+\s+[a-z]")


def file_busbw(path: Path) -> list[float]:
    """Every busbw the file prints, in order (out-of-place then in-place per row): the positions of the busbw
    columns in the latest column header, read off each row after it."""
    found, positions = [], []
    for line in path.read_text().splitlines():
        line = _PREFIX.sub("", line)
        tokens = line.lstrip("#").split()
        if line.startswith("#") and "busbw" in tokens:
            positions = [index for index, token in enumerate(tokens) if token == "busbw"]
        elif _DATA_ROW.match(line) and positions:
            found += [float(line.split()[index]) for index in positions]
    return found


def imported(tmp_path: Path, tool: str, *args: str, run_id: str = "imported") -> tuple[object, Path]:
    result = invoke(["import", tool, *map(str, args), "--out", str(tmp_path / "results"), "--run-id", run_id, "-q"])
    return result, tmp_path / "results" / run_id


def rows_and_meta(run_dir: Path) -> tuple[pd.DataFrame, dict]:
    return pd.read_csv(run_dir / "results.csv"), json.loads((run_dir / "meta.json").read_text())


# file, options, rows, world size, hosts, GPU names, tests (program, rows)
TEXT_LOGS = [
    ("a100_2node_16rank_mpi_prefix_old_layout_all_reduce.txt", ["--collective", "all_reduce"], 60, 16,
     ["nccl-tests-efa-16-worker-0", "nccl-tests-efa-16-worker-1"], ["16 x A100-SXM4-40GB"], 1),
    ("h100_2node_16rank_all_reduce.txt", ["--collective", "all_reduce"], 62, 16, ["ztan-mig-235z", "ztan-mig-gq73"],
     ["16 x NVIDIA H100 80GB HBM3"], 1),
    ("mi300x_2node_16rank_rccl_tests_all_reduce.txt", ["--collective", "all_reduce_perf"], 64, 16,
     ["gpu-53", "gpu-56"], ["16 x AMD Instinct MI300X"], 1),
    ("t4_3node_old_layout_error_na_all_reduce.txt", ["--collective", "all_reduce"], 22, 3, ["gpu01", "gpu02", "gpu03"],
     ["3 x Tesla T4"], 1),
    ("rtx5090_2rank_1host_mpi_prefix_v2_18_all_reduce.txt", [], 16, 2, ["lab"], ["2 x NVIDIA GeForce RTX 5090"], 1),
    ("v100_dgx2_12gpu_old_layout_5tests_concatenated.txt", [], 310, 12, ["seville"], ["12 x Tesla V100-SXM3-32GB"],
     5),
]


@pytest.mark.no_process
@pytest.mark.parametrize("name, options, n_rows, world, hosts, gpus, n_tests", TEXT_LOGS,
                         ids=[log[0].split("_")[0] + "-" + log[0].split("_")[1] for log in TEXT_LOGS])
def test_a_published_nccl_tests_log_imports_with_its_own_figures(tmp_path, name, options, n_rows, world, hosts, gpus,
                                                                  n_tests):
    path = NCCL_TESTS / name
    result, run_dir = imported(tmp_path, "nccl-tests", path, *options)
    assert result.exit_code in (0, 1), result.output + result.stderr
    rows, meta = rows_and_meta(run_dir)
    assert len(rows) == n_rows
    assert (rows["world_size"] == world).all() and meta["world_size"] == world
    assert meta["hosts"] == hosts and meta["device_names"] == gpus
    assert rows["busbw_gbps"].tolist() == file_busbw(path)  # exactly the printed figures, in the file's order
    assert set(rows["busbw_check"]) == {"agrees"}  # every busbw follows from size / time × nccl-tests' factor
    assert set(rows["source"]) == {"nccl-tests"} and set(rows["timing"]) == {"batch"}
    assert not (run_dir / "samples.csv").exists()
    source = meta["source"]
    assert source["tool"] == "nccl-tests" and source["files"][0]["name"] == name
    assert len(source["files"][0]["sha256"]) == 64
    tests = source["files"][0]["tests"]
    assert len(tests) == n_tests and sum(test["rows"] for test in tests) == n_rows
    start = 0
    for test in tests:  # nccl-tests' Avg bus bandwidth: the mean busbw of the test's rows, both placements
        mean = rows["busbw_gbps"].iloc[start:start + test["rows"]].mean()
        assert math.isclose(mean, test["avg_busbw_gbps"], abs_tol=0.005 + 1e-5 * mean), test
        start += test["rows"]
    assert result.exit_code == (1 if any(test["out_of_bounds"] for test in tests) else 0)


@pytest.mark.no_process
def test_old_layouts_keep_no_wrong_count_and_the_newest_keeps_it(tmp_path):
    _, old = imported(tmp_path, "nccl-tests", NCCL_TESTS / TEXT_LOGS[0][0], "--collective", "all_reduce",
                      run_id="old")
    _, new = imported(tmp_path, "nccl-tests", NCCL_TESTS / TEXT_LOGS[4][0], run_id="new")
    old_rows, new_rows = pd.read_csv(old / "results.csv"), pd.read_csv(new / "results.csv")
    assert old_rows["n_wrong"].isna().all()  # an `error` column is a deviation, not a count
    assert old_rows["note"].str.contains("largest deviation").all()
    assert (new_rows["n_wrong"] == 0).all()
    assert (new_rows["calls_per_sample"] == 50).all() and (new_rows["warmup"] == 10).all()
    assert json.loads((new / "meta.json").read_text())["backend_version"] == "nccl-tests 2.18.0"


def _log_2017(timings_ms: dict[int, tuple[float, float]]) -> str:
    """A log in nccl-tests' first layout (2017, commit b188a15: src/common.cu, src/all_reduce.cu), printed with its
    own printf formats: no '# nThread' line, ranks before the table, times in ms, a `res` column, closing lines
    without '#'. No such log was found published; this one is built to those formats from chosen times."""
    lines = ["$ ./build/all_reduce_perf -b 1M -e 16M -f 4 -g 2", "# Using devices"]
    lines += ["#   Rank %2d on %10s device %2d [0x%02x] %s" % (rank, "node1", rank, 0x1a + rank, "Tesla P100-SXM2-16GB")
              for rank in (0, 1)]
    lines += ["# %10s  %12s  %6s  %6s        out-of-place                    in-place" % ("", "", "", ""),
              "# %10s  %12s  %6s  %6s  %7s  %5s  %5s  %7s  %7s  %5s  %5s  %7s" % (
                  "bytes", "N", "type", "op", "time", "algbw", "busbw", "res", "time", "algbw", "busbw", "res")]
    busbws = []
    for size, times in timings_ms.items():
        line = "%12li  %12li  %6s  %6s" % (size, size // 4, "float", "sum")
        for ms in times:
            algbw = size / (ms * 1e-3) / 1e9  # all_reduce at 2 ranks: busbw = algbw × 2(n-1)/n = algbw
            busbws.append(algbw)
            line += "  %7.3f  %5.2f  %5.2f  %7.0e" % (ms, algbw, algbw, 0.0)
        lines.append(line)
    lines += [" Out of bounds values : 0 OK", " Avg bus bandwidth    : %g " % (sum(busbws) / len(busbws))]
    return "\n".join(lines) + "\n"


@pytest.mark.no_process
def test_the_2017_layout_imports_with_its_times_in_microseconds(tmp_path):
    timings = {1 << 20: (0.213, 0.209), 1 << 22: (0.598, 0.601), 1 << 24: (2.117, 2.131)}
    path = tmp_path / "all_reduce_2017.log"
    path.write_text(_log_2017(timings))
    result, run_dir = imported(tmp_path, "nccl-tests", path)
    assert result.exit_code == 0, result.output + result.stderr
    rows, meta = rows_and_meta(run_dir)
    assert rows["time_us_p50"].tolist() == pytest.approx([ms * 1000 for times in timings.values() for ms in times])
    assert set(rows["collective"]) == {"all_reduce"} and set(rows["busbw_check"]) == {"agrees"}
    assert meta["world_size"] == 2 and meta["device_names"] == ["2 x Tesla P100-SXM2-16GB"]
    assert rows["n_wrong"].isna().all()


@pytest.mark.no_process
def test_the_source_reporting_wrong_results_makes_exit_code_1(tmp_path):
    result, run_dir = imported(tmp_path, "nccl-tests", NCCL_TESTS / TEXT_LOGS[5][0])
    assert result.exit_code == 1
    assert "all_gather_perf: '# Out of bounds values : 4 FAILED'" in result.stderr
    assert (run_dir / "results.csv").exists()


@pytest.mark.no_process
def test_a_pasted_table_without_header_imports_with_the_options_that_say_what_it_was(tmp_path):
    path = NCCL_TESTS / "a100_8gpu_sendrecv_wrong_na_table_only.txt"
    refused, _ = imported(tmp_path, "nccl-tests", path, run_id="bare")
    assert_refused(refused, fragment="--partial")  # the table has no closing lines: the log was cut
    refused, _ = imported(tmp_path, "nccl-tests", path, "--partial", run_id="bare")
    assert_refused(refused, fragment="--world-size")  # no rank lines: the world size, and so the factor, unknown
    # its name is inferred (busbw/algbw 1 at 8 ranks, root -1: sendrecv), or given; both agree
    inferred, inferred_dir = imported(tmp_path, "nccl-tests", path, "--world-size", "8", "--partial",
                                      run_id="inferred")
    assert inferred.exit_code == 0, inferred.output
    program = rows_and_meta(inferred_dir)[1]["source"]["files"][0]["tests"][0]["program"]
    assert program.startswith("sendrecv_perf (inferred: busbw/algbw 1 at 8 ranks"), program
    result, run_dir = imported(tmp_path, "nccl-tests", path, "--collective", "sendrecv", "--world-size", "8",
                               "--partial")
    assert result.exit_code == 0, result.output
    rows, meta = rows_and_meta(run_dir)
    assert len(rows) == 8 and set(rows["collective"]) == {"sendrecv"} and set(rows["world_size"]) == {8}
    assert rows["busbw_gbps"].tolist() == file_busbw(path)
    assert rows.loc[rows["inplace"], "n_wrong"].isna().all()  # N/A: not checked
    assert "closing lines" in meta["source"]["files"][0]["tests"][0]["partial"]


@pytest.mark.no_process
def test_nccl_tests_json_imports_with_its_per_iteration_times_as_samples(tmp_path):
    path = JSON_DIR / "rtx5090_2rank_all_reduce_per_iteration.json"
    document = json.loads(path.read_text())
    result, run_dir = imported(tmp_path, "nccl-tests", path)
    assert result.exit_code == 0, result.output
    rows, meta = rows_and_meta(run_dir)
    assert len(rows) == 2 * len(document["results"]) and set(rows["world_size"]) == {2}
    printed = [result_[key]["bus_bw"] for result_ in document["results"] for key in ("out_of_place", "in_place")]
    assert rows["busbw_gbps"].tolist() == printed
    samples = pd.read_csv(run_dir / "samples.csv")
    expected = [time for result_ in document["results"] for key in ("out_of_place_per_iter", "in_place_per_iter")
                for time in result_[key]["times_us"]]
    assert samples["time_us"].tolist() == expected
    assert meta["hosts"] == ["lab"] and meta["backend_version"] == "22907"
    plain = JSON_DIR / "rtx5090_2rank_all_reduce.json"
    _, text_run = imported(tmp_path, "nccl-tests", NCCL_TESTS / TEXT_LOGS[4][0], run_id="text")
    _, json_run = imported(tmp_path, "nccl-tests", plain, run_id="json")
    columns = ["collective", "size_bytes", "inplace", "time_us_p50", "algbw_gbps", "busbw_gbps", "n_wrong"]
    assert pd.read_csv(text_run / "results.csv")[columns].equals(pd.read_csv(json_run / "results.csv")[columns])
    assert not (json_run / "samples.csv").exists()


@pytest.mark.no_process
@pytest.mark.parametrize("name, world, collectives", [
    ("param_2rank_gloo_cpu_all_reduce.txt", 2, ["all_reduce"]),
    ("param_4rank_gloo_cpu_4collectives.txt", 4, ["all_reduce", "all_gather", "reduce_scatter", "all_to_all"])])
def test_param_output_imports_with_its_percentiles(tmp_path, name, world, collectives):
    path = PARAM / name
    result, run_dir = imported(tmp_path, "param", path)
    assert result.exit_code == 0, result.output
    rows, meta = rows_and_meta(run_dir)
    printed = [line.split() for line in path.read_text().splitlines() if line.strip().startswith("COMMS-RES-")]
    assert len(rows) == len(printed)
    assert rows["size_bytes"].tolist() == [int(fields[1]) for fields in printed]
    assert rows["time_us_p50"].tolist() == [float(fields[3]) for fields in printed]
    assert rows["time_us_max"].tolist() == [float(fields[7]) for fields in printed]
    assert rows["busbw_gbps"].tolist() == [float(fields[9]) for fields in printed]
    assert list(dict.fromkeys(rows["collective"])) == collectives
    assert set(rows["world_size"]) == {world} and set(rows["backend"]) == {"gloo"} and set(rows["device"]) == {"cpu"}
    assert set(rows["busbw_check"]) == {"agrees"}
    assert meta["source"]["tool"] == "param" and meta["hosts"] == ["vm"]


BAD_FILES = {
    "a CSV": ("nccl-tests", "size,time\n8,1.0\n", [], "holds no nccl-tests table"),
    "PARAM output given as nccl-tests": ("nccl-tests", (PARAM / "param_2rank_gloo_cpu_all_reduce.txt").read_text(),
                                         [], "holds no nccl-tests table"),
    "nccl-tests output given as PARAM": ("param", (NCCL_TESTS / TEXT_LOGS[4][0]).read_text(), [],
                                         "holds no PARAM COMMS-RES table"),
    "a row cut short": ("nccl-tests", (NCCL_TESTS / TEXT_LOGS[4][0]).read_text()[:1600], [], "cut short"),
    "a table without its closing lines": ("nccl-tests", "\n".join(
        (NCCL_TESTS / TEXT_LOGS[4][0]).read_text().splitlines()[:22]) + "\n", [], "--partial"),
    "an average that the rows do not give": ("nccl-tests", (NCCL_TESTS / TEXT_LOGS[1][0]).read_text().replace(
        "   8589934592    2147483648     float     sum      -1    47535  180.71  338.82", "", 1)
        .replace(" 8589934592 ", " "), ["--collective", "all_reduce"], "does not match"),
    "mixed world sizes": ("nccl-tests", (NCCL_TESTS / "rtx2080ti_2gpu_6runs_concatenated_shell_prompts.txt")
                          .read_text(), [], "mixes world sizes"),
    "a world size against the rank lines": ("nccl-tests", (NCCL_TESTS / TEXT_LOGS[4][0]).read_text(),
                                            ["--world-size", "8"], "drop --world-size"),
    "another collective than the file names": ("nccl-tests", (NCCL_TESTS / TEXT_LOGS[4][0]).read_text(),
                                               ["--collective", "all_gather"], "drop --collective"),
    "an unknown collective": ("nccl-tests", "", ["--collective", "all_sum"], "not an nccl-tests test"),
    "foreign JSON": ("nccl-tests", '{"results": 3}', [], "not nccl-tests' -J output"),
    "JSON cut short": ("nccl-tests", (JSON_DIR / "rtx5090_2rank_all_reduce.json").read_text()[:900], [],
                       "not valid JSON"),
    "a PARAM row cut short": ("param", (PARAM / "param_2rank_gloo_cpu_all_reduce.txt").read_text()[:1200], [],
                              "cut short"),
    "binary": ("nccl-tests", b"\x89PNG\r\n\x1a\n\xff", [], "not UTF-8 text"),
}


@pytest.mark.no_process
@pytest.mark.parametrize("case", list(BAD_FILES))
def test_a_bad_file_is_refused_in_one_line(tmp_path, case):
    tool, content, options, fragment = BAD_FILES[case]
    path = tmp_path / "input.txt"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    result, run_dir = imported(tmp_path, tool, path, *options)
    assert_refused(result, fragment=fragment)
    assert not run_dir.exists()


@pytest.mark.no_process
def test_files_of_different_world_sizes_are_not_one_run(tmp_path):
    result, run_dir = imported(tmp_path, "nccl-tests", NCCL_TESTS / TEXT_LOGS[1][0], NCCL_TESTS / TEXT_LOGS[4][0],
                               "--collective", "all_reduce")
    assert_refused(result, fragment="different world sizes")
    assert not run_dir.exists()


@pytest.mark.no_process
def test_report_and_fit_read_an_imported_run(tmp_path):
    _, run_dir = imported(tmp_path, "nccl-tests", NCCL_TESTS / "h100_2node_16rank_all_reduce.txt", "--collective",
                          "all_reduce")
    out = tmp_path / "report"
    report = invoke(["report", str(run_dir), "--out", str(out)])
    assert report.exit_code == 0, report.output + report.stderr + repr(report.exception)
    assert (out / "busbw_vs_size.png").stat().st_size > 0 and (out / "latency_fit.png").stat().st_size > 0
    assert "nccl-tests: h100_2node" in (out / "report.html").read_text()  # the report names where the rows came from
    # the V100 log has 0-byte rows, which a log size axis cannot show (they made the report fail): the plots drop them
    from commbench.report.collective_plots import _rows
    from commbench.runs import load_run

    _, v100 = imported(tmp_path, "nccl-tests", NCCL_TESTS / TEXT_LOGS[5][0], run_id="v100")
    loaded = load_run(v100)
    assert (loaded.results["size_bytes"] == 0).sum() == 12 and (_rows([loaded])["size_bytes"] > 0).all()
    fit = invoke(["fit", str(run_dir), "--json"])
    assert fit.exit_code == 0, fit.output
    fits = json.loads(fit.stdout)["fits"]
    assert {(entry["collective"], entry["world_size"], entry["inplace"]) for entry in fits} == {
        ("all_reduce", 16, False), ("all_reduce", 16, True)}
    for entry in fits:  # busbw from the fit's algbw with all_reduce's factor at 16 ranks
        assert math.isclose(entry["busbw_gbps"], entry["algbw_gbps"] * 2 * 15 / 16)


@pytest.mark.no_process
def test_two_imports_of_one_tool_compare_as_runs_do(tmp_path):
    path = NCCL_TESTS / "h100_2node_16rank_all_reduce.txt"
    _, first = imported(tmp_path, "nccl-tests", path, "--collective", "all_reduce", run_id="first")
    _, second = imported(tmp_path, "nccl-tests", path, "--collective", "all_reduce", run_id="second")
    result = invoke(["compare", str(first), str(second), "--json"])
    assert result.exit_code == 0, result.output
    entries = json.loads(result.stdout)["entries"]
    zero = (pd.read_csv(first / "results.csv")["busbw_gbps"] == 0).sum()  # printed 0.00: judged on time instead
    verdicts = [entry["verdict"] for entry in entries]
    assert len(entries) == 62 and verdicts.count("ok") == 62
    assert zero and [entry["metric"] for entry in entries].count("time") == zero
    assert any("records no per-iteration samples" in note for note in json.loads(result.stdout)["notes"])


@pytest.mark.distributed
def test_an_imported_param_run_compares_with_a_commbench_sweep(tmp_path):
    import subprocess

    param_path = PARAM / "param_2rank_gloo_cpu_all_reduce.txt"
    _, param_run = imported(tmp_path, "param", param_path, run_id="param")
    sweep = subprocess.run([sys.executable, "-m", "commbench", "sweep", "-c", "all_reduce", "--impl", "builtin",
                            "--sizes", "1K:1M:x4", "--backend", "gloo", "--device", "cpu", "--nproc", "2",
                            "--iters", "6", "--warmup", "1", "--timing", "batch", "--timing", "per-iteration",
                            "--out", str(tmp_path / "results"), "--run-id", "sweep", "-q"],
                           cwd=tmp_path, env=commbench_env(), capture_output=True, text=True, timeout=240)
    assert sweep.returncode == 0, sweep.stderr
    result = invoke(["compare", str(param_run), str(tmp_path / "results" / "sweep"), "--json"])
    assert result.exit_code in (0, 1), result.output  # the verdicts are this machine's; the join is the property
    document = json.loads(result.stdout)
    joined = [entry for entry in document["entries"] if entry.get("metric") == "busbw"]
    assert len(joined) == 6  # every PARAM size meets commbench's builtin batch row of the same size
    assert all(entry["row"].endswith("[source param vs commbench]") and " per-iteration " not in entry["row"]
               for entry in joined)  # joined with the batch rows (the default timing, unnamed in labels)
    # PARAM records no samples: no significance test; the sources are a key of every row
    assert all(entry["p_value"] is None and entry["source"] == "param vs commbench" for entry in joined)
    notes = " ".join(document["notes"])
    assert "different tools" in notes and "PARAM (--z 0" in notes and "commbench" in notes
    _, nccl_run = imported(tmp_path, "nccl-tests", NCCL_TESTS / TEXT_LOGS[4][0], run_id="nccl")
    # an NCCL log of GPUs against a gloo sweep on CPU: no row of one measured as any of the other, so refused
    across = invoke(["compare", str(nccl_run), str(tmp_path / "results" / "sweep"), "--json"])
    assert across.exit_code == 2 and "nothing to compare" in across.output, across.output
    assert "backend nccl vs gloo" in across.output and "device cuda vs cpu" in across.output
