"""`commbench import nccl-inspector`: NVIDIA's own examples of NCCL Inspector output (tests/data/imports/
nccl-inspector, copied verbatim from its READMEs; README.md there gives each source) import with every figure in
its row, read here from the file independently of the importer; the plugin's one-line-per-record form, several
calls, communicators and algorithm/protocols, the v4.1 and v4.3 records, compare with another tool's rows, report on
the import, and bad input refused in one line."""

import json
import math
import statistics
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import commbench_env
from tests.refusals import assert_refused, invoke

DATA = Path(__file__).parent / "data" / "imports"
INSPECTOR = DATA / "nccl-inspector"
ALL_REDUCE = INSPECTOR / "readme_v4.0_allreduce_example.json"
VERBOSE = INSPECTOR / "readme_v4.0_verbose_reducescatter_example.json"
WITH_ALGO = INSPECTOR / "readme_v4.2_comm_patterns_allreduce_example.json"
H100_LOG = DATA / "nccl-tests" / "h100_2node_16rank_all_reduce.txt"
OURS = {"AllReduce": "all_reduce", "ReduceScatter": "reduce_scatter", "AllGather": "all_gather"}


def _import(tmp_path: Path, *args, run_id: str = "inspector", tool: str = "nccl-inspector"):
    result = invoke(["import", tool, *map(str, args), "--out", str(tmp_path / "results"), "--run-id", run_id, "-q"])
    return result, tmp_path / "results" / run_id


def _rows(run_dir: Path) -> pd.DataFrame:
    return pd.read_csv(run_dir / "results.csv", keep_default_na=False, na_values=[""])


def _meta(run_dir: Path) -> dict:
    return json.loads((run_dir / "meta.json").read_text())


def _compact(record: dict) -> str:
    """A record as the plugin writes it: one line, no spaces (json.cc)."""
    return json.dumps(record, separators=(",", ":"))


def _call(record: dict, time_us: int, **changes) -> dict:
    """The record with another execution time, its algbw and busbw computed as inspector.cc's inspectorComputeOpBw
    computes them (printed with %lf), and other fields changed: a call of the same shape as NVIDIA's example."""
    call = json.loads(json.dumps(record))
    for key, value in changes.items():
        part, name = key.split("__")
        call[part][name] = value
    perf = call["coll_perf"]
    n = call["header"]["n_ranks"]
    traffic = perf["coll_msg_size_bytes"] * (n if perf["coll"] in ("AllGather", "ReduceScatter") else 1)
    factor = {"AllReduce": 2 * (n - 1) / n, "AllGather": (n - 1) / n, "ReduceScatter": (n - 1) / n}[perf["coll"]]
    algbw = traffic / 1e9 / (time_us / 1e6)
    perf.update(coll_exec_time_us=time_us, coll_algobw_gbs=float(f"{algbw:f}"),
                coll_busbw_gbs=float(f"{algbw * factor:f}"))
    return call


@pytest.mark.no_process
@pytest.mark.parametrize("path", [ALL_REDUCE, VERBOSE, WITH_ALGO], ids=["v4.0", "v4.0-verbose", "v4.2"])
def test_the_readme_examples_import_with_every_figure_in_the_row(tmp_path, path):
    example = json.loads(path.read_text())
    header, metadata, perf = example["header"], example["metadata"], example["coll_perf"]
    result, run_dir = _import(tmp_path, path)
    assert result.exit_code == 0, result.output + result.stderr
    rows, meta = _rows(run_dir), _meta(run_dir)
    assert len(rows) == 1
    row = rows.iloc[0]
    n = header["n_ranks"]
    collective = OURS[perf["coll"]]
    assert row["collective"] == collective and row["world_size"] == n and meta["world_size"] == n
    # the buffer's size as nccl-tests names it: the Inspector logs one rank's part of a reduce_scatter
    whole = perf["coll_msg_size_bytes"] * (n if collective == "reduce_scatter" else 1)
    assert row["size_bytes"] == whole
    assert row["time_us_p50"] == perf["coll_exec_time_us"] == row["time_us_mean"] == row["time_us_min"]
    assert row["algbw_gbps"] == perf["coll_algobw_gbs"] and row["busbw_gbps"] == perf["coll_busbw_gbs"]
    # the Inspector's algbw is the whole buffer over the time, as commbench's and nccl-tests' is
    assert math.isclose(row["algbw_gbps"], whole / perf["coll_exec_time_us"] / 1e3, rel_tol=1e-6)
    assert row["busbw_check"] == "agrees"
    assert row["iters"] == 1 and row["calls_per_sample"] == 1 and pd.isna(row["n_wrong"])
    assert row["rank"] == header["rank"]
    assert row["communicator"] == f"{header['id']} {header.get('comm_name', '')}".strip()
    assert row["algo_proto"] == f"{perf.get('coll_algo', 'unknown')}_{perf.get('coll_proto', 'unknown')}"
    timed_by = perf.get("coll_timing_source", "not recorded")
    assert row["note"].startswith(f"nccl-inspector: median of 1 call(s) on rank {header['rank']}, timed by {timed_by}")
    assert row["source"] == "nccl-inspector" and row["source_file"] == path.name
    assert row["timing"] == "per-iteration" and row["impl"] == "builtin"
    assert row["backend"] == "nccl" and row["device"] == "cuda"
    assert row["dtype"] == "unknown" and row["op"] == "unknown" and bool(row["inplace"]) is (collective == "all_reduce")
    assert row["timing_method"].startswith("nccl-inspector: each call of the live job")
    assert meta["hosts"] == [metadata["hostname"]]
    test = meta["source"]["files"][0]["tests"][0]
    assert test["header"] == f"{metadata['hostname']} pid {metadata['pid']}"
    assert test["format"] == metadata["inspector_output_format_version"] and test["nnodes"] == header["nnodes"]
    assert test["coll_sn"] == [perf["coll_sn"]] * 2
    assert test["dump_timestamp_us"] == [metadata["dump_timestamp_us"]] * 2
    assert meta["source"]["files"][0]["version"] == (metadata.get("git_rev") or None)
    samples = pd.read_csv(run_dir / "samples.csv")
    assert samples["time_us"].tolist() == [perf["coll_exec_time_us"]]
    assert "no dtype or reduction" in result.stderr  # said once, with what makes compare join


@pytest.mark.no_process
def test_the_verbose_form_reads_its_event_traces(tmp_path):
    example = json.loads(VERBOSE.read_text())
    result, run_dir = _import(tmp_path, VERBOSE)
    assert result.exit_code == 0, result.output + result.stderr
    channels = len(example["coll_perf"]["event_trace_ts"]["kernel_events"])
    assert _rows(run_dir).iloc[0]["note"].endswith(f"event traces on {channels} kernel channel(s)")
    test = _meta(run_dir)["source"]["files"][0]["tests"][0]
    assert test["verbose_records"] == 1 and test["kernel_channels"] == [channels]
    # the sequence-number and timestamp traces must name the same channels: an edited one is refused
    example["coll_perf"]["event_trace_sn"]["kernel_events"].append({"channel_id": 1})
    edited = tmp_path / "edited.log"
    edited.write_text(_compact(example) + "\n")
    refused, folder = _import(tmp_path, edited, run_id="edited")
    assert_refused(refused, fragment="different kernel channels")
    assert not folder.exists()


@pytest.mark.no_process
def test_the_plugins_one_line_records_aggregate_per_collective_size_algorithm_and_communicator(tmp_path):
    example = json.loads(WITH_ALGO.read_text())
    ring_ll = [61974, 62010, 61900, 65000, 61990, 61950]  # an even count: the lower middle call is the row's
    ring_simple = [59000, 59500, 60100]
    other = [30000, 30100, 30200]
    records = [_call(example, time, coll_perf__coll_sn=1407 + index) for index, time in enumerate(ring_ll)]
    records += [_call(example, time, coll_perf__coll_proto="SIMPLE") for time in ring_simple]
    records += [_call(example, time, header__id="0x11", header__comm_name="TP Group 0") for time in other]
    p2p = {"header": example["header"], "metadata": example["metadata"],
           "p2p_perf": {"p2p": "Send", "p2p_sn": 1, "p2p_peer": 3, "p2p_msg_size_bytes": 65536,
                        "p2p_exec_time_us": 12, "p2p_timing_source": "kernel_gpu", "p2p_algobw_gbs": 5.461333,
                        "p2p_busbw_gbs": 5.461333}}
    log = tmp_path / "example-hostname-pid1639453.log"
    log.write_text("".join(_compact(record) + "\n" for record in [*records, p2p]))
    result, run_dir = _import(tmp_path, log, "--dtype", "bfloat16", "--op", "sum")
    assert result.exit_code == 0, result.output + result.stderr
    assert "1 p2p_perf record(s) skipped" in result.stderr
    rows = _rows(run_dir).set_index(["communicator", "algo_proto"])
    assert len(rows) == 3
    for (communicator, algo_proto), times in [(("0x7f8c496ae9f661 DP Group 0", "RING_LL"), ring_ll),
                                              (("0x7f8c496ae9f661 DP Group 0", "RING_SIMPLE"), ring_simple),
                                              (("0x11 TP Group 0", "RING_LL"), other)]:
        row = rows.loc[(communicator, algo_proto)]
        median_call = sorted(times)[(len(times) - 1) // 2]
        logged = next(record["coll_perf"] for record in records
                      if record["coll_perf"]["coll_exec_time_us"] == median_call)
        assert row["time_us_p50"] == median_call and row["iters"] == len(times)
        assert row["busbw_gbps"] == logged["coll_busbw_gbs"] and row["algbw_gbps"] == logged["coll_algobw_gbs"]
        assert math.isclose(row["time_us_mean"], statistics.mean(times))
        assert row["time_us_min"] == min(times) and row["time_us_max"] == max(times)
        assert math.isclose(row["time_us_stdev"], statistics.stdev(times))
        assert row["busbw_check"] == "agrees"
        assert row["dtype"] == "bfloat16" and row["op"] == "sum" and row["count"] == 17179869184 // 2
    # six calls give the median a 95 % interval (a distribution-free one needs six); three do not
    assert not pd.isna(rows.loc[("0x7f8c496ae9f661 DP Group 0", "RING_LL"), "time_us_ci_lo"])
    assert pd.isna(rows.loc[("0x11 TP Group 0", "RING_LL"), "time_us_ci_lo"])
    samples = pd.read_csv(run_dir / "samples.csv")
    assert sorted(samples["time_us"]) == sorted(ring_ll + ring_simple + other)


@pytest.mark.no_process
def test_a_busbw_that_does_not_follow_from_the_time_is_said(tmp_path):
    example = json.loads(ALL_REDUCE.read_text())
    example["coll_perf"]["coll_busbw_gbs"] = 500.0
    edited = tmp_path / "edited.log"
    edited.write_text(_compact(example) + "\n")
    result, run_dir = _import(tmp_path, edited)
    assert result.exit_code == 0, result.output + result.stderr
    assert _rows(run_dir).iloc[0]["busbw_check"].startswith("differs: 485.119")
    assert "print a busbw that does not follow from their size and time" in result.stderr


@pytest.mark.no_process
def test_v4_1_dump_stats_say_what_the_ring_buffer_dropped(tmp_path):
    example = json.loads(ALL_REDUCE.read_text())
    example["metadata"]["inspector_output_format_version"] = "v4.1"
    stats = {"header": example["header"], "metadata": example["metadata"],
             "dump_stats": {"coll_records": 1, "coll_dropped_total": 4096, "coll_dropped_since_last_dump": 512,
                            "p2p_records": 0, "p2p_dropped_total": 0, "p2p_dropped_since_last_dump": 0}}
    log = tmp_path / "v41.log"
    log.write_text(_compact(stats) + "\n" + _compact(example) + "\n")
    result, run_dir = _import(tmp_path, log)
    assert result.exit_code == 0, result.output + result.stderr
    assert "dropped 4096 collective record(s) of communicator 0x7f8c496ae9f661 rank 2" in result.stderr
    assert len(_rows(run_dir)) == 1


def _v4_3_stream(example: dict, *, announced: int, bare: int) -> str:
    """The v4.3 layout (inspector_json_reader.py): a dump_stats marker with the header and metadata, then bare
    records that take their context from it."""
    metadata = {**example["metadata"], "inspector_output_format_version": "v4.3"}
    marker = {"header": example["header"], "metadata": metadata,
              "dump_stats": {"coll_records": announced, "coll_dropped_total": 0, "p2p_records": 0,
                             "p2p_dropped_total": 0}}
    calls = [{"coll_perf": _call(example, 61974 + index)["coll_perf"]} for index in range(bare)]
    return "".join(_compact(record) + "\n" for record in [marker, *calls])


@pytest.mark.no_process
def test_a_v4_3_stream_gives_its_bare_records_the_markers_context(tmp_path):
    example = json.loads(ALL_REDUCE.read_text())
    log = tmp_path / "v43.log"
    log.write_text(_v4_3_stream(example, announced=3, bare=3))
    result, run_dir = _import(tmp_path, log)
    assert result.exit_code == 0, result.output + result.stderr
    row = _rows(run_dir).iloc[0]
    assert row["iters"] == 3 and row["rank"] == 2 and row["world_size"] == 8 and row["time_us_p50"] == 61975
    assert _meta(run_dir)["source"]["files"][0]["tests"][0]["format"] == "v4.3"


@pytest.mark.no_process
@pytest.mark.parametrize("announced, bare, fragment", [
    (3, 2, "announces 1 coll_perf record(s) more than follow it"),
    (1, 2, "that no v4.3 dump_stats record before it announces"),
])
def test_a_cut_or_filtered_v4_3_stream_is_refused(tmp_path, announced, bare, fragment):
    log = tmp_path / "v43.log"
    log.write_text(_v4_3_stream(json.loads(ALL_REDUCE.read_text()), announced=announced, bare=bare))
    assert_refused(_import(tmp_path, log)[0], fragment=fragment, left_empty=[tmp_path / "results"])


@pytest.mark.no_process
def test_communicators_of_several_sizes_are_chosen_by_size_or_name(tmp_path):
    example = json.loads(WITH_ALGO.read_text())
    small = _call(example, 1000, header__id="0x22", header__comm_name="TP Group 1", header__n_ranks=4,
                  header__rank=1)
    log = tmp_path / "two-sizes.log"
    log.write_text(_compact(example) + "\n" + _compact(small) + "\n")
    assert_refused(_import(tmp_path, log)[0], fragment="communicators of 4, 8 ranks",
                   left_empty=[tmp_path / "results"])
    result, by_size = _import(tmp_path, log, "--world-size", "4", run_id="by-size")
    assert result.exit_code == 0, result.output + result.stderr
    assert _rows(by_size)["communicator"].tolist() == ["0x22 TP Group 1"]
    result, by_name = _import(tmp_path, log, "--communicator", "DP Group 0", run_id="by-name")
    assert result.exit_code == 0, result.output + result.stderr
    assert _rows(by_name)["world_size"].tolist() == [8]
    assert_refused(_import(tmp_path, log, "--communicator", "PP Group 9", run_id="none")[0],
                   fragment="no communicator of the logs matches")
    # a job's files differ in the communicators they hold: one without the chosen one is listed, with no rows
    other_process = tmp_path / "other-process.log"
    other_process.write_text(_compact(small) + "\n")
    result, two_files = _import(tmp_path, log, other_process, "--communicator", "0x7f8c496ae9f661", run_id="two")
    assert result.exit_code == 0, result.output + result.stderr
    files = _meta(two_files)["source"]["files"]
    assert [len(item["tests"]) for item in files] == [1, 0] and len(_rows(two_files)) == 1


@pytest.mark.no_process
def test_env_labels_the_rows(tmp_path):
    result, run_dir = _import(tmp_path, ALL_REDUCE, "--env", "NCCL_ALGO=Ring")
    assert result.exit_code == 0, result.output + result.stderr
    assert _rows(run_dir)["env"].tolist() == ["NCCL_ALGO=Ring"]


PROMETHEUS = ('nccl_bus_bandwidth_gbs{version="v5.1",slurm_job_id="unknown",node="nvl72004-T01",gpu="GPU0",'
              'comm_name="DP Group 0",n_nodes="1",nranks="4",collective="AllReduce",message_size="4-5GB",'
              'algo_proto="Ring_ll"} 678.263\n')
"""The first line of the README's "Current Metric Format Examples" (the same commit as the JSON examples)."""


def _bad_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    example = json.loads(ALL_REDUCE.read_text())
    cases = {
        "empty": ("", "is empty"),
        "text": ("# nThread 1 nGpus 1 minBytes 8\n", "is not JSON"),
        "prometheus": (PROMETHEUS, "Prometheus text (NCCL_INSPECTOR_PROM_DUMP=1)"),
        "other-json": ('{"results": [], "config": {}}\n', "without coll_perf, p2p_perf or proxy_trace"),
        "v3": (_compact({**example, "metadata": {**example["metadata"],
                                                 "inspector_output_format_version": "v3.0"}}),
               "Inspector output format 'v3.0'; commbench reads v4.0"),
        "v5": (_compact({**example, "metadata": {**example["metadata"],
                                                 "inspector_output_format_version": "v5.0"}}),
               "format 'v5.0'"),
        "cut": (_compact(example) + "\n" + _compact(example)[:90], "line 2: not valid JSON"),
        "no-time": (_compact({**example, "coll_perf": {key: value for key, value in example["coll_perf"].items()
                                                      if key != "coll_exec_time_us"}}),
                    "coll_perf lacks coll_exec_time_us"),
        "array": (json.dumps([example]), "a JSON list, not an Inspector record"),
        "p2p-only": (_compact({"header": example["header"], "metadata": example["metadata"],
                               "p2p_perf": {"p2p": "Send"}}), "holds no collective record (coll_perf)"),
    }
    files = {}
    for name, (text, fragment) in cases.items():
        path = tmp_path / f"{name}.log"
        path.write_text(text)
        files[name] = (path, fragment)
    return files


BAD = ["empty", "text", "prometheus", "other-json", "v3", "v5", "cut", "no-time", "array", "p2p-only"]


@pytest.mark.no_process
@pytest.mark.parametrize("case", BAD)
def test_bad_input_is_refused_in_one_line(tmp_path, case):
    path, fragment = _bad_files(tmp_path)[case]
    assert_refused(_import(tmp_path, path)[0], fragment=fragment, left_empty=[tmp_path / "results"])


@pytest.mark.no_process
def test_missing_files_and_bad_options_are_refused_in_one_line(tmp_path):
    assert_refused(_import(tmp_path, tmp_path / "absent.log")[0], fragment="does not exist")
    assert_refused(_import(tmp_path, tmp_path)[0], fragment="is a folder")
    assert_refused(_import(tmp_path, ALL_REDUCE, "--dtype", "float128")[0], fragment="--dtype")
    assert_refused(_import(tmp_path, ALL_REDUCE, "--env", "NCCL_ALGO")[0], fragment="sets no value")
    odd = json.loads(ALL_REDUCE.read_text())
    odd["coll_perf"]["coll_msg_size_bytes"] = 8194
    path = tmp_path / "odd.log"
    path.write_text(_compact(odd))
    assert_refused(_import(tmp_path, path, "--dtype", "float32")[0], fragment="not a whole number of float32")
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").iterdir())


@pytest.mark.no_process
def test_report_draws_an_imported_inspector_run(tmp_path):
    example = json.loads(WITH_ALGO.read_text())
    sizes = [65536 * 4**step for step in range(5)]
    records = [_call(example, 20 + size // 40000 + call, coll_perf__coll_msg_size_bytes=size)
               for size in sizes for call in range(3)]
    log = tmp_path / "job.log"
    log.write_text("".join(_compact(record) + "\n" for record in records))
    result, run_dir = _import(tmp_path, log)
    assert result.exit_code == 0, result.output + result.stderr
    out = tmp_path / "report"
    report = invoke(["report", str(run_dir), "--out", str(out)])
    assert report.exit_code == 0, report.output + report.stderr + repr(report.exception)
    assert (out / "busbw_vs_size.png").stat().st_size > 0 and (out / "latency_fit.png").stat().st_size > 0
    assert "nccl-inspector" in (out / "report.html").read_text()


def _inspector_log_of(nccl_tests_run: Path, path: Path) -> None:
    """An Inspector log of the calls an nccl-tests import timed: each in-place all_reduce row as three calls on rank 0
    of its 16 ranks, the time in whole microseconds (as the Inspector logs it), the bandwidths its way. A schema
    exercise for the join, not a measurement."""
    rows = _rows(nccl_tests_run)
    rows = rows[(rows["inplace"]) & (rows["size_bytes"] >= 8192)]  # NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES's default
    example = json.loads(WITH_ALGO.read_text())
    records = [_call(example, max(1, round(row["time_us_p50"])), header__n_ranks=16, header__rank=0, header__nnodes=2,
                     coll_perf__coll_msg_size_bytes=int(row["size_bytes"]))
               for _, row in rows.iterrows() for _ in range(3)]
    path.write_text("".join(_compact(record) + "\n" for record in records))


@pytest.mark.no_process
def test_compare_joins_an_inspector_import_with_another_tools_rows_and_names_both_timings(tmp_path):
    _, nccl_run = _import(tmp_path, H100_LOG, "--collective", "all_reduce", run_id="nccl-tests", tool="nccl-tests")
    log = tmp_path / "job.log"
    _inspector_log_of(nccl_run, log)
    result, live = _import(tmp_path, log, "--dtype", "float32", "--op", "sum", run_id="live")
    assert result.exit_code == 0, result.output + result.stderr
    compared = invoke(["compare", str(nccl_run), str(live), "--json"])
    assert compared.exit_code in (0, 1), compared.output + compared.stderr  # the join is the property, not verdicts
    document = json.loads(compared.stdout)
    joined = [entry for entry in document["entries"] if entry.get("metric") == "busbw"]
    assert len(joined) == len(_rows(live))  # every Inspector row meets the nccl-tests row of its size
    assert all(entry["row"].endswith("[source nccl-tests vs nccl-inspector]") for entry in joined)
    notes = " ".join(document["notes"])
    assert "different tools" in notes
    assert "nccl-inspector: each call of the live job" in notes and "nccl-tests: the wall time" in notes
    # the Inspector's rows have their calls as samples, nccl-tests' none: no significance test
    assert "the baseline side was imported from a tool that records no per-iteration samples" in notes


@pytest.mark.no_process
def test_without_dtype_and_op_the_rows_join_a_side_of_one_dtype_and_op(tmp_path):
    _, nccl_run = _import(tmp_path, H100_LOG, "--collective", "all_reduce", run_id="nccl-tests", tool="nccl-tests")
    log = tmp_path / "job.log"
    _inspector_log_of(nccl_run, log)
    result, live = _import(tmp_path, log, run_id="live")  # dtype and op unknown
    assert result.exit_code == 0, result.output + result.stderr
    assert set(_rows(live)["dtype"]) == {"unknown"}
    document = json.loads(invoke(["compare", str(nccl_run), str(live), "--json"]).stdout)
    joined = [entry for entry in document["entries"] if entry.get("metric") == "busbw"]
    assert len(joined) == len(_rows(live))  # the nccl-tests log measured float32 sum only: each size meets its row
    notes = " ".join(document["notes"])
    assert "the new side's rows do not say their dtype or op" in notes and "--dtype and --op" in notes


@pytest.mark.no_process
def test_two_inspector_imports_compare_with_their_calls_as_samples(tmp_path):
    example = json.loads(WITH_ALGO.read_text())
    log = tmp_path / "job.log"
    log.write_text("".join(_compact(_call(example, 61974 + call)) + "\n" for call in range(8)))
    _, first = _import(tmp_path, log, run_id="first")
    _, second = _import(tmp_path, log, run_id="second")
    compared = invoke(["compare", str(first), str(second), "--json"])
    assert compared.exit_code == 0, compared.output + compared.stderr
    entries = [entry for entry in json.loads(compared.stdout)["entries"] if entry.get("metric") == "busbw"]
    assert [entry["verdict"] for entry in entries] == ["ok"]
    assert entries[0]["p_value"] is not None  # both sides have samples: the significance test ran


@pytest.mark.distributed
def test_a_live_nccl_job_is_not_joined_with_a_gloo_sweep_on_cpu(tmp_path):
    import subprocess

    _, live = _import(tmp_path, WITH_ALGO, "--dtype", "float32", "--op", "sum", run_id="live")
    sweep = subprocess.run([sys.executable, "-m", "commbench", "sweep", "-c", "all_reduce", "--sizes", "64K:256K:x4",
                            "--backend", "gloo", "--device", "cpu", "--nproc", "2", "--iters", "6", "--warmup", "1",
                            "--out", str(tmp_path / "results"), "--run-id", "sweep", "-q"],
                           cwd=tmp_path, env=commbench_env(), capture_output=True, text=True, timeout=240)
    assert sweep.returncode == 0, sweep.stderr
    result = invoke(["compare", str(tmp_path / "results" / "sweep"), str(live), "--json"])
    # nothing was measured alike (NCCL on GPUs at 8 ranks, gloo on CPU at 2): refused, not a table of misses
    assert result.exit_code == 2 and "nothing to compare" in result.output, result.output
    assert "backend gloo vs nccl" in result.output and "world size 2 vs 8" in result.output
