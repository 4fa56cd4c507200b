"""`commbench export prometheus`: real runs (a gloo sweep with a refused environment combination, the report tests'
suite of a sweep, a DDP and a ZeRO sweep, hunts, real nccl-tests logs imported) exported and read back by
prometheus_client's own parser, every family, sample, label and value checked against the runs' own files; the file
replaced atomically; bad input refused in one line, exit 2."""

import shutil
from datetime import datetime
from pathlib import Path

import pandas as pd
import pytest
from prometheus_client.parser import text_string_to_metric_families

import commbench
from commbench import store
from commbench.benches import get_kind
from tests.in_process import commbench_here
from tests.refusals import assert_refused, invoke
from tests.report_runs import shared_report_suite

IMPORTS = Path(__file__).parent / "data" / "imports"
TREE_SIMPLE_LOG = (IMPORTS / "nccl-tests-algo"
                   / "rtx5090_2rank_1gpu_socket_all_reduce_NCCL_ALGO-Tree_NCCL_PROTO-Simple.txt")
TWO_NODE_LOG = IMPORTS / "nccl-tests" / "h100_2node_16rank_all_reduce.txt"
ZERO_BYTE_LOG = IMPORTS / "nccl-tests" / "v100_dgx2_12gpu_old_layout_5tests_concatenated.txt"
MISSING_INTERFACE = "commbench-no-such-if0"
VERSION = f"commbench-{commbench.__version__}"

INSPECTOR = ("nccl_bus_bandwidth_gbs", "nccl_collective_exec_time_microseconds")
CI = ("commbench_collective_exec_time_ci_low_microseconds", "commbench_collective_exec_time_ci_high_microseconds")
WRONG = "commbench_collective_wrong_elements"
RUN_END = "commbench_run_end_timestamp_seconds"
TRAINING = ("commbench_training_step_time_seconds", "commbench_training_step_time_ci_low_seconds",
            "commbench_training_step_time_ci_high_seconds", "commbench_training_communication_seconds",
            "commbench_training_exposed_communication_seconds", "commbench_training_wrong_ranks")
COLLECTIVE_VALUES = {"nccl_bus_bandwidth_gbs": "busbw_gbps", "nccl_collective_exec_time_microseconds": "time_us_p50",
                     CI[0]: "time_us_ci_lo", CI[1]: "time_us_ci_hi", WRONG: "n_wrong"}
TRAINING_MS = {TRAINING[0]: "step_time_ms_p50", TRAINING[1]: "step_time_ms_ci_lo", TRAINING[2]: "step_time_ms_ci_hi",
               TRAINING[3]: "comm_ms", TRAINING[4]: "exposed_comm_ms"}
BUCKETS = {8: "8-9B", 1024: "1-2KB", 32 * 1024: "32-33KB", 64 * 1024: "64-65KB", 256 * 1024: "256-257KB",
           1024**2: "1-2MB", 1024**3: "1-2GB", 8 * 1024**3: "8-9GB"}
"""Message sizes and the bucket NCCL Inspector writes for each (inspector_prom.cc's range label: the size in the
largest 1024-based unit that leaves at least 1, cut to N, as N-(N+1)UNIT; its README's example is 4-5GB)."""
UNITS = ("B", "KB", "MB", "GB", "TB")


def bucket(size: int) -> str:
    """The bucket of a size from the table above, or of a power of two 2^k: 2^(k mod 10) in unit k div 10."""
    if size in BUCKETS:
        return BUCKETS[size]
    exponent = size.bit_length() - 1
    assert size == 2**exponent, f"{size} B is neither in BUCKETS nor a power of two"
    low = 2 ** (exponent % 10)
    return f"{low}-{low + 1}{UNITS[exponent // 10]}"


def exported(*args: str) -> dict:
    """`commbench export prometheus ARGS` in this process, parsed by prometheus_client: family name → family."""
    result = invoke(["export", "prometheus", *args])
    assert result.exit_code == 0, result.stderr
    families = {family.name: family for family in text_string_to_metric_families(result.stdout)}
    for family in families.values():  # every family says what it is and its type; every sample names its run
        assert family.type == "gauge" and family.documentation, family.name
        assert all("run_id" in sample.labels for sample in family.samples), family.name
    return families


def by_labels(family, **match) -> dict[frozenset, float]:
    return {frozenset(sample.labels.items()): sample.value for sample in family.samples
            if all(sample.labels.get(name) == value for name, value in match.items())}


def collective_labels(row, *, run_id: str, node: str, n_nodes: str, collective: str, algo_proto: str,
                      slurm_job_id: str = "unknown") -> dict:
    """The labels a collective row's sample must carry: the Inspector's ten, in its spellings, then the row's keys."""
    return {"version": VERSION, "slurm_job_id": slurm_job_id, "node": node, "gpu": "all", "comm_name": "commbench",
            "n_nodes": n_nodes, "nranks": str(int(row["world_size"])), "collective": collective,
            "message_size": bucket(int(row["size_bytes"])), "algo_proto": algo_proto, "run_id": run_id,
            "backend": row["backend"], "device": row["device"], "impl": row["impl"], "dtype": row["dtype"],
            "op": row["op"], "inplace": str(bool(row["inplace"])).lower(), "size_bytes": str(int(row["size_bytes"])),
            "timing": row["timing"], "env": row["env"] if isinstance(row["env"], str) else ""}


def assert_collective_samples(families: dict, rows: pd.DataFrame, **labels) -> None:
    """Each row gives one sample per family whose column it has, with exactly the expected labels and its value."""
    for name, column in COLLECTIVE_VALUES.items():
        expected = {frozenset(collective_labels(row, **labels).items()): float(row[column])
                    for _, row in rows.iterrows() if pd.notna(row[column])}
        got = by_labels(families[name], run_id=labels["run_id"], node=labels["node"]) if name in families else {}
        assert got.keys() == expected.keys(), name
        for key, value in expected.items():
            assert got[key] == pytest.approx(value, rel=1e-12), name


def end_time(run_dir: Path) -> float:
    return datetime.fromisoformat(store.read_meta(run_dir)["end_time"]).timestamp()


def import_log(path: Path, out: Path, run_id: str, *args: str) -> Path:
    result = invoke(["import", "nccl-tests", str(path), "--out", str(out), "--run-id", run_id, "-q", *args])
    assert result.exit_code in (0, 1), result.stderr  # 1: the log itself reports wrong results
    return out / run_id


@pytest.mark.no_process
def test_an_imported_nccl_tests_log_carries_the_inspector_labels(tmp_path):
    run = import_log(TREE_SIMPLE_LOG, tmp_path, "tree", "--env", "NCCL_ALGO=Tree", "--env", "NCCL_PROTO=Simple")
    families = exported(str(run))
    assert set(families) == {*INSPECTOR, WRONG, RUN_END}  # nccl-tests prints no confidence interval
    rows = store.read_results(run, get_kind("collective"))
    assert len(rows) == 50 and {8, 1024, 1024**2} <= set(rows["size_bytes"])
    assert_collective_samples(families, rows, run_id="tree", node="lab", n_nodes="1", collective="AllReduce",
                              algo_proto="TREE_SIMPLE")
    assert by_labels(families[RUN_END]) == {
        frozenset({"run_id": "tree", "kind": "collective", "source": "nccl-tests", "status": "complete"}.items()):
            end_time(run)}


@pytest.mark.no_process
def test_a_two_node_log_gives_a_sample_per_node(tmp_path):
    run = import_log(TWO_NODE_LOG, tmp_path, "h100")
    families = exported(str(run))
    rows = store.read_results(run, get_kind("collective"))
    for node in ("ztan-mig-235z", "ztan-mig-gq73"):  # the hosts of the log's rank lines
        assert_collective_samples(families, rows, run_id="h100", node=node, n_nodes="2", collective="AllReduce",
                                  algo_proto="unknown_unknown")
    assert len(families["nccl_bus_bandwidth_gbs"].samples) == 2 * len(rows)


@pytest.mark.no_process
def test_zero_byte_rows_give_no_sample(tmp_path):
    # 12 ranks: all_gather's and reduce_scatter's smallest sizes hold no element per rank and print as 0 B, twice
    run = import_log(ZERO_BYTE_LOG, tmp_path, "v100")
    rows = store.read_results(run, get_kind("collective"))
    assert (rows["size_bytes"] == 0).sum() == 12
    families = exported(str(run))
    samples = families["nccl_bus_bandwidth_gbs"].samples
    assert len(samples) == (rows["size_bytes"] > 0).sum()
    assert {sample.labels["collective"] for sample in samples} == {"AllGather", "AllReduce", "Broadcast", "Reduce",
                                                                  "ReduceScatter"}
    assert "0B" not in {sample.labels["message_size"] for sample in samples}


@pytest.fixture(scope="module")
def sweep_run(tmp_path_factory) -> Path:
    """The brief gloo sweep, under two environment combinations: one gloo refuses (no such interface: its rows are
    noted "not available: ..." and have no figures), one it measures."""
    out = tmp_path_factory.mktemp("export-sweep")
    completed = commbench_here("sweep", "-c", "all_reduce", "--sizes", "64K,256K", "--iters", "6", "--backend", "gloo",
                               "--device", "cpu", "--env-axis", f"GLOO_SOCKET_IFNAME={MISSING_INTERFACE},lo",
                               "--out", str(out), "--run-id", "x")
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    return out / "x"


@pytest.mark.distributed
def test_a_sweep_exports_its_measured_rows_and_not_its_refused_ones(sweep_run):
    families = exported(str(sweep_run))
    assert set(families) == {*INSPECTOR, *CI, WRONG, RUN_END}
    rows = store.read_results(sweep_run, get_kind("collective"))
    measured = rows[rows["env"] == "GLOO_SOCKET_IFNAME=lo"]
    assert len(measured) == 2 and len(rows) == 4
    meta = store.read_meta(sweep_run)
    assert_collective_samples(families, measured, run_id="x", node=meta["hosts"][0], n_nodes="1",
                              collective="AllReduce", algo_proto="unknown_unknown",  # gloo reads no NCCL_ALGO
                              slurm_job_id=meta.get("slurm_job_id") or "unknown")
    for name in (*INSPECTOR, *CI, WRONG):
        assert {sample.labels["env"] for sample in families[name].samples} == {"GLOO_SOCKET_IFNAME=lo"}
    assert [sample.value for sample in families[RUN_END].samples] == [end_time(sweep_run)]


@pytest.mark.distributed
def test_out_replaces_the_file_atomically_with_what_stdout_shows(sweep_run, tmp_path):
    shown = invoke(["export", "prometheus", str(sweep_run)]).stdout
    out = tmp_path / "textfile" / "commbench.prom"
    out.parent.mkdir()
    out.write_text("stale exposition\n")
    result = invoke(["export", "prometheus", str(sweep_run), "--out", str(out)])
    assert result.exit_code == 0 and result.stderr == "", result.stderr
    lines = shown.count("\n")
    assert result.stdout == f"# written: {out} ({lines} lines)\n"
    assert out.read_text() == shown and oct(out.stat().st_mode & 0o777) == "0o644"
    assert [path.name for path in out.parent.iterdir()] == ["commbench.prom"]  # no temporary left beside it
    unread = tmp_path / "textfile" / "commbench.txt"
    result = invoke(["export", "prometheus", str(sweep_run), "--out", str(unread)])
    assert result.exit_code == 0 and unread.read_text() == shown
    assert result.stderr.startswith("commbench: warning: --out") and "reads only *.prom files" in result.stderr


@pytest.mark.distributed
def test_a_suite_exports_its_sweep_and_training_benches(tmp_path_factory):
    suite = shared_report_suite(tmp_path_factory)  # a sweep (builtin and ring), a DDP and a ZeRO sweep
    families = exported(str(suite))
    assert set(families) == {*INSPECTOR, *CI, WRONG, *TRAINING, RUN_END}
    sweep = store.read_results(suite / "collective", get_kind("collective"))
    assert set(sweep["impl"]) == {"builtin", "ring"} and len(sweep) == 6
    meta = store.read_meta(suite / "collective")
    assert_collective_samples(families, sweep, run_id="suite/collective", node=meta["hosts"][0], n_nodes="1",
                              collective="AllReduce", algo_proto="unknown_unknown",
                              slurm_job_id=meta.get("slurm_job_id") or "unknown")
    for bench, kind in (("ddp", "ddp"), ("zero", "strategy")):
        rows = store.read_results(suite / bench, get_kind(kind))
        assert len(rows) == 2
        for name in TRAINING:
            expected = {}
            for _, row in rows.iterrows():
                labels = {"run_id": f"suite/{bench}", "bench": kind, "config": row["config"],
                          "strategy": row["strategy"], "impl": row["impl"], "backend": "gloo", "device": "cpu",
                          "nranks": "2", "n_nodes": "1"}
                value = row[TRAINING_MS[name]] / 1000 if name in TRAINING_MS else row["n_wrong"]
                if pd.notna(value):
                    expected[frozenset(labels.items())] = float(value)
            got = by_labels(families[name], run_id=f"suite/{bench}")
            assert got.keys() == expected.keys() and expected, name
            assert all(got[key] == pytest.approx(value, rel=1e-12) for key, value in expected.items()), name
    ends = {sample.labels["run_id"]: sample.value for sample in families[RUN_END].samples}
    assert ends == {f"suite/{bench}": end_time(suite / bench) for bench in ("collective", "ddp", "zero")}


@pytest.mark.distributed
def test_a_hunt_on_one_machine_names_its_node_healthy(tmp_path):
    out = tmp_path / "results"
    completed = commbench_here("hunt", "--nproc", "2", "--intra-sizes", "64K", "--iters", "6", "--backend", "gloo",
                               "--device", "cpu", "--out", str(out), "--run-id", "h", cwd=tmp_path)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    families = exported(str(out / "h"))
    host = store.read_meta(out / "h")["hosts"][0]
    assert set(families) == {"commbench_hunt_suspect_node", RUN_END}  # one node: no pair, no link
    assert by_labels(families["commbench_hunt_suspect_node"]) == {frozenset({"run_id": "h", "node": host}.items()): 0}


@pytest.mark.distributed
def test_a_run_of_a_kind_without_metrics_is_refused(tmp_path):
    completed = commbench_here("p2p", "--nproc", "2", "--sizes", "8", "--iters", "6", "--backend", "gloo", "--device",
                               "cpu", "--out", str(tmp_path / "results"), "--run-id", "p", cwd=tmp_path)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    assert_refused(invoke(["export", "prometheus", str(tmp_path / "results" / "p")]),
                   fragment="which has no Prometheus metrics; export collective sweeps and imports")


@pytest.mark.no_process
def test_bad_input_is_refused_in_one_line(tmp_path):
    run = import_log(TWO_NODE_LOG, tmp_path / "a", "same")
    twin = import_log(TWO_NODE_LOG, tmp_path / "b", "same")
    empty = tmp_path / "empty"
    empty.mkdir()
    unknown = tmp_path / "unknown"
    shutil.copytree(run, unknown)
    store.update_meta(unknown, kind="warp")  # a run written by a newer commbench, of a kind this one lacks
    no_rows = tmp_path / "no-rows"
    shutil.copytree(run, no_rows)
    (no_rows / store.RESULTS_FILE).unlink()  # a run that failed before its first row
    store.update_meta(no_rows, run_id="no-rows")
    folder = tmp_path / "textfile"
    folder.mkdir()
    for args, fragment in (
            ([str(empty)], "meta.json does not exist"),
            ([str(tmp_path / "absent")], "does not exist"),
            ([str(TWO_NODE_LOG)], "is a file where commbench expects a run folder"),
            ([str(run), str(run)], "is given twice"),
            ([str(run), str(twin)], "both have run_id 'same'"),
            ([str(unknown)], "bench kind 'warp' is not known"),
            ([str(no_rows)], "no result rows to export"),
            ([str(run), "--out", str(folder)], "is a folder"),
            ([str(run), "--out", str(tmp_path / "missing" / "commbench.prom")], "cannot write --out"),
            ([], "Missing argument")):
        assert_refused(invoke(["export", "prometheus", *args]), fragment=fragment, left_empty=[folder])
