"""`commbench perf`: nccl-tests' flags parse to the plan of the equivalent sweep options; bad values and unknown
flags are refused in one line with nccl-tests' meaning; the text has the layout of real nccl-tests logs and reads
back through `commbench import nccl-tests` row for row; -J writes the JSON nccl-tests writes, which NVIDIA's
analyze_perf_json.py reads."""

import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from commbench.benches.collective import KIND
from commbench.benches.options import parse_options
from commbench.cli import main
from commbench.machine import Machine
from commbench.perf import flags as perf_flags
from commbench.perf.text import float_text
from tests.in_process import commbench_here
from tests.refusals import assert_refused, invoke

ROOT = Path(__file__).parent.parent
REAL_LOG = ROOT / "tests" / "data" / "imports" / "nccl-tests" / "rtx5090_2rank_1host_mpi_prefix_v2_18_all_reduce.txt"
ANALYZER = ROOT.parent / "shared" / "vendor" / "nccl-tests-tools" / "analyze_perf_json.py"
CPU_MACHINE = Machine(gpus=0, nccl_available=False, cpus=2)

# --- every flag is a sweep option --------------------------------------------------------------------------------

PERF_DEFAULTS_AS_SWEEP = ["--impl", "builtin", "--timing", "batch", "--placement", "both", "--sizes", "32M:32M:+1M",
                          "--batch-calls", "20", "--warmup", "1", "--iters", "1"]
"""nccl-tests' defaults (-b 32M -e 32M -i 1M -n 20 -w 1, one cycle) said as sweep options."""

EQUIVALENT = [  # (collective, nccl-tests flags, the sweep options that replace or add to the defaults above)
    ("all_reduce", [], []),
    ("all_reduce_perf", ["-b", "8", "-e", "8G", "-f", "2"], ["--sizes", "8:8G:x2"]),
    ("all_reduce", ["--minbytes", "1K", "--maxbytes", "1M", "--stepbytes", "256K"], ["--sizes", "1K:1M:+256K"]),
    ("all_reduce", ["-b", "1.5K", "-e", "6K", "-f", "0x2"], ["--sizes", "1536:6K:x2"]),
    ("all_reduce", ["-g", "2"], ["--nproc", "2"]),
    ("all_reduce", ["-n", "50"], ["--batch-calls", "50"]),
    ("all_reduce", ["-w", "5"], ["--warmup", "5"]),
    ("all_reduce", ["--warmup_iters", "0"], ["--warmup", "0"]),
    ("all_reduce", ["-m", "4"], ["--agg-iters", "4"]),
    ("all_reduce", ["-c", "0"], ["--no-check"]),
    ("all_reduce", ["-c", "3"], ["--check-iters", "3"]),
    ("all_reduce", ["-d", "half"], ["--dtype", "float16"]),
    ("all_reduce", ["-d", "float"], ["--dtype", "float32"]),
    ("all_reduce", ["-d", "double"], ["--dtype", "float64"]),
    ("all_reduce", ["-d", "bfloat16"], ["--dtype", "bfloat16"]),
    ("all_reduce", ["-d", "int8"], ["--dtype", "int8"]),
    ("all_reduce", ["-d", "uint8"], ["--dtype", "uint8"]),
    ("all_reduce", ["-d", "int32"], ["--dtype", "int32"]),
    ("all_reduce", ["-d", "int64"], ["--dtype", "int64"]),
    ("all_reduce", ["-d", "all"], ["--dtype", "int8,uint8,int32,int64,float16,float32,float64,bfloat16"]),
    ("all_reduce", ["-o", "max"], ["--op", "max"]),
    ("all_reduce", ["-o", "prod"], ["--op", "prod"]),
    ("all_reduce", ["-o", "all"], ["--op", "sum,prod,max,min,avg"]),
    ("reduce_scatter", ["-o", "min"], ["--op", "min"]),
    ("broadcast", ["-r", "1"], ["--root", "1"]),
    ("reduce", ["-r", "1", "-o", "max"], ["--root", "1", "--op", "max"]),
    ("all_reduce", ["-a", "0"], ["--average", "rank0"]),
    ("all_reduce", ["-a", "1"], ["--average", "mean"]),
    ("all_reduce", ["-a", "2"], ["--average", "min"]),
    ("all_reduce", ["-a", "3"], ["--average", "max"]),
    ("all_reduce", ["-z", "1"], ["--blocking", "1"]),
    ("all_reduce", ["-z", "3"], ["--blocking", "3"]),
    ("all_reduce", ["-N", "6"], ["--iters", "6"]),
    ("all_reduce", ["-I", "1"], ["--iteration-times"]),
    ("all_reduce", ["-T", "60"], ["--timeout", "60"]),
    ("all_gather", ["-b", "8", "-e", "1M", "-f", "4"], ["--sizes", "8:1M:x4"]),
    ("alltoall", ["-b", "1K", "-e", "64K", "-f", "2"], ["--sizes", "1K:64K:x2"]),
    ("sendrecv_perf", ["-b", "1K", "-e", "4K", "-f", "2"], ["--sizes", "1K:4K:x2"]),
    ("all_reduce", ["-t", "1", "-p", "0", "-R", "0", "-u", "0"], []),  # nccl-tests' defaults of flags perf lacks
]


def _sweep_spec(collective: str, sweep_args: list[str]):
    command = main.commands["sweep"]
    args = ["-c", collective, *PERF_DEFAULTS_AS_SWEEP, *sweep_args]
    with command.make_context("sweep", args) as ctx:
        raw = {name: value for name, value in ctx.params.items() if name not in ("out", "run_id", "quiet", "as_json",
                                                                                  "verbose")}
    bench = KIND.resolve(parse_options(KIND.options, raw), CPU_MACHINE)
    return bench.spec, bench.points


def _perf_spec(collective: str, perf_args: list[str]):
    command = main.commands["perf"]
    with command.make_context("perf", [collective, *perf_args]) as ctx:
        values = {name: value for name, value in ctx.params.items()
                  if name not in ("collective", "backend", "device", "out", "run_id", "quiet", "as_json")}
    request = perf_flags.fit_to(perf_flags.parse(collective, values), backend="gloo", device="cpu")
    bench = KIND.resolve(parse_options(KIND.options, request.options), CPU_MACHINE)
    return bench.spec, bench.points


@pytest.mark.no_process
@pytest.mark.parametrize("collective, perf_args, sweep_args", EQUIVALENT,
                         ids=[" ".join([name, *args]) or "defaults" for name, args, _ in EQUIVALENT])
def test_every_nccl_tests_flag_parses_to_the_plan_of_the_equivalent_sweep(collective, perf_args, sweep_args):
    perf_spec, perf_points = _perf_spec(collective, perf_args)
    ours = perf_flags.collective_of(collective)
    sweep_spec, sweep_points = _sweep_spec(ours, sweep_args)
    assert perf_spec == sweep_spec
    assert [(point.label(), point.layout) for point in perf_points] == \
        [(point.label(), point.layout) for point in sweep_points]


@pytest.mark.no_process
def test_a_cuda_graph_is_the_sweeps_cuda_graph_option():
    """-G runs only on NCCL (refused here, below): its translation is checked on the request itself."""
    request = perf_flags.parse("all_reduce", {"cudagraph": "4"})
    assert request.options["cuda_graph"] == "4" and request.settings["graph"] == 4


# --- refusals: one line, exit 2, nccl-tests' meaning --------------------------------------------------------------

@pytest.mark.no_process
@pytest.mark.parametrize("args, fragments", [
    (["all_reduce", "-b", "1x"], ["-b/--minbytes 1x", "nccl-tests: minimum size"]),
    (["all_reduce", "-e", "8Q"], ["-e/--maxbytes 8Q", "maximum size"]),
    (["all_reduce", "-b", "64", "-e", "8"], ["-b/--minbytes 64", "above -e 8"]),
    (["all_reduce", "-f", "1.5", "-e", "1M"], ["-f/--stepfactor 1.5", "not a whole number", "multiplication factor"]),
    (["all_reduce", "-n", "0"], ["-n/--iters 0", "must be 1 or more", "number of iterations"]),
    (["all_reduce", "-w", "-1"], ["-w/--warmup_iters -1", "warmup"]),
    (["all_reduce", "-g", "0"], ["-g/--ngpus 0", "ranks on this node"]),
    (["all_reduce", "-d", "float32"], ["-d/--datatype float32", "nccl-tests calls it float"]),
    (["all_reduce", "-d", "uint32"], ["-d/--datatype uint32", "no uint32 collectives"]),
    # the memory plan, in nccl-tests' terms: 2 ranks of a 4096 GiB all_reduce cannot fit this machine's RAM
    (["all_reduce", "-b", "4096G", "-e", "4096G"], ["needs 8 TiB", "available memory", "fit: end -e there",
                                                    "nccl-tests -e/--maxbytes"]),
    (["all_reduce", "-d", "f8e4m3", "-b", "1K", "-e", "1K"], ["gloo has no float8_e4m3", "-d/--datatype"]),
    (["all_reduce", "-o", "mulsum"], ["-o/--op mulsum", "PreMulSum"]),
    (["all_reduce", "-a", "4"], ["-a/--average 4", "choose 0, 1, 2, 3"]),
    (["all_reduce", "-z", "7"], ["-z/--blocking 7", "non-blocking"]),
    (["all_reduce", "-I", "2"], ["-I/--per_iter_timing 2", "choose 0, 1"]),
    (["all_reduce", "-N", "0"], ["-N/--run_cycles 0", "runs forever"]),
    (["broadcast", "-r", "all"], ["-r/--root all", "one root per run"]),
    (["broadcast", "-r", "5", "-b", "1K", "-e", "1K"], ["-r 5 is not a rank of this run", "nccl-tests -r/--root"]),
    (["all_reduce", "-G", "1", "-b", "1K", "-e", "1K"], ["-G 1 replays CUDA work", "on CPU", "--cudagraph"]),
    (["all_reduce", "-t", "4"], ["-t/--nthreads 4 is not available", "one process per rank"]),
    (["all_reduce", "--local_register=1"], ["-R/--local_register 1 is not available"]),
    (["all_reduce", "--iter", "5"], ["unknown flag --iter", "resembles is -n/--iters"]),
    (["all_reduce", "--warmup", "5"], ["unknown flag --warmup", "-w/--warmup_iters"]),
    (["all_reduce", "--minbyte", "8"], ["unknown flag --minbyte", "-b/--minbytes"]),
    (["allreduce", "-b", "8"], ["unknown collective 'allreduce'", "all_reduce_perf"]),
    (["all_to_allv"], ["unknown collective 'all_to_allv'"]),
])
def test_a_bad_value_is_refused_in_one_line_with_nccl_tests_meaning(args, fragments, tmp_path):
    line = assert_refused(invoke(["perf", *args, "--out", str(tmp_path / "results")]),
                          left_empty=[tmp_path / "results"])
    for fragment in fragments:
        assert fragment in line


# --- real runs: 2 gloo ranks ---------------------------------------------------------------------------------------

def _perf(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, Path]:
    run_dir = tmp_path / "results" / "perf"
    completed = commbench_here("perf", *args, "--backend", "gloo", "--device", "cpu", "--out",
                               str(tmp_path / "results"), "--run-id", "perf", cwd=tmp_path)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    return completed, run_dir


@pytest.fixture(scope="module")
def all_reduce_run(tmp_path_factory):
    """all_reduce_perf -b 8 -e 64K -f 8 -J FILE on 2 gloo ranks: its text, run folder and JSON."""
    tmp_path = tmp_path_factory.mktemp("perf")
    completed, run_dir = _perf(tmp_path, "all_reduce_perf", "-b", "8", "-e", "64K", "-f", "8", "-J",
                               str(tmp_path / "out.json"))
    return completed.stdout, run_dir, tmp_path / "out.json"


def _classify(line: str) -> str:
    """What kind of nccl-tests line this is, by the patterns nccl-tests prints (src/util.cu)."""
    patterns = [("starting", r"# Collective test starting: \w+_perf(_mpi)?$"),
                ("settings", r"# nThread 1 nGpus \d+ minBytes \d+ maxBytes \d+ step: \d+\((factor|bytes)\) "
                             r"warmup iters: \d+ iters: \d+ agg iters: \d+ validation: \d+ graph: \d+"),
                ("devices", r"# Using devices$"),
                ("rank", r"#  Rank +\d+ Group +\d+ Pid +\d+ on +\S+ device +\d+ \[[^\]]+\] .+$"),
                ("title", r"# +out-of-place +in-place *$"),
                ("columns", r"# +size +count +type +redop +root +time +algbw +busbw +#wrong +time"),
                ("units", r"# +\(B\) +\(elements\)"),
                ("row", r" *\d+ +\d+ +\w+ +\w+ +-?\d+( +\S+){8}$"),
                ("bounds", r"# Out of bounds values : \d+ (OK|FAILED)$"),
                ("average", r"# Avg bus bandwidth    : \S+ $"),
                ("concluded", r"# Collective test concluded: \w+_perf(_mpi)?$"),
                ("hash", r"#$")]
    return next((name for name, pattern in patterns if re.match(pattern, line)), "other")


def _shape(lines: list[str]) -> list[str]:
    """The sequence of line kinds, each run of rows (or rank lines) as one."""
    kinds = [_classify(line) for line in lines if line.strip()]
    return [kind for index, kind in enumerate(kinds) if index == 0 or kind != kinds[index - 1] or kind == "hash"]


@pytest.mark.distributed
def test_the_text_has_the_layout_of_a_real_nccl_tests_log(all_reduce_run):
    text, _, _ = all_reduce_run
    real = [re.sub(r"^\[\d+,\d+\]<stdout>:", "", line) for line in REAL_LOG.read_text().splitlines()]
    real = real[real.index(next(line for line in real if line.startswith("# Collective test starting"))):]
    ours = text.splitlines()
    ours = ours[ours.index(next(line for line in ours if line.startswith("# Collective test starting"))):]
    ours = [line for line in ours if not line.startswith(("# commbench", "# Results"))]
    assert _shape(ours) == _shape(real)
    assert "other" not in _shape(ours)
    # the column header lines, character for character (nccl-tests 2.18 and 2.19 print the same)
    header = [line for line in real if _classify(line) in ("title", "columns", "units")]
    assert [line for line in ours if _classify(line) in ("title", "columns", "units")] == header
    assert sum(_classify(line) == "rank" for line in ours) == 2
    rows = [line.split() for line in ours if _classify(line) == "row"]
    assert [int(row[0]) for row in rows] == [8, 64, 512, 4096, 32768]
    assert all(row[5:9] == ["N/A"] * 4 for row in rows)  # torch's all_reduce has no out-of-place call
    assert all(row[12] == "0" for row in rows)  # checked in place: no wrong element


@pytest.mark.distributed
def test_the_text_imports_back_to_the_same_rows_and_average(all_reduce_run, tmp_path):
    text, run_dir, _ = all_reduce_run
    (tmp_path / "perf.txt").write_text(text)
    imported = commbench_here("import", "nccl-tests", str(tmp_path / "perf.txt"), "--out", str(tmp_path / "imports"),
                              "-q")
    assert imported.returncode == 0, imported.stderr
    back = pd.read_csv(Path(imported.stdout.strip()) / "results.csv")
    measured = pd.read_csv(run_dir / "results.csv")
    keys = ["collective", "size_bytes", "count", "dtype", "op", "inplace"]
    assert sorted(map(tuple, back[keys].values.tolist())) == sorted(map(tuple, measured[keys].values.tolist()))
    joined = measured.merge(back, on=keys, suffixes=("", "_back"))
    assert len(joined) == len(measured)
    for _, row in joined.iterrows():  # the same figures, to what printing keeps (nccl-tests' %7s / %6s cells)
        assert float(float_text(row["time_us_p50"], 7)) == row["time_us_p50_back"]
        assert float(float_text(row["busbw_gbps"], 6)) == row["busbw_gbps_back"]
        assert row["n_wrong"] == row["n_wrong_back"]
        assert row["backend"] == row["backend_back"] == "gloo" and row["device_back"] == "cpu"
    meta = json.loads((Path(imported.stdout.strip()) / "meta.json").read_text())
    closing = meta["source"]["files"][0]["tests"][0]
    printed = float(re.search(r"# Avg bus bandwidth +: (\S+)", text).group(1))
    assert closing["avg_busbw_gbps"] == printed
    assert printed == pytest.approx(measured["busbw_gbps"].mean(), rel=1e-5)  # %g keeps six digits


@pytest.mark.distributed
def test_the_run_folder_is_an_ordinary_run_and_the_json_imports_as_the_text_does(all_reduce_run, tmp_path):
    text, run_dir, json_path = all_reduce_run
    assert invoke(["compare", str(run_dir), str(run_dir)]).exit_code == 0
    fitted = invoke(["fit", str(run_dir), "--json"])
    assert fitted.exit_code == 0, fitted.output
    (tmp_path / "perf.txt").write_text(text)
    rows = {}
    for name, source in (("text", tmp_path / "perf.txt"), ("json", json_path)):
        imported = invoke(["import", "nccl-tests", str(source), "--out", str(tmp_path / name), "--run-id", "run", "-q"])
        assert imported.exit_code == 0, imported.output
        frame = pd.read_csv(tmp_path / name / "run" / "results.csv")
        rows[name] = frame[["size_bytes", "inplace", "time_us_p50", "busbw_gbps", "n_wrong", "backend", "device"]]
    # the JSON keeps full precision where the text rounds: the same rows, the figures within the text's rounding
    assert rows["text"][["size_bytes", "inplace", "n_wrong", "backend", "device"]].equals(
        rows["json"][["size_bytes", "inplace", "n_wrong", "backend", "device"]])
    assert ((rows["text"]["time_us_p50"] - rows["json"]["time_us_p50"]).abs() <= 0.05).all()


_BODY = {"time": float, "alg_bw": (float, str), "bus_bw": (float, str), "nwrong": (float, type(None))}
_CONFIG = {"nthreads": int, "ngpus": int, "minimum_bytes": int, "maximum_bytes": int, "warmup_iters": int,
           "iterations": int, "aggregated_iterations": int, "validation": int, "graph": int,
           "blocking_collectives": bool, "per_iter_timing": bool, "per_iter_skip": int, "parallel_init": bool,
           "devices": list}
_DEVICE = {"rank": int, "group": int, "pid": int, "hostname": str, "device": int, "device_hex": str,
           "device_info": str}
_PER_ITERATION = {"skipped_iterations": int, "min_us": float, "max_us": float, "avg_us": float, "p50_us": float,
                  "p95_us": float, "p99_us": float, "stdev_us": float, "cv_pct": float, "times_us": list,
                  "per_process_max_times_us": list}


def _assert_types(document: dict, expected: dict) -> None:
    for key, kind in expected.items():
        assert key in document, key
        assert isinstance(document[key], kind), (key, document[key])


def _assert_nccl_tests_json(document: dict, *, per_iteration: bool) -> None:
    """The keys, order and types of nccl-tests' -J output (src/util.cu, JSON_FILE_VERSION 3)."""
    assert list(document) == ["version", "start_time", "args", "env", "nccl_version", "config", "results",
                              "out_of_bounds", "average_bus_bandwidth", "errors", "end_time"]
    assert document["version"] == 3
    assert all(isinstance(item, str) for item in document["args"] + document["env"])
    assert document["nccl_version"] is None or isinstance(document["nccl_version"], int)
    _assert_types(document["config"], _CONFIG)
    assert ("step_factor" in document["config"]) != ("step_bytes" in document["config"])
    for device in document["config"]["devices"]:
        _assert_types(device, _DEVICE)
    for result in document["results"]:
        placements = [key for key in result if key.endswith("place")]
        assert list(result)[:5] == ["size", "count", "type", "redop", "root"] and list(result)[-2:] == [
            "actual_iterations", "experiment_name"]
        assert placements == ["out_of_place", "in_place"]
        assert isinstance(result["root"], str) and re.fullmatch(r" *-?\d+", result["root"])
        for key in placements:
            if result[key] is not None:
                _assert_types(result[key], _BODY)
                assert (f"{key}_per_iter" in result) == per_iteration
        for key in (key for key in result if key.endswith("_per_iter")):
            _assert_types(result[key], _PER_ITERATION)
    _assert_types(document["out_of_bounds"], {"count": int, "okay": bool})
    _assert_types(document["average_bus_bandwidth"], {"bandwidth": float, "okay": str})
    assert document["errors"] == []


@pytest.mark.distributed
def test_the_json_has_the_keys_and_types_nccl_tests_writes(all_reduce_run):
    text, run_dir, json_path = all_reduce_run
    assert f"# Writing JSON output to {json_path}" in text
    document = json.loads(json_path.read_text())
    _assert_nccl_tests_json(document, per_iteration=False)
    assert [result["out_of_place"] for result in document["results"]] == [None] * 5  # N/A: in place only
    average = document["average_bus_bandwidth"]["bandwidth"]
    assert math.isclose(average, float(re.search(r"# Avg bus bandwidth +: (\S+)", text).group(1)), rel_tol=1e-5)
    # the fixture made from a real 2.18 log by the schema has the same keys
    fixture = json.loads((ROOT / "tests" / "data" / "imports" / "nccl-tests-json" /
                          "rtx5090_2rank_all_reduce.json").read_text())
    assert list(fixture) == list(document)
    assert set(fixture["config"]) == set(document["config"])
    assert set(fixture["results"][0]) == set(document["results"][0])


@pytest.fixture(scope="module")
def per_iteration_run(tmp_path_factory):
    """all_gather_perf -I 1 -N 2 -J FILE: both placements, per-iteration times, two cycles."""
    tmp_path = tmp_path_factory.mktemp("perf_iterations")
    completed, run_dir = _perf(tmp_path, "all_gather", "-b", "1K", "-e", "16K", "-f", "4", "-n", "8", "-I", "1",
                               "-N", "2", "-J", str(tmp_path / "out.json"))
    return completed.stdout, run_dir, tmp_path / "out.json"


@pytest.mark.distributed
def test_per_iteration_times_print_as_nccl_tests_and_fill_the_json(per_iteration_run):
    text, run_dir, json_path = per_iteration_run
    assert "i_min    i_max    i_p99    i_cv%" in text
    rows = [line.split() for line in text.splitlines() if re.match(r" *\d+ +\d+ +float ", line)]
    assert [int(row[0]) for row in rows] == [1024, 4096, 16384] * 2  # cycle by cycle, as nccl-tests prints them
    assert all(len(row) == 5 + 2 * 8 for row in rows)
    document = json.loads(json_path.read_text())
    _assert_nccl_tests_json(document, per_iteration=True)
    iterations = pd.read_csv(run_dir / "iteration_times.csv")
    assert set(iterations["rank"]) == {0, 1} and set(iterations["batch"]) == {0, 1}
    for result in document["results"]:
        for key in ("out_of_place_per_iter", "in_place_per_iter"):
            figures = result[key]
            assert len(figures["times_us"]) == 8 and len(figures["per_process_max_times_us"]) == 2
            assert figures["times_us"] == [max(pair) for pair in zip(*figures["per_process_max_times_us"])]
            assert figures["min_us"] <= figures["p50_us"] <= figures["p95_us"] <= figures["p99_us"] <= \
                figures["max_us"]
    # each cycle's time per call is the batch's, not the iterations' mean over the slowest rank
    samples = pd.read_csv(run_dir / "samples.csv")
    assert set(samples["iteration"]) == {0, 1}


@pytest.mark.distributed
def test_a_time_without_its_cycles_sample_is_marked_in_the_text_and_the_json(per_iteration_run, tmp_path):
    """A cycle whose sample samples.csv lacks is printed with its row's median time: a `# commbench:` line names
    each such time, and its JSON body says what stands in. The run as written has none of either."""
    from commbench.perf.json_file import TIME_STANDS_IN_KEY, document
    from commbench.perf.results import read_perf_run
    from commbench.perf.text import nccl_tests_text

    text, run_dir, json_path = per_iteration_run
    assert "no sample for" not in text and TIME_STANDS_IN_KEY not in json_path.read_text()
    cut = tmp_path / "cut"
    shutil.copytree(run_dir, cut)
    samples = pd.read_csv(cut / "samples.csv")
    samples[samples["iteration"] == 0].to_csv(cut / "samples.csv", index=False)  # the second cycle's are gone
    run = read_perf_run(cut)
    printed = nccl_tests_text(run)
    assert ("# commbench: samples.csv has no sample for 6 of the 12 times printed (1024 B out-of-place cycle 2, "
            "1024 B in-place cycle 2, 4096 B out-of-place cycle 2 and 3 more): each is its row's median time "
            "(time_us_p50) instead") in printed
    results = pd.read_csv(cut / "results.csv")
    bodies = [(line.cycle, line.size_bytes, body) for line in run.lines for body in line.bodies]
    for cycle, size, body in bodies:
        p50 = results.loc[results["size_bytes"] == size, "time_us_p50"]
        assert (body.time_stands_in is not None) == (cycle == 1)
        assert cycle == 0 or body.time_us in set(p50)
    written = document(run, argv=[], env={})["results"]
    marked = [result[key].get(TIME_STANDS_IN_KEY) for result in written for key in ("out_of_place", "in_place")]
    assert marked == [None] * 6 + ["time is the row's median time (time_us_p50): samples.csv has no sample for "
                                   "this cycle"] * 6


@pytest.mark.distributed
def test_unchecked_results_are_said_under_out_of_bounds_values(tmp_path):
    """-c 0: `# Out of bounds values : 0 OK` counts checked results only, so a line says how many were not, and the
    command says the exit code vouches for none of them; a checked run prints neither (the other tests' runs)."""
    completed, _ = _perf(tmp_path, "all_reduce", "-b", "1K", "-e", "4K", "-f", "4", "-c", "0")
    assert ("# commbench: 2 of 2 result(s) unchecked (#wrong N/A, -c 0): Out of bounds values counts the checked "
            "ones only") in completed.stdout
    assert "commbench: perf: 2 row(s) unchecked (n_wrong empty" in completed.stderr


@pytest.mark.distributed
def test_a_checked_run_says_nothing_of_unchecked_results(all_reduce_run):
    text, _, _ = all_reduce_run
    assert "unchecked" not in text


@pytest.mark.distributed
@pytest.mark.skipif(not ANALYZER.exists(), reason=f"NVIDIA's analyzer is not here: {ANALYZER} (../shared absent)")
@pytest.mark.parametrize("placement", [[], ["--in-place"]], ids=["out-of-place", "in-place"])
def test_nvidias_analyzer_reads_the_json(per_iteration_run, placement):
    _, _, json_path = per_iteration_run
    analysed = subprocess.run([sys.executable, str(ANALYZER), str(json_path), "--all", *placement],
                              capture_output=True, text=True, timeout=120)
    assert analysed.returncode == 0, analysed.stderr
    assert "Consistency (times_us == max over process rows" in analysed.stdout
    assert "PASS" in analysed.stdout
    assert "PER-ITERATION STATS" in analysed.stdout and "PER-PROCESS STRAGGLER ANALYSIS" in analysed.stdout
    stats = analysed.stdout.split("PER-ITERATION STATS", 1)[1].split("=" * 80, 2)[1]
    assert [int(line.split()[0]) for line in stats.splitlines() if line.strip()[:1].isdigit()] == \
        [1024, 4096, 16384] * 2  # every size of both cycles
